"""Flash attention (forward) as one dsl.tile kernel: online softmax over key/value blocks, causal or
not, head dims 64, 128 and 256, grouped-query or not, f16/bf16 inputs with f32 accumulation, checked against
torch.nn.functional.scaled_dot_product_attention on the GPU (against NumPy on the CPU simulator).

    python examples/flash_attention.py            # GPU when present, else the simulator

Each tile block owns BM query rows of one (batch, head): it streams the head's key/value blocks,
keeps the running row maximum `m`, normaliser `l` and output `acc` in registers, and rescales them by
exp(m_old - m_new) per block, so the S x S score matrix never exists. Scores are kept in base 2
(scaled by log2 e), so each exponential is one exp2. The arrays are (B*H*S, D) row stacks of the
(B, H, S, D) tensors; S must be a multiple of the tile rows. The output is f32, or the inputs' dtype as
SDPA returns it (half the bytes written, and no conversion after).

On the tensor cores (the default, sm_80+) the two products run as mma.sync, on sm_90 as warpgroup
MMA (wgmma, Q and P from registers, K and V from swizzled shared memory), with S, P, the row
statistics and the output accumulator in registers, and each iteration's key/value blocks are copied
one iteration ahead by cp.async (docs/tile.md); benchmarks/attention.py measures it against SDPA.
The same kernel takes the TMA-ring lowering switches (KB_TILE_LOOP_PIPELINE=tma|ws,
KB_TILE_LOOP_STAGES, KB_TILE_SETMAXNREG, KB_TILE_PRODUCT_OVERLAP; docs/tile.md), with 128 query rows
on two warpgroups as `tile.kernel(flash_fwd.pyfunc, num_warps=8)` and `tile.partition(out, (128, d))`,
and KB_TILE_FP_FUSION / KB_TILE_FTZ (the scale-and-subtract one fma, exp2 one ex2.approx.ftz: the best
rung, 128x128 `ws` with both, ran 555.9 TFLOP/s bf16 at S4096 D128 on the H200, 0.83x SDPA cuDNN, on
2026-12-04 before the scale moved after the row maximum);
`benchmarks/attention.py --ladder` times them. `flash_fwd_tuned` launches the fastest of the default and,
on sm_90, the ladder's best rungs (tile.autotune: timed on the first call of a shape, the pick kept in
the disk cache; KB_AUTOTUNE=0 takes the default).
`flash_fwd_lse` also stores each query row's log-sum-exp, which the backward needs
(examples/flash_attention_bwd.py); both kernels run one `@tile.func`, attend_rows.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from bridge.dtypes import normalize
from dsl import TypeVar, f32, i32, tile

E = TypeVar("E")
O = TypeVar("O")                                # the output's dtype: f32, or E as SDPA returns it
LOG2E = 1.4426950408889634                      # softmax(x) = 2^(x log2 e - max) / sum: the same numbers
LN2 = 0.6931471805599453                        # ln(x) = log2(x) ln 2
# (query rows BM, key rows BN) per head dim, in order of preference: the first whose BM and BN divide the
# sequence length is taken. On sm_90 the products run on warpgroup MMA when each of the 4 warps holds
# 16 query rows (BM 64): D128 64x64 ran 359 TFLOP/s against SDPA's 354 on the H200, D64 64x128 300
# against 302. On mma.sync (sm_80, or KB_TILE_WGMMA_PRODUCTS=0): at D64, 128 query rows (32 a warp, so
# each K/V fragment feeds two m-tiles) were 12% faster than 64; at D128, 64x64
# (docs/results/gpu_runs_2026-12-02_0139_flash_wgmma.md, benchmarks/attention.py --sweep). The portable
# FMA path (KB_TILE_TC_MATMUL=0, pre-sm_80): the largest that fit its 48 KiB of relayout shared memory
# without register spills (ptxas -v, sm_90).
# D256 (ptxas -v, scripts/attention_tile_sweep.py, 2026-12-04): the 64x256 f32 accumulator takes 128
# registers a thread and wgmma's Q operand 64 more, so no 64-row wgmma tile on 4 warps assembles
# without spills both causal and full; on sm_90 D256 takes 32 query rows a block (mma.sync, 232/208
# registers at 32x128, no spills). sm_80: 64x64 (254/246). Portable: 16x8 (16x16 misses the 48 KiB
# of static relayout memory by 64 bytes when causal).
WGMMA_TILES = {64: ((64, 128), (64, 64)), 128: ((64, 64),), 256: ((32, 128), (32, 64))}
TILES = {64: ((128, 64), (64, 64)), 128: ((64, 64),), 256: ((64, 64),)}
PORTABLE_TILES = {64: ((64, 32),), 128: ((32, 32),), 256: ((16, 8),)}


@tile.func
def key_blocks(m, l, acc, qt, k, v, kv0, lo, hi, row0, scale2, bm, d, bn, masked):
    """Key blocks lo..hi of this head folded into the online softmax (m, l, acc); `masked` for the
    blocks the causal diagonal crosses, where a key right of its query row scores -inf."""
    for j in range(lo, hi):
        s = tile.matmul(qt, tile.transpose(tile.load(k, (kv0 + j, 0), (bn, d))))
        if masked:
            r = row0 + tile.arange(bm)[:, None]
            c = j * bn + tile.arange(bn)[None, :]
            s = tile.where(c <= r, s * scale2, -tile.inf)
            m_new = tile.maximum(m, tile.max(s, axis=1))
            p = tile.exp2(s - m_new[:, None])
        else:                                   # max(s) c = max(s c), c > 0: then s c - m is one fma a
            m_new = tile.maximum(m, tile.max(s, axis=1) * scale2)   # score under fp_fusion (Triton's order)
            p = tile.exp2(s * scale2 - m_new[:, None])
        alpha = tile.exp2(m - m_new)
        l = l * alpha + tile.sum(p, axis=1)
        acc = acc * alpha[:, None] + tile.matmul(p.astype(v.dtype), tile.load(v, (kv0 + j, 0), (bn, d)))
        m = m_new
    return m, l, acc


@tile.func
def attend_rows(q, k, v, seq, scale, bm, d, bn, causal, group):
    """This block's BM query rows against their head's keys: the running row maximum `m` (base 2), the
    normaliser `l` and the unnormalised output `acc`, shared by flash_fwd and flash_fwd_lse. `group`
    query heads share one key/value head (grouped-query attention; 1: one each). Causal: the key blocks
    wholly left of the diagonal first, without a mask, then the blocks it crosses, masked (Triton's
    two stages; at D256 one masked loop, since two spill there on sm_90)."""
    i = tile.bid(0)
    head = (i * bm) // seq                      # which (batch, head) these rows belong to
    row0 = i * bm - head * seq                  # first query position of the tile in its sequence
    kv_head = head
    if group != 1:                              # (b H + h) // G = b H_kv + h // G: the group's key/value head
        kv_head = head // group
    qt = tile.load(q, (i, 0), (bm, d))
    m = tile.full((bm,), -tile.inf, f32)
    l = tile.zeros((bm,), f32)
    acc = tile.zeros((bm, d), f32)
    kv0 = kv_head * (seq // bn)
    scale2 = scale * LOG2E                      # scores in base 2: exp2 is one ex2.approx, exp is ~10
    if causal:                                  # blocks right of the diagonal contribute nothing
        stop = (row0 + bm + bn - 1) // bn
        diag = 0                                # D256: one masked loop (two spill on sm_90)
        if d <= 128:
            diag = row0 // bn                   # blocks before it end left of the tile's first row
            m, l, acc = key_blocks(m, l, acc, qt, k, v, kv0, 0, diag, row0, scale2, bm, d, bn, False)
        m, l, acc = key_blocks(m, l, acc, qt, k, v, kv0, diag, stop, row0, scale2, bm, d, bn, True)
    else:
        m, l, acc = key_blocks(m, l, acc, qt, k, v, kv0, 0, seq // bn, row0, scale2, bm, d, bn, False)
    return m, l, acc


@tile.kernel
def flash_fwd(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], o: tile.Partition[O, 2],
              seq: i32, scale: f32, bn: tile.Constant, causal: tile.Constant, group: tile.Constant):
    bm, d = o.tile_shape
    tile.block_order(seq // bm)     # a head's query blocks are a run: the switch block_group takes some in turn
    m, l, acc = attend_rows(q, k, v, seq, scale, bm, d, bn, causal, group)
    o.store((acc / l[:, None]).astype(o.dtype))


@tile.kernel
def flash_fwd_lse(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], o: tile.Partition[O, 2],
                  lse: tile.Partition[f32, 1], seq: i32, scale: f32, bn: tile.Constant, causal: tile.Constant,
                  group: tile.Constant):
    """flash_fwd that also stores each query row's natural log-sum-exp of its scaled scores (the
    backward's softmax statistic: P = exp(S * scale - lse)); lse's tiles are the BM rows of o's."""
    bm, d = o.tile_shape
    m, l, acc = attend_rows(q, k, v, seq, scale, bm, d, bn, causal, group)
    o.store((acc / l[:, None]).astype(o.dtype))
    lse.store((m + tile.log2(l)) * LN2)


def on_warpgroup_mma(wgmma: bool | None = None, tensor_cores: bool | None = None) -> bool:
    """Do the products run on sm_90 warpgroup MMA: on the tensor cores (unless KB_TILE_TC_MATMUL=0 or
    tensor_cores=False) and, unless `wgmma` says, on an sm_90+ GPU without KB_TILE_WGMMA_PRODUCTS=0. The one
    decision the forward's and the backward's tiles and lowering variants follow."""
    from dsl.tile.compile import tc_matmul_enabled, wgmma_products_enabled
    if not (tc_matmul_enabled() if tensor_cores is None else tensor_cores):
        return False
    if wgmma is None:
        import bridge
        wgmma = wgmma_products_enabled() and bridge.gpu_available() and bridge.current_device().cc >= (9, 0)
    return bool(wgmma)


def tile_choices(d: int, tensor_cores: bool | None = None, wgmma: bool | None = None) -> tuple:
    """flash_fwd's (query rows, key rows) for head dim d in order of preference, for the path the products
    take (on_warpgroup_mma's decision)."""
    from dsl.tile.compile import tc_matmul_enabled
    if not (tc_matmul_enabled() if tensor_cores is None else tensor_cores):
        return PORTABLE_TILES[d]
    return (WGMMA_TILES if on_warpgroup_mma(wgmma, tensor_cores) else TILES)[d]


def launch_args(q: Any, k: Any, v: Any, out: Any, seq: int, causal: bool, scale: float | None = None,
                tensor_cores: bool | None = None, wgmma: bool | None = None, group: int = 1,
                tiles: tuple[int, int] | None = None) -> tuple:
    """flash_fwd's arguments for (B*H*S, D) row stacks q, k, v and the output `out` of q's shape (f32 or
    q's dtype).
    `group`: query heads per key/value head (grouped-query attention: k and v are (B*H_kv*S, D) with
    H = group * H_kv; the caller, who knows H, checks that group divides it).
    `tensor_cores`: pick the tiles of the tensor-core lowering (default: unless KB_TILE_TC_MATMUL=0);
    `wgmma`: those of its sm_90 warpgroup MMA (default: on an sm_90+ GPU unless KB_TILE_WGMMA_PRODUCTS=0);
    `tiles`: (query rows, key rows) instead of those (a variant's own, e.g. lse_launch's 128 x 128)."""
    rows, d = q.shape
    if d not in TILES:
        raise ValueError(f"q: head dim {d} not supported (expected one of {sorted(TILES)})")
    choices = (tuple(tiles),) if tiles is not None else tile_choices(d, tensor_cores, wgmma)
    fits = [(bm, bn) for bm, bn in choices if seq % bm == 0 and seq % bn == 0]
    if seq <= 0 or rows % seq or not fits:
        raise ValueError(f"q: {rows} rows of sequences of {seq}: expected whole sequences whose length is a "
                         f"multiple of {max(choices[-1])}")
    bm, bn = fits[0]
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or rows % (seq * group):
        raise ValueError(f"group: expected a positive number of query heads per key/value head that divides "
                         f"the {rows // seq} query heads, got {group!r}")
    for name, x, want in (("k", k, rows // group), ("v", v, rows // group), ("out", out, rows)):
        if tuple(x.shape) != (want, d):
            like = "like q" if want == rows else f"(q's rows / group {group})"
            raise ValueError(f"{name}: expected shape {(want, d)} {like}, got {tuple(x.shape)}")
    if normalize(out.dtype, arg="out") not in ("f32", normalize(q.dtype, arg="q")):
        raise ValueError(f"out: expected float32 or q's dtype {normalize(q.dtype)}, got {normalize(out.dtype)}")
    return (q, k, v, tile.partition(out, (bm, d)), seq, float(scale if scale is not None else d ** -0.5), bn,
            bool(causal), group)


# tile.autotune's candidates on sm_90 beside the default (launch_args' tiles, the cp.async loop), from the
# forward ladder (docs/tile.md, "Attention ladder"): (query rows, key rows, warps, lowering, persistent) per head
# dim, None for launch_args' own. D256: the 128 x 64 rung with Q copied by the producer (below). lse_kernel takes the
# first (launch_args' tiles). The steps that made them, bf16 B4 H16 S4096 D128 full / causal TFLOP/s, each
# against the step before in one run: the TMA ring + fp_fusion + ftz 517 / 441 (the default 374 / 314; H200,
# 2026-12-04); 128 x 128 on a producer warpgroup with setmaxnreg 592 / 435, and causal's diagonal loop on its
# ring (`ws_chain`) 596 / 486 (H100, 2026-12-05 13:43); the consumer warpgroups in turns (`pingpong`) 629 / 531
# (H100, 16:14); with the intra-warpgroup overlap (`product_overlap`) 664 / 544 (H100, 17:37); one persistent
# block an SM walking the tiles: D64 full 447 against 432, S1024 about +1-3 %, D128 -1 % full, -4 % causal
# (H200, 17:47). Pingpong alone stays for D64 causal (368 against 358). Results:
# docs/results/gpu_runs_2026-12-05_1733-1800.
_FAST = {"fp_fusion": True, "ftz": True}
_TMA = {"loop_pipeline": "tma", **_FAST}
_CHAIN = {"loop_pipeline": "ws", "setmaxnreg": "240/24", "ws_chain": True, **_FAST}
_PINGPONG = {**_CHAIN, "pingpong": True}
_OVERLAP_PINGPONG = {**_PINGPONG, "product_overlap": True}
# Since 2026-12-05 night every candidate divides O by one reciprocal a row (`div_reciprocal`: 2 + 64 multiplies
# a thread, not 64 IEEE divisions), +2-11 % on each rung timed with and without it; the best: one persistent
# block an SM with Q copied by the producer warpgroup (`wgmma_a` "shared"), 688.5 / 567.3 TFLOP/s at S4096 D128
# (1.025 / 0.995x cuDNN) and 508.6 / 300.3 at S1024 (0.934 / 0.926x; 426.9 / 251.7 without the three), bf16
# out (H100, 2026-12-05 23:59, docs/results/gpu_runs_2026-12-05_2358-0006)
_RCP = {"div_reciprocal": True}
_TMA_RCP = {**_TMA, **_RCP}
# Q copied by the producer, persistent or not: without persistence 589.5 TFLOP/s causal at S4096 D128, 1.004x
# cuDNN, against the persistent block's 581.2 (0.990x) in the same run (ladder rung "... Q-tma rcp", H100
# 2026-12-06 02:31)
_Q_BY_PRODUCER = {**_OVERLAP_PINGPONG, "wgmma_a": "shared", **_RCP}
# Two buffers of Q in the persistent block (produced_a_buffers: the producer copies the next tile's Q during this
# tile's loop) with the ping-pong turns opened once for the consumers' whole program (pingpong_span): at S1024
# D128 full 540.1 TFLOP/s, 1.006x cuDNN, against 499.4 (0.930x) without either; causal on the snake 369.0 (1.137x)
# against 346.6 (1.068x); bf16 out, ladder rungs "... persistent Q-tma rcp [snake ]Q2 span ->bf16" (H100
# 2026-12-06 23:26, docs/results/gpu_check_2026-12-06_2143 table 4). Untimed at S4096 and D64: the autotuner
# times them beside the others.
_Q2_SPAN = {"produced_a_buffers": 2, "pingpong_span": "program"}
SM90_CANDIDATES = {d: ((None, None, None, _TMA_RCP, False),
                       (128, 128, 8, {**_PINGPONG, **_RCP}, False),
                       (128, 128, 8, {**_OVERLAP_PINGPONG, **_RCP}, False),
                       (128, 128, 8, _Q_BY_PRODUCER, False),
                       (128, 128, 8, _Q_BY_PRODUCER, True),
                       (128, 128, 8, {**_Q_BY_PRODUCER, **_Q2_SPAN}, True))
                   for d in (64, 128)}
# causal attention also persistent with Q by the producer, each block's tiles in a snake (persistent_order: one
# tile a block a round, every other round in reverse block order, so blocks carry even causal work): at S1024
# D128 causal 344.8 TFLOP/s, 1.064x cuDNN, against 299.4 (0.924x) strided and 289.0 (0.892x) not persistent in
# the same run; full attention's tiles are even, where it gains nothing (502.2 against 509.4; H100 2026-12-06
# 13:57, docs/results/gpu_runs_2026-12-06_1355)
SM90_CAUSAL_CANDIDATES = {d: ((128, 128, 8, {**_Q_BY_PRODUCER, "persistent_order": "snake"}, True),
                                (128, 128, 8, {**_Q_BY_PRODUCER, "persistent_order": "snake", **_Q2_SPAN}, True))
                          for d in (64, 128)}
# D64 also 64 x 64 with the TMA ring: tutorial 06's best D64 row (446.3 / 390.8 TFLOP/s f16, 2026-12-04),
# the same loop as this kernel's
SM90_CANDIDATES[64] += ((64, 64, None, _TMA_RCP, False),)
# D256 on warpgroup MMA: Q's 64 registers of A fragments a thread are what kept it off (the default tiles run
# mma.sync at 0.16x cuDNN); with Q copied by the producer into shared memory, 128 x 64 tiles on a producer
# warpgroup with ping-pong and the overlap ran 704.6 / 576.0 TFLOP/s, 0.978 / 0.902x cuDNN (ladder rung "D256
# ws 128x64 setmaxnreg fp_fusion ftz Q-tma overlap pingpong", bf16 out, H100 2026-12-05 23:59)
_D256 = {**_OVERLAP_PINGPONG, "wgmma_a": "shared"}
SM90_CANDIDATES[256] = ((128, 64, 8, _D256, False),)
# documented cache: what tuned_configs depends on -> the tile.Tuned of its candidates (picks live inside)
_TUNED: dict[tuple, Any] = {}


# documented cache: (kernel function, sorted lowering items, warps, persistent) -> that kernel variant
_VARIANTS: dict[tuple, Any] = {}


def variant(kern: Any, lowering: dict | None, num_warps: int | None = None, persistent: bool = False,
            pdl: bool = False) -> Any:
    """`kern` under the tile lowering's switches `lowering` (`kern` itself for none), on `num_warps`
    warps where given, persistent (a grid of at most what the GPU holds at once, each block walking
    tiles) where asked, launched by programmatic dependent launch where `pdl` (it waits at its entry for
    the grid before it, whose launch latency it hides): one kernel object per kernel, switches, warps,
    persistence and PDL, made on first use, so its compiles and launchers are kept. The attention
    examples' one way to a kernel's variant."""
    if not lowering and num_warps is None and not persistent and not pdl:
        return kern
    key = (kern.pyfunc, tuple(sorted((lowering or {}).items())), num_warps, bool(persistent), bool(pdl))
    if key not in _VARIANTS:
        _VARIANTS[key] = tile.kernel(kern.pyfunc, num_warps=num_warps, persistent=bool(persistent),
                                     lowering=dict(lowering or {}) or None, pdl=bool(pdl))
    return _VARIANTS[key]


def lse_kernel(d: int, wgmma: bool) -> Any:
    """flash_fwd_lse for launch_args_lse's tiles: on warpgroup MMA at D128 the variant with the TMA ring +
    fp_fusion + ftz, the ladder's rung on the default tiles (517 / 441 TFLOP/s against 374 / 314 for the
    cp.async loop, bf16 S4096 D128 full / causal, same run; docs/tile.md); else the kernel itself (D64's
    default 64 x 128 tile has not been measured with that rung). Its callers launch it inside CUDA graphs
    too, so it is a fixed choice, not an autotuned one."""
    return variant(flash_fwd_lse, _TMA if wgmma and d == 128 else None)


# The forward a caller without gradients should launch (the SDPA drop-in under no_grad or on tensors that need
# none), output in its own dtype: a fixed choice, since it runs inside CUDA-graph captures (autotuning times
# candidates on a first call). On warpgroup MMA: D128 the ladder's best rung (persistent, Q by the producer, one
# reciprocal a row: 688.5 / 567.3 TFLOP/s full / causal at S4096, 508.6 / 300.3 at S1024, bf16 out, H100
# 2026-12-05 23:59), D64 the TMA ring on the default 64 x 128 tiles (491.9 / 418.0 in the bar run of 17:56,
# docs/results/gpu_runs_2026-12-05_1733-1806) dividing by one reciprocal a row; D256 its autotune candidate.
# (query rows, key rows) or None for launch_args' own, warps, lowering, persistent
Form = tuple[tuple[int, int] | None, int | None, dict, bool]
INFER_SM90: dict[int, Form] = {128: ((128, 128), 8, _Q_BY_PRODUCER, True), 64: (None, None, _TMA_RCP, False),
                               256: ((128, 64), 8, _D256, False)}


# The log-sum-exp forward's form on warpgroup MMA at D128, full and causal: the forward ladder's rung before the
# reciprocal and persistent steps (INFER_SM90's form, whose GPU tests as flash_fwd_lse have not run yet), the
# 128 x 128 tiles on a producer warpgroup with the causal chain, ping-pong and the product overlap (as
# flash_fwd: 663.8 / 543.8 TFLOP/s against lse_kernel's 517 / 441, bf16 B4 H16 S4096, H100 2026-12-05; the
# plain chain rung it replaces, full only: 592.3, H200 2026-12-04); its GPU tests ran on 2026-12-05 (H100).
# Untimed as flash_fwd_lse. (query rows, key rows), warps, lowering, persistent
LSE_WIDE: Form = ((128, 128), 8, _OVERLAP_PINGPONG, False)


def lse_launch(q: Any, k: Any, v: Any, out: Any, lse: Any, seq: int, causal: bool, scale: float | None = None,
               group: int = 1, wgmma: bool | None = None) -> tuple[Any, tuple]:
    """(kernel, arguments) of the log-sum-exp forward a caller should launch (the SDPA drop-in, the backward
    examples): LSE_WIDE's 128 x 128 tiles on a producer warpgroup at D128 on warpgroup MMA when they
    divide seq, else lse_kernel on launch_args_lse's tiles. Checked as launch_args_lse."""
    on = on_warpgroup_mma(wgmma)
    d = q.shape[1]
    form = fitting(LSE_WIDE if on and d == 128 else None, seq)
    if form is not None:
        tiles, warps, lowering, persistent = form
        args = launch_args_lse(q, k, v, out, lse, seq, causal, scale, group=group, tiles=tiles)
        return variant(flash_fwd_lse, lowering, warps, persistent), args
    return lse_kernel(d, on), launch_args_lse(q, k, v, out, lse, seq, causal, scale, wgmma=on, group=group)


def fitting(form: Form | None, seq: int) -> Form | None:
    """A fixed form ((query rows, key rows) or None for launch_args' own, warps, lowering, persistent)
    where its tiles divide `seq`, else None."""
    if form is None or form[0] is None:
        return form
    rows, keys = form[0]
    return form if seq > 0 and seq % rows == 0 and seq % keys == 0 else None


def infer_launch(q: Any, k: Any, v: Any, out: Any, seq: int, causal: bool, scale: float | None = None,
                 group: int = 1, wgmma: bool | None = None) -> tuple[Any, tuple]:
    """(kernel, arguments) of flash_fwd for a caller that needs no log-sum-exp (inference): INFER_SM90's
    form for the head dim on warpgroup MMA where its tiles divide seq, else flash_fwd on launch_args'
    tiles. `out` may be f32 or q's dtype (the kernel converts as it stores). Checked as launch_args."""
    on = on_warpgroup_mma(wgmma)
    form = fitting(INFER_SM90.get(q.shape[1]) if on else None, seq)
    if form is not None:
        tiles, warps, lowering, persistent = form
        args = launch_args(q, k, v, out, seq, causal, scale, wgmma=on, group=group, tiles=tiles)
        return variant(flash_fwd, lowering, warps, persistent), args
    return flash_fwd, launch_args(q, k, v, out, seq, causal, scale, wgmma=on, group=group)


def tuned_configs(q: Any, seq: int, causal: bool, group: int = 1, arch: str | None = None) -> list:
    """flash_fwd's tile.Config candidates for these inputs: the default first (what KB_AUTOTUNE=0 and the
    simulator run), then on sm_90 the SM90_CANDIDATES (and, causal, SM90_CAUSAL_CANDIDATES) whose tiles
    divide `seq`."""
    from dsl.tile.compile import wgmma_products_enabled
    if arch is None:
        import bridge
        arch = bridge.current_device().arch if bridge.gpu_available() else "sm_80"
    sm90 = int(arch.removeprefix("sm_").rstrip("a")) >= 90
    d = q.shape[1]
    choices = tile_choices(d, wgmma=sm90 and wgmma_products_enabled())
    fits = [(m, n) for m, n in choices if seq > 0 and seq % m == 0 and seq % n == 0]
    if not fits:
        raise ValueError(f"seq: {seq} is not a positive multiple of {max(choices[-1])} (the tile rows)")
    bm, bn = fits[0]
    consts = {"bn": bn, "causal": bool(causal), "group": group}
    out = [tile.Config(tiles={"o": (bm, d)}, constants=consts)]
    if not sm90:
        return out
    for rows, keys, warps, lowering, persistent in SM90_CANDIDATES.get(d, ()) + \
            (SM90_CAUSAL_CANDIDATES.get(d, ()) if causal else ()):
        rows, keys = rows or bm, keys or bn
        if seq % rows == 0 and seq % keys == 0:
            out.append(tile.Config(tiles={"o": (rows, d)}, constants={**consts, "bn": keys}, num_warps=warps,
                                   lowering=lowering, persistent=persistent or None))
    return out


def flash_fwd_tuned(q: Any, k: Any, v: Any, out: Any, seq: int, causal: bool, scale: float | None = None,
                    group: int = 1) -> Any:
    """flash_fwd on the fastest of tuned_configs' candidates for this shape (tile.autotune: timed on the
    first call of a shape bucket, the pick kept in the disk cache); arguments as launch_args takes them,
    checked by it first. Returns the tile.Tuned (its `picks` say which configuration ran)."""
    import bridge
    from dsl.tile.compile import tc_matmul_enabled, wgmma_products_enabled
    args = launch_args(q, k, v, out, seq, causal, scale, group=group)       # checks shapes, group, head dim
    arch = bridge.current_device().arch if bridge.gpu_available() else "sm_80"
    key = (q.shape[1], seq, bool(causal), group, arch, tc_matmul_enabled(), wgmma_products_enabled())
    tuned = _TUNED.get(key)                 # the candidates are built once per key, not at every call
    if tuned is None:
        tuned = _TUNED.setdefault(key, tile.autotune(flash_fwd, tuned_configs(q, seq, causal, group, arch)))
    tuned(q, k, v, out, seq, args[5])
    return tuned


def launch_args_lse(q: Any, k: Any, v: Any, out: Any, lse: Any, seq: int, causal: bool,
                    scale: float | None = None, tensor_cores: bool | None = None, wgmma: bool | None = None,
                    group: int = 1, tiles: tuple[int, int] | None = None) -> tuple:
    """flash_fwd_lse's arguments: launch_args' with the f32 log-sum-exp `lse` of shape (B*H*S,) beside
    `out`, cut into the query tiles' rows."""
    args = launch_args(q, k, v, out, seq, causal, scale, tensor_cores, wgmma, group, tiles)
    rows = q.shape[0]
    if tuple(lse.shape) != (rows,):
        raise ValueError(f"lse: expected shape {(rows,)} (one value per query row), got {tuple(lse.shape)}")
    return (*args[:4], tile.partition(lse, (args[3].tile_shape[0],)), *args[4:])


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, seq: int, causal: bool, group: int = 1) -> np.ndarray:
    """Float64 attention of (B*H*S, D) row stacks; k and v (B*H_kv*S, D), each serving `group` query heads."""
    d = q.shape[1]
    q3, k3, v3 = (x.astype(np.float64).reshape(-1, seq, d) for x in (q, k, v))
    k3, v3 = (np.repeat(x, group, axis=0) for x in (k3, v3))
    s = q3 @ k3.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ v3).reshape(-1, d)


def run_gpu(batch: int, heads: int, seq: int, d: int) -> None:
    import torch
    import torch.nn.functional as F

    import bridge
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    from dsl.tile.compile import tc_matmul_enabled
    tensor_cores = tc_matmul_enabled() and bridge.current_device().cc >= (8, 0)
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        for how in ("default", "autotuned") if tensor_cores else ("default",):
            out = torch.full((batch * heads * seq, d), float("nan"), device="cuda")
            rows = [x.reshape(-1, d) for x in (q, k, v)]
            if how == "default":
                flash_fwd(*launch_args(*rows, out, seq, causal, tensor_cores=tensor_cores))
            else:
                flash_fwd_tuned(*rows, out, seq, causal)
            err = (out.reshape(ref.shape) - ref).abs().max().item()
            print(f"GPU B{batch} H{heads} S{seq} D{d} causal={causal} {how}: max |ours - SDPA(f32)| = {err:.2e}")
            assert err < 2e-2, err
    bridge.current_stream().synchronize()


def run_simulator(seq: int, d: int) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(np.float32) for _ in range(3))
    for causal in (False, True):
        out = np.full_like(q, np.nan)
        flash_fwd.simulate(*launch_args(q, k, v, out, seq, causal))
        err = float(np.abs(out - reference(q, k, v, seq, causal)).max())
        print(f"simulator S{seq} D{d} causal={causal}: max |ours - NumPy| = {err:.2e}")
        assert err < 1e-2, err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        for d in sorted(TILES):
            run_gpu(2, 4, args.seq, d)
        print("ran on the GPU")
    else:
        for d in sorted(TILES):
            run_simulator(min(args.seq, 128), d)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
