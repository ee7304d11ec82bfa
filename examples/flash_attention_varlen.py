"""Flash attention over variable-length sequences (`cu_seqlens`, as FlashAttention's varlen functions take
them), forward and backward, as dsl.tile kernels: sequences of any lengths packed one after another,
causal or not, head dims 64, 128 and 256, grouped-query or not, f16/bf16 inputs with f32 accumulation,
checked against float64 NumPy on the CPU simulator and torch autograd of SDPA (one call per sequence) on
the GPU.

    python examples/flash_attention_varlen.py     # GPU when present, else the simulator (--simulate)

Layout: q is (total, H*D), k and v (total, H_kv*D): the (total, H, D) tensors FlashAttention's varlen
functions take, viewed 2-D; sequence b is rows cu_seqlens[b]:cu_seqlens[b+1]. Each tile block owns BM
packed rows of one head (grid: row blocks x heads), so the output partition is an ordinary one and no
two blocks ever write one element, whatever cu_seqlens holds. A block may straddle sequences: each row
carries its sequence's bounds (`starts`, `ends`, one i32 each per packed row, made on the device by
`sequence_bounds` from cu_seqlens), a row attends to keys in [start, end) (and at most its own position
when causal), and the block walks the key blocks from its rows' smallest start to their largest end.
Rows that see no key in a block keep a running maximum of -inf; their exponent uses 0 instead, so a
fully masked block adds nothing rather than NaN. A malformed cu_seqlens (not rising, not ending at
`total`) gives wrong numbers, never an access outside the arrays (the loads pad, the stores are the
partitions' own tiles) nor a loop longer than the array (sequence_bounds clamps every bound into
[0, total]); host-readable cu_seqlens are checked before anything runs.

The products run on the tensor cores as examples/flash_attention.py's do (wgmma on sm_90, mma.sync on
sm_80; the cp.async pipeline by default, the TMA ring under `loop_pipeline="tma"`). The warp-specialised
split (`ws`) does not apply: its producer warpgroup cannot compute loop bounds that come from loads.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bridge import DTypeError, ShapeRelationError
from dsl import TypeVar, f32, i32, tile

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import flash_attention as fwd  # noqa: E402  (a sibling example, not a package)
import flash_attention_bwd as bwd  # noqa: E402

E = TypeVar("E")
G = TypeVar("G")
LOG2E = fwd.LOG2E
LN2 = fwd.LN2
FAR = 2 ** 30                   # `starts` padding past the last row: above every real start, so min() ignores it
BOUNDS_ROWS = 128               # packed rows a sequence_bounds block fills
BOUNDS_CHUNK = 64               # cu_seqlens entries it compares a step
PRE_ROWS = 64                   # rows a preprocess block owns
# Tiles (rows a block owns, rows it streams) per head dim: the largest ptxas assembles without spills on
# sm_90a (wgmma where 64 rows a block allow it) and sm_80 (mma.sync), grouped (4 query heads a key/value
# head) or not, measured with `ptxas -v` on 2026-12-04. The row bounds and masks cost registers the
# fixed-length kernels do not spend, so some tiles are smaller than theirs: the D64 forward streams 128
# keys on sm_80 too (128 x 64 spills 28 bytes there), the D256 forward 64 (32 x 128 spills 52 on sm_90a),
# dK/dV streams 32 query rows at D64 and 16 at D128 (64 x 32 spills 40 bytes at D128 on sm_90a).
# Left in (pinned by interop_tests/dsl_tile/test_flash_attention_varlen.py): grouped dK/dV spills 24
# bytes at D128 on sm_90a and 48 at D64 on sm_80, for the group loop's counters.
FWD_TILES = {64: (64, 128), 128: (64, 64), 256: (32, 64)}
DKDV_TILES = {64: (64, 32), 128: (64, 16), 256: (32, 16)}
DQ_TILES = {64: (64, 64), 128: (64, 32), 256: (32, 16)}
# The fused backward (flash_bwd_varlen_fused) holds dK and dV, the bounds and a dQ tile at once: its
# largest tiles without spills, grouped, on sm_90a (2026-12-05): 64 x 16 at D64 (wgmma for dK/dV; 48
# bytes on sm_80, pinned), 32 x 32 at D128 (mma.sync; 64 x 16 spills 108 bytes), 16 x 16 at D256.
FUSED_TILES = {64: (64, 16), 128: (32, 32), 256: (16, 16)}


# ------------------------------------------------------------------------------------- sequence bounds
@tile.kernel
def sequence_bounds(cu_seqlens: tile.Array[i32, 1], nseq: i32, starts: tile.Partition[i32, 1],
                    ends: tile.Partition[i32, 1], chunk: tile.Constant):
    """Each packed row's sequence bounds: b = #{k in 1..nseq : cu_seqlens[k] <= row}, then
    starts = cu_seqlens[b], ends = cu_seqlens[b + 1] (rows past cu_seqlens[nseq]: an empty range), each
    clamped into [0, total]: offsets on the device are never checked, and a bound far outside would
    make the attention kernels walk that many blocks (of padding)."""
    (n,) = starts.tile_shape
    row = tile.bid(0) * n + tile.arange(n)
    seg = tile.zeros((n,), i32)
    for c in range(tile.cdiv(nseq, chunk)):
        at = 1 + c * chunk + tile.arange(chunk)
        edge = tile.gather(cu_seqlens, at, padding=FAR, mask=at <= nseq)
        seg = seg + tile.sum(edge[None, :] <= row[:, None], axis=1)
    total = starts.shape[0]
    starts.store(tile.minimum(tile.maximum(tile.gather(cu_seqlens, seg), 0), total))
    ends.store(tile.minimum(tile.maximum(tile.gather(cu_seqlens, seg + 1, mask=seg < nseq), 0), total))


# ------------------------------------------------------------------------------------------- forward
@tile.func
def varlen_step(q, k, v, qt, m, l, acc, j, lo, hi, scale2, bn, d, kv_head, masked):
    """Key block j of the online softmax; `masked`: keys outside a row's [lo, hi) count for nothing."""
    s = tile.matmul(qt, tile.transpose(tile.load(k, (j, kv_head), (bn, d))))
    if masked:
        c = j * bn + tile.arange(bn)[None, :]
        s = tile.where((c >= lo[:, None]) & (c < hi[:, None]), s * scale2, -tile.inf)
        m_new = tile.maximum(m, tile.max(s, axis=1))
        m_use = tile.where(m_new == -tile.inf, 0.0, m_new)
        p = tile.exp2(s - m_use[:, None])
        alpha = tile.exp2(m - m_use)
    else:                                       # every row sees every key: no mask, no -inf row
        s = s * scale2
        m_new = tile.maximum(m, tile.max(s, axis=1))
        p = tile.exp2(s - m_new[:, None])
        alpha = tile.exp2(m - m_new)
    l = l * alpha + tile.sum(p, axis=1)
    acc = acc * alpha[:, None] + tile.matmul(p.astype(q.dtype), tile.load(v, (j, kv_head), (bn, d)))
    return m_new, l, acc


@tile.func
def query_block(starts, ends, bm, causal, group):
    """This block's row block i and head h, the head's key/value head, and each of its BM rows' key
    bounds [lo, hi) (causal: up to the row itself); padding rows past the end get an empty range."""
    i = tile.bid(0)
    h = tile.bid(1)
    kv_head = h
    if group != 1:                              # grouped-query attention: the group's key/value head
        kv_head = h // group
    lo = tile.load(starts, (i,), (bm,), padding=FAR)
    hi = tile.load(ends, (i,), (bm,), padding=0)
    if causal:                                  # no row sees a key after itself
        hi = tile.minimum(hi, i * bm + tile.arange(bm) + 1)
    return i, h, kv_head, lo, hi


@tile.func
def attend_rows_varlen(q, k, v, starts, ends, scale, bm, d, bn, causal, group):
    """This block's BM packed query rows of head bid(1) against the keys of their own sequences: the
    running row maximum `m` (base 2), the normaliser `l` and the unnormalised output `acc`."""
    i, h, kv_head, lo, hi = query_block(starts, ends, bm, causal, group)
    k_lo = tile.min(lo)
    k_hi = tile.max(hi)
    qt = tile.load(q, (i, h), (bm, d))
    m = tile.full((bm,), -tile.inf, f32)
    l = tile.zeros((bm,), f32)
    acc = tile.zeros((bm, d), f32)
    scale2 = scale * LOG2E
    for j in range(k_lo // bn, tile.cdiv(k_hi, bn)):
        m, l, acc = varlen_step(q, k, v, qt, m, l, acc, j, lo, hi, scale2, bn, d, kv_head, True)
    return m, l, acc


@tile.func
def attend_rows_varlen_edges(q, k, v, starts, ends, scale, bm, d, bn, causal, group):
    """attend_rows_varlen with masks only where they can matter: the key blocks every row of the block
    sees whole (from the largest start to the smallest end) run unmasked, between a masked lead and a
    masked tail (a sequence's first block, the causal diagonal, a neighbour's keys)."""
    i, h, kv_head, lo, hi = query_block(starts, ends, bm, causal, group)
    real = i * bm + tile.arange(bm) < q.shape[0]     # padding rows past the end set no bound
    j0 = tile.min(lo) // bn
    j3 = tile.cdiv(tile.max(hi), bn)
    j1 = tile.minimum(tile.maximum(tile.cdiv(tile.max(tile.where(real, lo, 0)), bn), j0), j3)
    j2 = tile.minimum(tile.maximum(tile.min(tile.where(real, hi, FAR)) // bn, j1), j3)
    qt = tile.load(q, (i, h), (bm, d))
    m = tile.full((bm,), -tile.inf, f32)
    l = tile.zeros((bm,), f32)
    acc = tile.zeros((bm, d), f32)
    scale2 = scale * LOG2E
    for j in range(j0, j1):
        m, l, acc = varlen_step(q, k, v, qt, m, l, acc, j, lo, hi, scale2, bn, d, kv_head, True)
    for j in range(j1, j2):
        m, l, acc = varlen_step(q, k, v, qt, m, l, acc, j, lo, hi, scale2, bn, d, kv_head, False)
    for j in range(j2, j3):
        m, l, acc = varlen_step(q, k, v, qt, m, l, acc, j, lo, hi, scale2, bn, d, kv_head, True)
    return m, l, acc


@tile.kernel
def flash_fwd_varlen(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], starts: tile.Array[i32, 1],
                     ends: tile.Array[i32, 1], o: tile.Partition[G, 2], scale: f32, bn: tile.Constant,
                     causal: tile.Constant, group: tile.Constant):
    bm, d = o.tile_shape
    m, l, acc = attend_rows_varlen(q, k, v, starts, ends, scale, bm, d, bn, causal, group)
    o.store(acc / l[:, None])


@tile.kernel
def flash_fwd_varlen_lse(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2],
                         starts: tile.Array[i32, 1], ends: tile.Array[i32, 1], o: tile.Partition[G, 2],
                         lse: tile.Partition[f32, 2], scale: f32, bn: tile.Constant, causal: tile.Constant,
                         group: tile.Constant):
    """flash_fwd_varlen that also stores each (row, head)'s natural log-sum-exp into the (total, H) `lse`,
    whose (BM, 1) tiles are the rows of o's (BM, D) ones: the backward's softmax statistic."""
    bm, d = o.tile_shape
    m, l, acc = attend_rows_varlen(q, k, v, starts, ends, scale, bm, d, bn, causal, group)
    o.store(acc / l[:, None])
    lse.store(((m + tile.log2(l)) * LN2)[:, None])


@tile.kernel
def flash_fwd_varlen_lse_edges(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2],
                               starts: tile.Array[i32, 1], ends: tile.Array[i32, 1], o: tile.Partition[G, 2],
                               lse: tile.Partition[f32, 2], scale: f32, bn: tile.Constant, causal: tile.Constant,
                               group: tile.Constant):
    """flash_fwd_varlen_lse with masks on the edge key blocks only (attend_rows_varlen_edges): the same
    arguments, results equal up to rounding. Not the default until a GPU run says it is faster (three
    loops, three pipeline starts, against one masked loop); benchmarks/attention.py --varlen times both.
    No spills at D64 and D128 (sm_90a, sm_80); at D256 its three loops spill 4-16 bytes."""
    bm, d = o.tile_shape
    m, l, acc = attend_rows_varlen_edges(q, k, v, starts, ends, scale, bm, d, bn, causal, group)
    o.store(acc / l[:, None])
    lse.store(((m + tile.log2(l)) * LN2)[:, None])


# ------------------------------------------------------------------------------------------ backward
@tile.func
def delta_rows(o, dout, br, d):
    """(BR, 1) of Delta = sum_d dO O for the block's rows bid(0) of head bid(1)."""
    i = tile.bid(0)
    h = tile.bid(1)
    prod = tile.load(o, (i, h), (br, d)).astype(f32) * tile.load(dout, (i, h), (br, d)).astype(f32)
    return tile.sum(prod, axis=1)[:, None]


@tile.kernel
def varlen_bwd_preprocess(o: tile.Array[G, 2], dout: tile.Array[E, 2], delta: tile.Partition[f32, 2],
                          d: tile.Constant):
    """Delta = sum_d dO O for each (row, head): the (total, H) row term of dS = P * (dP - Delta)."""
    br, _ = delta.tile_shape
    delta.store(delta_rows(o, dout, br, d))


@tile.func
def dkdv_products_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, qi, doi, h, i, lo, hi, scale2, bm):
    """dK and dV of query block i of head h (its Q and dO tiles qi, doi) against this block's keys, key c
    seen by the queries in [lo_c, hi_c); also dS^T, which the fused backward multiplies into dQ."""
    r = i * bm + tile.arange(bm)[None, :]
    st = tile.where((r >= lo[:, None]) & (r < hi[:, None]), tile.matmul(kt, tile.transpose(qi)) * scale2, -tile.inf)
    lse2 = tile.reshape(tile.load(lse, (i, h), (bm, 1)), (bm,)) * LOG2E
    pt = tile.exp2(st - lse2[None, :])                                                  # P^T (bn, bm)
    dv_acc = dv_acc + tile.matmul(pt.astype(q.dtype), doi)
    dpt = tile.matmul(vt, tile.transpose(doi))                                          # dP^T (bn, bm)
    dst = pt * (dpt - tile.reshape(tile.load(delta, (i, h), (bm, 1)), (bm,))[None, :])
    dk_acc = dk_acc + tile.matmul(dst.astype(q.dtype), qi)
    return dk_acc, dv_acc, dst


@tile.func
def dkdv_step_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, h, i, lo, hi, scale2, bm, bn, d):
    """Query block i of head h against this block's keys. Q and dO are named once and read by two products
    each, as Triton's backward writes them: load forwarding (dsl/tile/forward.py) gives each product its
    own copy, as if each loaded its own."""
    qi = tile.load(q, (i, h), (bm, d))
    doi = tile.load(dout, (i, h), (bm, d))
    dk_acc, dv_acc, _ = dkdv_products_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, qi, doi, h, i, lo, hi,
                                             scale2, bm)
    return dk_acc, dv_acc


@tile.func
def fused_step_varlen(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, h, i, lo, hi, scale2, scale, bm, bn, d):
    """dkdv_step_varlen, and dQ_i += dS K scale added into query block i's rows of head h (the fused
    backward: dq is a tile.Atomic f32 array)."""
    qi = tile.load(q, (i, h), (bm, d))
    doi = tile.load(dout, (i, h), (bm, d))
    dk_acc, dv_acc, dst = dkdv_products_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, qi, doi, h, i, lo, hi,
                                               scale2, bm)
    tile.atomic_add(dq, (i, h), tile.matmul(tile.transpose(dst.astype(q.dtype)), kt) * scale)
    return dk_acc, dv_acc


@tile.func
def key_rows_varlen(k, v, starts, ends, bn, d, causal):
    """A dK/dV block's BN packed key rows of key/value head bid(1): the head, each key's query range
    [lo, hi) (from the first query that sees it when causal), the query rows any of them spans, K and V."""
    j = tile.bid(0)
    kvh = tile.bid(1)
    lo = tile.load(starts, (j,), (bn,), padding=FAR)
    hi = tile.load(ends, (j,), (bn,), padding=0)
    if causal:                                  # no query before a key sees it
        lo = tile.maximum(lo, j * bn + tile.arange(bn))
    q_lo = tile.min(lo)
    q_hi = tile.max(hi)
    kt = tile.load(k, (j, kvh), (bn, d))
    vt = tile.load(v, (j, kvh), (bn, d))
    return kvh, lo, hi, q_lo, q_hi, kt, vt


@tile.kernel
def flash_bwd_dkdv_varlen(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                          lse: tile.Array[f32, 2], delta: tile.Array[f32, 2], starts: tile.Array[i32, 1],
                          ends: tile.Array[i32, 1], dk: tile.Partition[G, 2], dv: tile.Partition[G, 2],
                          scale: f32, bm: tile.Constant, causal: tile.Constant, group: tile.Constant):
    """Each block owns BN packed key rows of key/value head bid(1) and walks the query blocks of their
    sequences (from the keys' smallest start, or the first key when causal, to their largest end), for
    each of the `group` query heads it serves; the sums stay in registers (no atomics)."""
    bn, d = dk.tile_shape
    kvh, lo, hi, q_lo, q_hi, kt, vt = key_rows_varlen(k, v, starts, ends, bn, d, causal)
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    scale2 = scale * LOG2E
    if group == 1:
        for i in range(q_lo // bm, tile.cdiv(q_hi, bm)):
            dk_acc, dv_acc = dkdv_step_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, kvh, i, lo, hi,
                                              scale2, bm, bn, d)
    else:
        for g in range(group):                  # query head kvh * group + g
            for i in range(q_lo // bm, tile.cdiv(q_hi, bm)):
                dk_acc, dv_acc = dkdv_step_varlen(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, kvh * group + g, i,
                                                  lo, hi, scale2, bm, bn, d)
    dk.store(dk_acc * scale)
    dv.store(dv_acc)


@tile.kernel
def varlen_bwd_preprocess_zero(o: tile.Array[G, 2], dout: tile.Array[E, 2], delta: tile.Partition[f32, 2],
                               dq: tile.Partition[f32, 2], d: tile.Constant):
    """varlen_bwd_preprocess, and the block's rows of dQ (one head) set to zero for the fused backward."""
    br, _ = delta.tile_shape
    delta.store(delta_rows(o, dout, br, d))
    dq.store(tile.zeros((br, d), f32))


@tile.kernel
def flash_bwd_varlen_fused(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                           lse: tile.Array[f32, 2], delta: tile.Array[f32, 2], starts: tile.Array[i32, 1],
                           ends: tile.Array[i32, 1], dq: tile.Atomic[f32, 2], dk: tile.Partition[G, 2],
                           dv: tile.Partition[G, 2], scale: f32, bm: tile.Constant, causal: tile.Constant,
                           group: tile.Constant):
    """flash_bwd_dkdv_varlen that also adds each query block's dQ into `dq` (zeroed by
    varlen_bwd_preprocess_zero): the whole backward in one pass over the keys, as
    examples/flash_attention_bwd_fused.py does for one length. Query rows of a neighbouring sequence
    in a block get dS = 0 (masked), so they add nothing."""
    bn, d = dk.tile_shape
    kvh, lo, hi, q_lo, q_hi, kt, vt = key_rows_varlen(k, v, starts, ends, bn, d, causal)
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    scale2 = scale * LOG2E
    for g in range(group):                      # query head kvh * group + g
        for i in range(q_lo // bm, tile.cdiv(q_hi, bm)):
            dk_acc, dv_acc = fused_step_varlen(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, kvh * group + g, i,
                                               lo, hi, scale2, scale, bm, bn, d)
    dk.store(dk_acc * scale)
    dv.store(dv_acc)


@tile.kernel
def flash_bwd_dq_varlen(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                        lse: tile.Array[f32, 2], delta: tile.Array[f32, 2], starts: tile.Array[i32, 1],
                        ends: tile.Array[i32, 1], dq: tile.Partition[G, 2], scale: f32, bn: tile.Constant,
                        causal: tile.Constant, group: tile.Constant):
    bm, d = dq.tile_shape
    i, h, kv_head, lo, hi = query_block(starts, ends, bm, causal, group)
    k_lo = tile.min(lo)
    k_hi = tile.max(hi)
    qt = tile.load(q, (i, h), (bm, d))
    dot = tile.load(dout, (i, h), (bm, d))
    lse2 = tile.reshape(tile.load(lse, (i, h), (bm, 1)), (bm,)) * LOG2E
    delta_i = tile.reshape(tile.load(delta, (i, h), (bm, 1)), (bm,))
    acc = tile.zeros((bm, d), f32)
    scale2 = scale * LOG2E
    for j in range(k_lo // bn, tile.cdiv(k_hi, bn)):
        c = j * bn + tile.arange(bn)[None, :]
        s = tile.where((c >= lo[:, None]) & (c < hi[:, None]), tile.matmul(qt, tile.transpose(tile.load(k, (j, kv_head), (bn, d)))) * scale2,
                       -tile.inf)
        p = tile.exp2(s - lse2[:, None])
        dp = tile.matmul(dot, tile.transpose(tile.load(v, (j, kv_head), (bn, d))))
        ds = p * (dp - delta_i[:, None])
        acc = acc + tile.matmul(ds.astype(q.dtype), tile.load(k, (j, kv_head), (bn, d)))
    dq.store(acc * scale)


# ------------------------------------------------------------------------------------------- host side
def _host_values(x: Any) -> np.ndarray | None:
    """x's values when they can be read without a device copy (NumPy, a CPU torch tensor), else None."""
    if isinstance(x, np.ndarray):
        return x
    if type(x).__module__.startswith("torch") and getattr(getattr(x, "device", None), "type", None) == "cpu":
        return x.numpy()
    return None


def check_cu_seqlens(cu_seqlens: Any, total: int) -> int:
    """The number of sequences of `cu_seqlens` (1-D int32, B + 1 offsets), else a typed error naming it.
    Host-readable offsets must start at 0, never fall, and end at `total`; device ones are not read (that
    would wait for the device), and a malformed one gives wrong numbers, never a stray access."""
    shape = tuple(getattr(cu_seqlens, "shape", ()))
    if len(shape) != 1 or shape[0] < 2:
        raise ShapeRelationError(f"cu_seqlens: expected B + 1 >= 2 offsets (1-D), got shape {shape}",
                                 arg_name="cu_seqlens")
    if not str(getattr(cu_seqlens, "dtype", "")).endswith("int32"):
        raise DTypeError(f"cu_seqlens: expected int32, got {getattr(cu_seqlens, 'dtype', None)}",
                         arg_name="cu_seqlens")
    host = _host_values(cu_seqlens)
    if host is not None and (host[0] != 0 or host[-1] != total or (np.diff(host) < 0).any()):
        raise ShapeRelationError(f"cu_seqlens: expected offsets rising from 0 to the {total} packed rows, got "
                                 f"{host.tolist() if host.size <= 8 else host[:4].tolist() + ['...', int(host[-1])]}",
                                 arg_name="cu_seqlens")
    return shape[0] - 1


def bounds_args(cu_seqlens: Any, starts: Any, ends: Any) -> tuple:
    """sequence_bounds' arguments: `starts` and `ends`, (total,) int32, filled for each packed row."""
    total = tuple(getattr(starts, "shape", ()))
    if len(total) != 1:
        raise ShapeRelationError(f"starts: expected (total,), got shape {total}", arg_name="starts")
    for name, x in (("starts", starts), ("ends", ends)):
        if tuple(x.shape) != total:
            raise ShapeRelationError(f"{name}: expected shape {total} like starts, got {tuple(x.shape)}",
                                     arg_name=name)
        if not str(x.dtype).endswith("int32"):
            raise DTypeError(f"{name}: expected int32, got {x.dtype}", arg_name=name)
    nseq = check_cu_seqlens(cu_seqlens, total[0])
    return (cu_seqlens, nseq, tile.partition(starts, (BOUNDS_ROWS,)), tile.partition(ends, (BOUNDS_ROWS,)),
            BOUNDS_CHUNK)


def _check(q: Any, heads: int, kv_heads: int | None, starts: Any, ends: Any, named: dict,
           per_row: dict) -> tuple[int, int, int]:
    """(total, D, group) of (total, H*D) q and its companions, else a typed error naming the argument:
    `named` arrays are (total, H*D) or, for k, v, dk, dv, (total, H_kv*D); `per_row` ones (total, H) f32."""
    if q.ndim != 2 or isinstance(heads, bool) or not isinstance(heads, int) or heads < 1 or q.shape[1] % heads:
        raise ShapeRelationError(f"q: expected (total, heads * head_dim) with heads={heads!r} dividing its "
                                 f"columns, got shape {tuple(q.shape)}", arg_name="q")
    total, d = q.shape[0], q.shape[1] // heads
    if d not in fwd.TILES:
        raise ShapeRelationError(f"q: head dim {d} not supported (expected one of {sorted(fwd.TILES)})",
                                 arg_name="q")
    hk = heads if kv_heads is None else kv_heads
    if isinstance(hk, bool) or not isinstance(hk, int) or hk < 1 or heads % hk:
        raise ShapeRelationError(f"kv_heads: expected a positive divisor of the {heads} query heads, got "
                                 f"{kv_heads!r}", arg_name="kv_heads")
    for name, x in named.items():
        want = (total, (hk if name in ("k", "v", "dk", "dv") else heads) * d)
        if tuple(x.shape) != want:
            raise ShapeRelationError(f"{name}: expected shape {want}, got {tuple(x.shape)}", arg_name=name)
    for name, x in per_row.items():
        if tuple(x.shape) != (total, heads):
            raise ShapeRelationError(f"{name}: expected shape {(total, heads)} (one value per row and head), "
                                     f"got {tuple(x.shape)}", arg_name=name)
        if not str(x.dtype).endswith("float32"):
            raise DTypeError(f"{name}: expected float32, got {x.dtype}", arg_name=name)
    for name in ("k", "v", "dout"):
        if name in named and str(named[name].dtype) != str(q.dtype):
            raise DTypeError(f"{name}: expected q's dtype {q.dtype}, got {named[name].dtype}", arg_name=name)
    for name, x in (("starts", starts), ("ends", ends)):
        if tuple(x.shape) != (total,) or not str(x.dtype).endswith("int32"):
            raise ShapeRelationError(f"{name}: expected ({total},) int32 (sequence_bounds' output), got shape "
                                     f"{tuple(x.shape)} {x.dtype}", arg_name=name)
    return total, d, heads // hk


def tiles(d: int, tensor_cores: bool | None = None) -> dict[str, tuple[int, int]]:
    """{"fwd": (query rows, key rows), "dkdv" and "fused": (key rows, query rows), "dq": (query rows, key rows)} for head
    dim d: the tables above on the tensor cores, the fixed-length kernels' FMA tiles under
    KB_TILE_TC_MATMUL=0 (or tensor_cores=False). No sequence length to divide: block edges are masked."""
    from dsl.tile.compile import tc_matmul_enabled
    if tc_matmul_enabled() if tensor_cores is None else tensor_cores:
        return {"fwd": FWD_TILES[d], "dkdv": DKDV_TILES[d], "dq": DQ_TILES[d], "fused": FUSED_TILES[d]}
    back = bwd.PORTABLE_TILES[d][0]
    return {"fwd": fwd.PORTABLE_TILES[d][0], "dkdv": back, "dq": back, "fused": back}


def launch_args(q: Any, k: Any, v: Any, out: Any, starts: Any, ends: Any, heads: int, causal: bool,
                kv_heads: int | None = None, scale: float | None = None, lse: Any = None,
                tensor_cores: bool | None = None) -> tuple:
    """flash_fwd_varlen's arguments (flash_fwd_varlen_lse's when `lse`, (total, H) f32, is given) for
    (total, H*D) q and out, (total, H_kv*D) k and v, and the per-row bounds sequence_bounds made."""
    per_row = {} if lse is None else {"lse": lse}
    _, d, group = _check(q, heads, kv_heads, starts, ends, {"k": k, "v": v, "out": out}, per_row)
    bm, bn = tiles(d, tensor_cores)["fwd"]
    sc = float(scale if scale is not None else d ** -0.5)
    parts = (tile.partition(out, (bm, d)),) + (() if lse is None else (tile.partition(lse, (bm, 1)),))
    return (q, k, v, starts, ends, *parts, sc, bn, bool(causal), group)


def backward_launch_args(q: Any, k: Any, v: Any, o: Any, dout: Any, lse: Any, delta: Any, starts: Any, ends: Any,
                         dq: Any, dk: Any, dv: Any, heads: int, causal: bool, kv_heads: int | None = None,
                         scale: float | None = None, tensor_cores: bool | None = None) -> list[tuple[Any, tuple]]:
    """The backward's three launches [(kernel, arguments)]: `delta` (total, H) f32 scratch the first
    fills, then dK/dV and dQ; shapes and dtypes checked before anything runs."""
    _, d, group = _check(q, heads, kv_heads, starts, ends, {"k": k, "v": v, "o": o, "dout": dout, "dq": dq,
                                                            "dk": dk, "dv": dv}, {"lse": lse, "delta": delta})
    picked = tiles(d, tensor_cores)
    kv_rows, q_step = picked["dkdv"]
    q_rows, kv_step = picked["dq"]
    sc = float(scale if scale is not None else d ** -0.5)
    return [(varlen_bwd_preprocess, (o, dout, tile.partition(delta, (PRE_ROWS, 1)), d)),
            (flash_bwd_dkdv_varlen, (q, k, v, dout, lse, delta, starts, ends, tile.partition(dk, (kv_rows, d)),
                                     tile.partition(dv, (kv_rows, d)), sc, q_step, bool(causal), group)),
            (flash_bwd_dq_varlen, (q, k, v, dout, lse, delta, starts, ends, tile.partition(dq, (q_rows, d)), sc,
                                   kv_step, bool(causal), group))]


def fused_backward_launch_args(q: Any, k: Any, v: Any, o: Any, dout: Any, lse: Any, delta: Any, starts: Any,
                               ends: Any, dq: Any, dk: Any, dv: Any, heads: int, causal: bool,
                               kv_heads: int | None = None, scale: float | None = None,
                               tensor_cores: bool | None = None, lowering: dict | None = None) -> list[tuple[Any, tuple]]:
    """The fused backward's two launches [(kernel, arguments)] for backward_launch_args' arrays: Delta and a
    zeroed dQ, then dK, dV and dQ in one kernel (dQ added atomically; `dq` must be float32). `lowering`:
    the fused kernel's switches, e.g. {"tma_store": True} for TMA reduce-adds on sm_90."""
    _, d, group = _check(q, heads, kv_heads, starts, ends, {"k": k, "v": v, "o": o, "dout": dout, "dq": dq,
                                                            "dk": dk, "dv": dv}, {"lse": lse, "delta": delta})
    if not str(dq.dtype).endswith("float32"):
        raise DTypeError(f"dq: expected float32 (blocks add into it atomically), got {dq.dtype}", arg_name="dq")
    kv_rows, q_step = tiles(d, tensor_cores)["fused"]
    sc = float(scale if scale is not None else d ** -0.5)
    fused = fwd.variant(flash_bwd_varlen_fused, lowering)
    return [(varlen_bwd_preprocess_zero, (o, dout, tile.partition(delta, (q_step, 1)), tile.partition(dq, (q_step, d)),
                                          d)),
            (fused, (q, k, v, dout, lse, delta, starts, ends, dq, tile.partition(dk, (kv_rows, d)),
                     tile.partition(dv, (kv_rows, d)), sc, q_step, bool(causal), group))]


def forward_and_backward(q: Any, k: Any, v: Any, dout: Any, cu_seqlens: Any, heads: int, causal: bool,
                         kv_heads: int | None = None, simulate: bool = False, fused: bool = False,
                         lowering: dict | None = None) -> tuple[Any, Any, Any, Any]:
    """(o, dq, dk, dv), f32, for packed (total, H*D) inputs: sequence_bounds, the forward with its
    log-sum-exp, then the backward (NumPy arrays with `simulate`, else CUDA torch tensors): three
    launches, or with `fused` two (fused_backward_launch_args, its kernel under `lowering`)."""
    total = q.shape[0]
    if simulate:
        def new(*shape, dtype=np.float32):
            return np.full(shape, np.nan if dtype == np.float32 else -1, dtype)
        i32_ = np.int32
    else:
        import torch

        def new(*shape, dtype=torch.float32):
            return torch.full(shape, float("nan") if dtype == torch.float32 else -1, device=q.device, dtype=dtype)
        i32_ = torch.int32
    starts, ends = new(total, dtype=i32_), new(total, dtype=i32_)
    o, lse, delta = new(*q.shape), new(total, heads), new(total, heads)
    dq, dk, dv = new(*q.shape), new(*k.shape), new(*v.shape)
    go = (lambda kern: kern.simulate) if simulate else (lambda kern: kern)
    go(sequence_bounds)(*bounds_args(cu_seqlens, starts, ends))
    go(flash_fwd_varlen_lse)(*launch_args(q, k, v, o, starts, ends, heads, causal, kv_heads, lse=lse))
    steps = fused_backward_launch_args(q, k, v, o, dout, lse, delta, starts, ends, dq, dk, dv, heads, causal, kv_heads,
                                       lowering=lowering) if fused else \
        backward_launch_args(q, k, v, o, dout, lse, delta, starts, ends, dq, dk, dv, heads, causal, kv_heads)
    for kern, args in steps:
        go(kern)(*args)
    return o, dq, dk, dv


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, cu_seqlens: np.ndarray, heads: int,
              causal: bool, kv_heads: int | None = None) -> tuple[np.ndarray, ...]:
    """Float64 (o, dq, dk, dv) of packed inputs, one sequence and head at a time, from bwd.reference's
    formulas (a key/value head's gradients summed over its group)."""
    hk = heads if kv_heads is None else kv_heads
    g, d = heads // hk, q.shape[1] // heads
    outs = [np.zeros(x.shape) for x in (q, q, k, v)]
    for a, e in zip(cu_seqlens[:-1], cu_seqlens[1:]):
        if e == a:
            continue
        for h in range(heads):
            qc, kc = slice(h * d, (h + 1) * d), slice((h // g) * d, (h // g + 1) * d)
            qq, kk, vv, dd = (x[a:e, c].astype(np.float64) for x, c in ((q, qc), (k, kc), (v, kc), (dout, qc)))
            outs[0][a:e, qc] = fwd.reference(qq, kk, vv, e - a, causal)
            dqh, dkh, dvh = bwd.reference(qq, kk, vv, dd, e - a, causal)
            outs[1][a:e, qc] = dqh
            outs[2][a:e, kc] += dkh
            outs[3][a:e, kc] += dvh
    return tuple(outs)


def run_simulator(lengths: list[int], heads: int, kv_heads: int, d: int, fused: bool = False) -> None:
    rng = np.random.default_rng(0)
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    total = int(cu[-1])
    q, dout = (rng.standard_normal((total, heads * d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((total, kv_heads * d)).astype(np.float32) for _ in range(2))
    for causal in (False, True):
        got = forward_and_backward(q, k, v, dout, cu, heads, causal, kv_heads, simulate=True, fused=fused)
        want = reference(q, k, v, dout, cu, heads, causal, kv_heads)
        err = max(float(np.abs(a - b).max() / np.abs(b).max()) for a, b in zip(got, want))
        print(f"simulator{' fused' if fused else ''} lengths {lengths} H{heads} H_kv{kv_heads} D{d} causal={causal}: "
              f"max |ours - NumPy| / max |NumPy| over O, dQ, dK, dV = {err:.2e}")
        assert err < 5e-3, err


def run_gpu(lengths: list[int], heads: int, kv_heads: int, d: int, fused: bool = False,
            lowering: dict | None = None) -> None:
    """bf16 packed sequences against torch autograd of SDPA in float64, one call per sequence."""
    import torch
    import torch.nn.functional as F

    import bridge
    cu = torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int32, device="cuda")
    total = int(sum(lengths))
    g = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, dout = (torch.randn(total, h * d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for h in (heads, kv_heads, kv_heads, heads))
    for causal in (False, True):
        got = forward_and_backward(q, k, v, dout, cu, heads, causal, kv_heads, fused=fused, lowering=lowering)
        refs = [torch.zeros(x.shape, dtype=torch.float64, device="cuda") for x in got]
        for a, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            x64 = [x[a:e].double().reshape(e - a, -1, d).transpose(0, 1).requires_grad_() for x in (q, k, v)]
            ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=kv_heads != heads)
            ref.backward(dout[a:e].double().reshape(e - a, heads, d).transpose(0, 1))
            for whole, part in zip(refs, (ref.detach(), *(x.grad for x in x64))):
                whole[a:e] = part.transpose(0, 1).reshape(e - a, -1)
        # relative to each whole tensor's largest value: a one-row sequence's dQ and dK are exactly 0
        worst = max(((ours - want).abs().max() / want.abs().max()).item() for ours, want in zip(got, refs))
        print(f"GPU{' fused' if fused else ''}{' ' + str(lowering) if lowering else ''} lengths {lengths} H{heads} H_kv{kv_heads} D{d} bf16 causal={causal}: "
              f"max |ours - autograd(f64)| / max |ref| = {worst:.2e}")
        assert worst < 1e-2, worst
    bridge.current_stream().synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        for d in sorted(fwd.TILES):
            run_gpu([300, 1, 1000, 64, 517], 8, 2, d)
        for d in (64, 128):                     # the fused backward, dQ's adds per element and by TMA
            run_gpu([300, 1, 1000, 64, 517], 8, 2, d, fused=True)
            run_gpu([300, 1, 1000, 64, 517], 8, 2, d, fused=True, lowering={"tma_store": True})
        print("ran on the GPU")
    else:
        for d in (64, 128):
            run_simulator([37, 1, 130, 64, 90], 2, 1, d)
            run_simulator([37, 1, 130, 64, 90], 2, 1, d, fused=True)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
