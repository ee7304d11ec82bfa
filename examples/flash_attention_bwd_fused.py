"""Flash attention backward in one pass over the keys: dK, dV and dQ from one tile kernel, dQ added
atomically (FlashAttention-2's scheme, and FlashAttention-3's on sm_90, where the dQ tiles leave by TMA
reduce-adds). Five products per block pair, against the seven of examples/flash_attention_bwd.py, whose
separate dQ kernel computes S and dP again; the price is a dQ in f32 that many blocks add into, so its
last bits depend on the order the blocks run in (the two-kernel backward is deterministic).

    python examples/flash_attention_bwd_fused.py        # GPU when present (bf16), else the simulator
    python examples/flash_attention_bwd_fused.py --all-forms   # on the GPU, every checked LADDER form (minutes)

  1. `attn_bwd_preprocess_zero`: Delta_i = rowsum(dO_i * O_i), and dQ set to zero, one pass over the rows;
  2. `flash_bwd_fused`: a block owns BN key rows of one (batch, key/value head) and walks its query
     blocks (of every query head of its group), accumulating dV += P^T dO and dK += dS^T Q in registers,
     and adding dQ_i += dS K scale into the query block's rows of dQ, a tile.Atomic array. Under the
     tile lowering's `tma_store` switch on sm_90 that add is one TMA reduce-add per 128-byte column slab
     of the staged tile (`lowering={"tma_store": True}`); otherwise an atomic add per element. Other
     switches of the tile lowering go the same way (e.g. "loop_pipeline": "tma", a TMA ring for the
     streamed Q and dO tiles: `LADDER` lists the forms benchmarks/attention.py --backward times).
  3. (full attention under `split`, the picks) the last wave's key blocks cut into parts over their query
     blocks (`last_wave`: the other SMs would idle while it ran), each part's dK and dV rows partial sums in
     f32 scratch, and `sum_parts` adding them into dK and dV.
  Under `pdl` (the ", pdl" forms, FASTEST's picks) each of these launches waits at its entry for the one before
  (programmatic dependent launch), so its launch hides behind that one's last blocks.
Same inputs and tiles as the two-kernel backward (its `pick_tiles`, `_check_arguments`), dQ in f32.
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path
from typing import Any, NamedTuple

from bridge import DTypeError
from dsl import TypeVar, f32, i32, tile

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import flash_attention_bwd as bwd  # noqa: E402  (a sibling example, not a package)

PRE_ROWS = 32            # the preprocess's rows a block (any divisor of S): 94 us against 98 on 64 or 128 (H100, D128)
E = TypeVar("E")
F = TypeVar("F")
G = TypeVar("G")
LOG2E = bwd.LOG2E


@tile.kernel
def attn_bwd_preprocess_zero(o: tile.Array[F, 2], dout: tile.Array[E, 2], delta: tile.Partition[f32, 1],
                             dq: tile.Partition[f32, 2]):
    """Delta_i = sum_d dO_id O_id, and the block's rows of dQ set to zero for the atomic adds: the zeros stored
    first, so they are in flight while the loads wait (98 against 106 us at B4 H16 S4096 D128 on an H100; on
    32-row tiles, PRE_ROWS, 94)."""
    (br,) = delta.tile_shape
    _, d = dq.tile_shape
    i = tile.bid(0)
    dq.store(tile.zeros((br, d), f32))
    prod = tile.load(o, (i, 0), (br, d)).astype(f32) * tile.load(dout, (i, 0), (br, d)).astype(f32)
    delta.store(tile.sum(prod, axis=1))


@tile.func
def fused_step(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, qb, col0, row0, scale2, scale, bm, bn, d, causal):
    """Query block `qb` (its first row row0 in its sequence) against this block's keys: dK and dV
    accumulated, dQ added."""
    lse_i = tile.load(lse, (qb,), (bm,))         # written before the products: issued here under early_loads
    delta_i = tile.load(delta, (qb,), (bm,))
    return fused_products(q, dout, dq, kt, vt, dk_acc, dv_acc, lse_i, delta_i, qb, col0, row0, scale2, scale, bm, bn,
                          d, causal)


@tile.func
def fused_products(q, dout, dq, kt, vt, dk_acc, dv_acc, lse_i, delta_i, qb, col0, row0, scale2, scale, bm, bn, d,
                   causal):
    """fused_step given the query block's log-sum-exp and Delta rows (loaded a step ahead: prefetch)."""
    qi = tile.load(q, (qb, 0), (bm, d))
    doi = tile.load(dout, (qb, 0), (bm, d))
    st = tile.matmul(kt, tile.transpose(qi)) * scale2                            # S^T (bn, bm)
    if causal == 2:                             # masked only where the query block crosses the diagonal
        if row0 < col0 + bn - 1:
            st = causal_mask(st, col0, row0, bm, bn)
    elif causal:
        st = causal_mask(st, col0, row0, bm, bn)
    pt = tile.exp2(st - (lse_i * LOG2E)[None, :])
    dv_acc = dv_acc + tile.matmul(pt.astype(q.dtype), doi)
    dpt = tile.matmul(vt, tile.transpose(doi))                                     # dP^T (bn, bm)
    dst = (pt * (dpt - delta_i[None, :])).astype(q.dtype)                        # dS^T
    dk_acc = dk_acc + tile.matmul(dst, qi)
    tile.atomic_add(dq, (qb, 0), tile.matmul(tile.transpose(dst), kt) * scale)   # dQ_i += dS K scale
    return dk_acc, dv_acc


@tile.func
def causal_mask(st, col0, row0, bm, bn):
    """S^T with the scores of keys after their query (key col0 + c past query row row0 + r) at -inf."""
    c = col0 + tile.arange(bn)[:, None]
    r = row0 + tile.arange(bm)[None, :]
    return tile.where(c <= r, st, -tile.inf)


@tile.func
def prefetched_steps(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, lse_n, delta_n, q0, lo, hi, col0, scale2, scale,
                     bm, bn, d, causal):
    """Query blocks lo..hi of the key block, each given the lse and Delta rows the step before loaded
    (lse_n, delta_n) and loading the next block's: returns the sums and those next rows."""
    for i in range(lo, hi):
        lse_i = lse_n
        delta_i = delta_n
        lse_n = tile.load(lse, (q0 + i + 1,), (bm,))          # past the last: another head's rows, or padding
        delta_n = tile.load(delta, (q0 + i + 1,), (bm,))
        dk_acc, dv_acc = fused_products(q, dout, dq, kt, vt, dk_acc, dv_acc, lse_i, delta_i, q0 + i, col0, i * bm,
                                        scale2, scale, bm, bn, d, causal)
    return dk_acc, dv_acc, lse_n, delta_n


@tile.func
def deferred_steps(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, lse_n, delta_n, dq_prev, qb_prev, q0, lo, hi, col0,
                   scale2, scale, bm, bn, d, causal):
    """prefetched_steps whose dQ is added one step late: a step issues S^T, then stages and adds the step
    before's dQ (its TMA reduce-add) while S^T runs on the tensor cores, and leaves its own dQ in registers
    for the next step; the caller adds the last one. The first step adds zeros (dq_prev starts at 0)."""
    for i in range(lo, hi):
        lse_i = lse_n
        delta_i = delta_n
        lse_n = tile.load(lse, (q0 + i + 1,), (bm,))
        delta_n = tile.load(delta, (q0 + i + 1,), (bm,))
        qb = q0 + i
        qi = tile.load(q, (qb, 0), (bm, d))
        doi = tile.load(dout, (qb, 0), (bm, d))
        st = tile.matmul(kt, tile.transpose(qi))                                   # S^T (bn, bm), in flight
        tile.atomic_add(dq, (qb_prev, 0), dq_prev)                                 # the step before's dQ
        st = st * scale2
        if causal == 2:                         # masked only where the query block crosses the diagonal
            if i * bm < col0 + bn - 1:
                st = causal_mask(st, col0, i * bm, bm, bn)
        elif causal:
            st = causal_mask(st, col0, i * bm, bm, bn)
        pt = tile.exp2(st - (lse_i * LOG2E)[None, :])
        dv_acc = dv_acc + tile.matmul(pt.astype(q.dtype), doi)
        dpt = tile.matmul(vt, tile.transpose(doi))
        dst = (pt * (dpt - delta_i[None, :])).astype(q.dtype)
        dk_acc = dk_acc + tile.matmul(dst, qi)
        dq_prev = tile.matmul(tile.transpose(dst), kt) * scale
        qb_prev = qb
    return dk_acc, dv_acc, dq_prev, qb_prev


@tile.kernel
def flash_bwd_fused(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                    lse: tile.Array[f32, 1], delta: tile.Array[f32, 1], dq: tile.Atomic[f32, 2],
                    dk: tile.Partition[G, 2], dv: tile.Partition[G, 2], seq: i32, scale: f32, bm: tile.Constant,
                    causal: tile.Constant, group: tile.Constant, diagonal: tile.Constant, prefetch: tile.Constant,
                    heads_in_turn: tile.Constant, parts: tile.Constant, first: i32):
    """Block b: key block first + b // parts, over its query blocks lo..hi, part b % parts of them (parts 1: all;
    more: the last wave's key blocks split, each part's dK and dV rows partial sums that sum_parts adds)."""
    bn, d = dk.tile_shape
    tile.block_order(seq // bn, heads_in_turn)     # a head's key blocks are a run: `heads_in_turn` heads at a time
    b = tile.bid(0)
    col0, kt, vt, q0, start = bwd.key_block(k, v, seq, bn, d, bm, group, causal,
                                            first + b // parts if parts > 1 else b)
    lo = start + ((b % parts) * (seq // bm)) // parts if parts > 1 else start
    hi = ((b % parts + 1) * (seq // bm)) // parts if parts > 1 else seq // bm
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    scale2 = scale * LOG2E
    masking = causal * (1 + (diagonal == 2))    # 2: the mask under a branch, only where the diagonal crosses
    if group == 1 and prefetch == 2 and not (causal and diagonal == 1):    # adds each step's dQ in the next
        dq_prev = tile.zeros((bm, d), f32)
        qb_prev = q0 + lo
        dk_acc, dv_acc, dq_prev, qb_prev = deferred_steps(
            q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, tile.load(lse, (q0 + lo,), (bm,)),
            tile.load(delta, (q0 + lo,), (bm,)), dq_prev, qb_prev, q0, lo, hi, col0, scale2, scale, bm,
            bn, d, masking)
        tile.atomic_add(dq, (qb_prev, 0), dq_prev)
    elif group == 1 and prefetch and diagonal == 2:     # one loop, the mask (if causal) under a branch a step
        dk_acc, dv_acc, lse_n, delta_n = prefetched_steps(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc,
                                                          tile.load(lse, (q0 + lo,), (bm,)),
                                                          tile.load(delta, (q0 + lo,), (bm,)), q0, lo, hi, col0,
                                                          scale2, scale, bm, bn, d, masking)
    elif group == 1 and prefetch:               # each step loads the next step's lse and Delta rows
        lse_n = tile.load(lse, (q0 + lo,), (bm,))
        delta_n = tile.load(delta, (q0 + lo,), (bm,))
        split = lo
        if causal and diagonal:                 # the blocks the diagonal crosses first, masked, as below
            split = (col0 + bn + bm - 2) // bm
            dk_acc, dv_acc, lse_n, delta_n = prefetched_steps(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, lse_n,
                                                              delta_n, q0, lo, split, col0, scale2, scale, bm,
                                                              bn, d, True)
        dk_acc, dv_acc, lse_n, delta_n = prefetched_steps(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, lse_n,
                                                          delta_n, q0, split, hi, col0, scale2, scale, bm, bn,
                                                          d, causal and not diagonal)
    elif group == 1 and causal and diagonal:    # masked only where the query block crosses the diagonal
        cross = (col0 + bn + bm - 2) // bm      # the first query block all of whose rows see every key here
        for i in range(lo, cross):
            dk_acc, dv_acc = fused_step(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, q0 + i, col0, i * bm,
                                        scale2, scale, bm, bn, d, True)
        for i in range(cross, hi):
            dk_acc, dv_acc = fused_step(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, q0 + i, col0, i * bm,
                                        scale2, scale, bm, bn, d, False)
    elif group == 1:                            # the loop at the top (a producer warpgroup's ring can feed it)
        for i in range(lo, hi):
            dk_acc, dv_acc = fused_step(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc, q0 + i, col0, i * bm,
                                        scale2, scale, bm, bn, d, causal)
    else:
        for g in range(group):                  # query head (batch, head * group + g)
            for i in range(lo, hi):
                dk_acc, dv_acc = fused_step(q, dout, lse, delta, dq, kt, vt, dk_acc, dv_acc,
                                            q0 + g * (seq // bm) + i, col0, i * bm, scale2, scale, bm, bn, d, causal)
    dk.store(dk_acc * scale)
    dv.store(dv_acc)


@tile.kernel
def sum_parts(dk_parts: tile.Array[f32, 2], dv_parts: tile.Array[f32, 2], dk: tile.Partition[G, 2],
              dv: tile.Partition[G, 2], parts: tile.Constant, own: tile.Constant):
    """The split key blocks' dK and dV rows: the sums of their `parts` partial (own, d) tiles, which lie one
    after another in dk_parts / dv_parts, in dk's and dv's dtype; a block takes SUM_ROWS rows of one."""
    rows, d = dk.tile_shape
    b = tile.bid(0)
    unit = b // (own // rows)                   # which split key block
    first = unit * parts * (own // rows) + (b - unit * (own // rows))   # its first part's rows, in tiles of rows
    dk_acc = tile.load(dk_parts, (first, 0), (rows, d))
    dv_acc = tile.load(dv_parts, (first, 0), (rows, d))
    for r in range(1, parts):
        dk_acc = dk_acc + tile.load(dk_parts, (first + r * (own // rows), 0), (rows, d))
        dv_acc = dv_acc + tile.load(dv_parts, (first + r * (own // rows), 0), (rows, d))
    dk.store(dk_acc)
    dv.store(dv_acc)


SUM_ROWS = 32            # sum_parts' rows a block
MAX_PARTS = 4            # the most parts a split key block is cut into (each adds a dK / dV tile pass)


def last_wave(units: int, slots: int, max_parts: int = MAX_PARTS) -> tuple[int, int]:
    """(whole, parts): the fused backward's `units` key blocks (all of equal work: full attention) on `slots`
    blocks at a time (one an SM) run in waves, and a last wave of units % slots blocks leaves the other SMs
    idle for a whole block's time (2048 key blocks on 132 SMs: 15.5 waves, the time of 16). So the first
    `whole` run whole, and the rest each as `parts` blocks over a part of the query blocks: the parts that
    finish soonest, in waves of slots (68 key blocks in 3 parts: 204 blocks, 2 waves of a third); parts 1
    where no cut helps."""
    rem = units % slots if slots > 0 else 0
    if rem == 0:
        return units, 1
    best = min(range(1, max_parts + 1), key=lambda p: (-(-rem * p // slots) / p, p))
    return (units - rem, best) if best > 1 else (units, 1)


def _scratch(like: Any, rows: int, d: int) -> Any:
    """An f32 (rows, d) array of `like`'s library (torch or NumPy), or None for another."""
    if hasattr(like, "new_empty"):
        import torch
        return like.new_empty((rows, d), dtype=torch.float32)
    import numpy as np
    return np.empty((rows, d), np.float32) if isinstance(like, np.ndarray) else None


def _slots() -> int:
    """The fused backward's blocks at a time on this GPU (one an SM: its shared memory), 0 without one."""
    import bridge
    return bridge.current_device().sm_count if bridge.gpu_available() else 0


# Forms of the fused kernel by the tile lowering's switches (dsl/tile/switches.py), label -> lowering; at
# D128 on sm_90a the ring forms assemble without spills (249-252 registers), the others with 4 bytes
TMA_REDUCE = {"tma_store": True}                       # dQ's adds by TMA reduce-adds (sm_90)
RING = {**TMA_REDUCE, "loop_pipeline": "tma"}
FTZ = {"fp_fusion": True, "ftz": True}
WS = {**TMA_REDUCE, "loop_pipeline": "ws", "setmaxnreg": "240/24", "wgmma_a": "shared"}
WIDE = (128, 64, 8)     # key rows a block owns, query rows it streams, warps: FlashAttention-2's backward tile
# "K V swizzled" (wgmma_a "shared"): K and V wait in wgmma's swizzle atoms, so S^T = K Q^T and dP^T = V dO^T
# read them as A there and dQ = dS K as B, and dS^T goes to shared memory once, as dQ's MN-major A: dQ runs on
# wgmma where its 64 query rows make an m64 tile (D64 on 4 warps; D128 on 8 warps, a warpgroup 64 of dQ's
# columns); on 4 warps at D128 the 32 query rows keep dQ on mma.sync, and the form spills (76 bytes; 84 with early loads)
LADDER: dict[str, dict | None] = {
    "atomic dQ": None,
    "TMA reduce dQ": TMA_REDUCE,
    "TMA ring + TMA reduce dQ": RING,
    "TMA ring S3 + TMA reduce dQ": {**RING, "loop_stages": 3},
    "TMA ring + TMA reduce dQ + fp_fusion ftz": {**RING, **FTZ},
    "TMA ring + TMA reduce dQ, K V swizzled": {**RING, "wgmma_a": "shared"},
    "TMA ring + TMA reduce dQ, K V swizzled, early loads": {**RING, "wgmma_a": "shared", "early_loads": True},
    "128x64 w8, TMA ring + TMA reduce dQ": RING,
    "128x64 w8, TMA ring + TMA reduce dQ + fp_fusion ftz": {**RING, **FTZ},
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled": {**RING, "wgmma_a": "shared"},
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads": {**RING, "wgmma_a": "shared", "early_loads": True},
    # dV += P^T dO and dP^T = V dO^T issued together and waited for together (product_batches, 2026-12-05):
    # untimed; the 8-warp form at D128 spills 24 bytes with it (255 registers), the 4-warp D64 none (212)
    "TMA ring + TMA reduce dQ, K V swizzled, batched products": {**RING, "wgmma_a": "shared",
                                                                 "product_batches": True},
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, batched products": {
        **RING, "wgmma_a": "shared", "early_loads": True, "product_batches": True},
    # a producer warpgroup's TMA ring for Q and dO (loop_pipeline "ws", 2026-12-05): the consumers only wait,
    # multiply and release; on 8 warps with setmaxnreg (240 registers a consumer thread), on 4 without
    "ws + TMA reduce dQ, K V swizzled": {**TMA_REDUCE, "loop_pipeline": "ws", "wgmma_a": "shared"},
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled": WS,
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads": {**WS, "early_loads": True},
    # every product statement as early as its operands allow and waited for where its result is read
    # (lazy_waits, 2026-12-05 night): dP^T on the tensor cores during the softmax, dV during dS^T, dK while
    # dS^T is staged for dQ. +5-25 % on the 8-warp forms (H100, 2026-12-05 23:59); spills at D128 (12 bytes on 8
    # warps, 80 with setmaxnreg), none at D64
    "TMA ring + TMA reduce dQ, K V swizzled, lazy waits": {**RING, "wgmma_a": "shared", "lazy_waits": True},
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits": {
        **RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True},
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits": {
        **WS, "early_loads": True, "lazy_waits": True},
    # the same with fp_fusion + ftz (the forward's: exp2 one MUFU, a multiply feeding an add one fma): +3-14 %
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz": {
        **RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz": {
        **WS, "early_loads": True, "lazy_waits": True, **FTZ},
    # causal: the query blocks that cross the diagonal (two of 64 rows against 128 keys) in a loop of their own,
    # the rest without the mask's compare and select on every element (the forward's split); on a producer
    # warpgroup the second loop shares its ring (ws_chain). Causal D128 ring 425.7 against 416.5 TFLOP/s without;
    # the producer form 376.1 against 407.0, D64 264.1 / 262.9 against 277.5 / 284.9 (H100 2026-12-06 02:30)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop": {
        **RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop": {
        **WS, "early_loads": True, "lazy_waits": True, **FTZ, "ws_chain": True},
    # D64 only: 128 query rows a step, FlashAttention-3's D64 backward tile (its S and dP are m64n128, not
    # smem-bound m64n64 SS products; dK and dV take K = 128). No spills (ptxas, full and causal; 4 / 60 bytes with
    # early loads); D128's 200 KiB of stages do not fit it. With early loads 343.5-345.8 / 277.5-279.5 TFLOP/s against
    # the 64-row producer form's 321.7-322.3 / 283.0-284.9; without them 227.1 / 220.1 (H100 2026-12-06)
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled + fp_fusion ftz": {**RING, "wgmma_a": "shared", **FTZ},
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads + fp_fusion ftz": {
        **RING, "wgmma_a": "shared", "early_loads": True, **FTZ},
    # each step loads the next step's lse and Delta rows (`prefetch`, one query head a key head), so their latency
    # is a step's, not the S^T product's; a row loaded once a thread in the 1-D tile's own layout and handed to the
    # accumulator columns through shared memory (two block barriers a row a step), not 16-32 loads a thread: no spills
    # (ptxas, full and causal; 8 / 0 / 8 bytes without). D128 ring: 484.3 / 433.0 TFLOP/s against 454.1 / 427.2 for
    # the diagonal loop (H100 2026-12-06 02:44), 496.8 / 432.2 at 04:36; producer warpgroup 464.8 / 414.2 and
    # 475.7 / 414.2; D64 128-row step 360.3 / 307.0 (+5 / +11 %), ring 290.4 and producer 291.9 causal (04:36)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch": {
        **RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch": {
        **WS, "early_loads": True, "lazy_waits": True, **FTZ},
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads + fp_fusion ftz, prefetch": {
        **RING, "wgmma_a": "shared", "early_loads": True, **FTZ},
    # D64's 128-row step with lazy waits (dP^T issued beside S^T and waited for after the softmax, dV during dS^T,
    # dK while dS^T is staged): an ncu source profile (H100 2026-12-06 06:12) puts 28 % of the eager step's stall
    # samples on its five products' waits. ptxas spills 60 / 136 bytes (full / causal), yet with early loads 407.1 /
    # 329.2 TFLOP/s, without them 392.1 / 342.1, against 375.7 / 323.4 eager (H100 2026-12-06 06:24)
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch": {
        **RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, lazy waits + fp_fusion ftz, prefetch": {
        **RING, "wgmma_a": "shared", "lazy_waits": True, **FTZ},
    # the prefetched lse and Delta rows held whole by every warp and shuffled onto S^T's columns (lowering switch
    # warp_vectors), not relayouted through shared memory between two block barriers each: D128 full 551.6 / 548.6
    # TFLOP/s against 519.6 / 528.6 without (ABBA rounds), causal 432.8 / 424.9 against 452.6 / 448.8 (ptxas: 4
    # spill bytes); at D64 this form +6 % but the lazy 128-row step -3 % (spills 60 -> 128; H100 2026-12-06 06:40)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "warp vectors": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ,
                     "warp_vectors": True},
    # the prefetch's relayouts without their closing barriers (lowering switch lazy_barriers): the lse row's
    # readers are done by the Delta row's barrier, the Delta row's by dS^T's staging barrier; four block barriers
    # a step, not six. D128 493.1 / 412.3 against 492.2 / 431.0, D64 365.4 / 303.9 against 359.8 / 309.6 (H100
    # 2026-12-06 05:03): no lasting gain, and causal spills (16 / 104 bytes)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "lazy barriers": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ,
                      "lazy_barriers": True},
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads + fp_fusion ftz, prefetch, lazy barriers": {
        **RING, "wgmma_a": "shared", "early_loads": True, **FTZ, "lazy_barriers": True},
    # each step's dQ added in the next step, staged while that step's S^T runs (`deferred_steps`; the launch's
    # prefetch=2): the ncu page of the D128 pick put 5.4 % of its samples on dQ's product wait and 4 % on its
    # staging store. ptxas: D128 no spills (28 bytes causal with warp vectors), D64's 128-row step 84 / 124;
    # GPU tests passed (H100 2026-12-06 17:05). D64's 128-row step 413.1 / 357.2 TFLOP/s against 406.3 / 329.4 without
    # (FASTEST[64] since); D128 532.4 / 449.5 (0.955 / 0.955x cuDNN) against FASTEST[128]'s 547.4 (0.982x) full in
    # the same run and the causal pick's 0.977x at 13:55 (docs/results/gpu_runs_2026-12-06_1707)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "deferred dQ": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "deferred dQ, warp vectors": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ,
                                  "warp_vectors": True},
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "deferred dQ": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
    # D64's deferred step with warp vectors: causal, ptxas spills 84 bytes (72 heads in turn) against the pick's
    # 124 (full 100 against 80), where warp vectors on the step adding its own dQ had doubled them (60 -> 128,
    # -3 %); untimed
    "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
    "deferred dQ, warp vectors": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ,
                                  "warp_vectors": True},
    # both: the diagonal loop's two loops hand the prefetched rows on from one to the other. D128 497.2 / 426.7, D64
    # causal 287.5 (H100 2026-12-06 04:36: no gain on the prefetch alone)
    "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop, "
    "prefetch": {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ},
}
for _form in ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch",
              "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, lazy waits + fp_fusion ftz, prefetch",
              "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "warp vectors",
              "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "deferred dQ",
              "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "deferred dQ, warp vectors",
              "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop, "
              "prefetch"):
    LADDER[_form + ", heads in turn"] = LADDER[_form]      # the steps of the picks, heads in turn
# causal: the mask (a compare and a select an element) only in the steps whose query block crosses the diagonal,
# under a branch in the one loop (launch_args' diagonal=2), not in a second copy of the step (the diagonal loop)
LADDER["128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
       "branch mask, heads in turn"] = LADDER["128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, "
                                              "lazy waits + fp_fusion ftz, prefetch"]
LADDER["128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
       "deferred dQ, branch mask, heads in turn"] = LADDER["128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, "
                                                          "early loads, lazy waits + fp_fusion ftz, prefetch, deferred dQ"]
# (the first three timed at 13:55, the first D128 causal's pick since; the last, D64's deferred-dQ step in turns,
# FASTEST[64] since 2026-12-06 18:40: ptxas 124 spill bytes as without; and that step with warp vectors, untimed)
# full attention's last wave split (last_wave): the two full picks before it
for _form in ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "warp vectors",
              "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "deferred dQ, heads in turn"):
    LADDER[_form + ", last wave split"] = LADDER[_form]
# the three picks' forms with every launch by programmatic dependent launch (launch_args' pdl; each waits at its
# entry for the launch before, whose last blocks hide its launch): D64 415.3 / 367.3 TFLOP/s (0.934 / 1.002x cuDNN) against
# 410.0 / 364.0, D128 549.2 / 428.6 against 548.8 / 419.6 (FASTEST[128]'s form, causal unsplit) in one run (H100
# 2026-12-07 11:52, docs/results/gpu_runs_2026-12-07_1152)
for _form in ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "warp vectors, last wave split",
              "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "heads in turn",
              "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
              "deferred dQ, heads in turn, last wave split"):
    LADDER[_form + ", pdl"] = LADDER[_form]
# D64 on 64 x 64 tiles and one warpgroup (cuDNN's D64 backward tile, `..._64x64x64_1x4x1`; 203 registers, no
# spills, two blocks an SM), the 128-row pick's steps: 405.6 / 359.7 TFLOP/s (0.912 / 0.981x cuDNN) against the
# pick's 410.0 / 364.0 (0.920 / 0.993x) in one run; with warp vectors 403.6 / 350.3 (H100 2026-12-07 11:52,
# docs/results/gpu_runs_2026-12-07_1152; that one not kept)
LADDER["64x64 w4, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
       "deferred dQ, heads in turn"] = {**RING, "wgmma_a": "shared", "early_loads": True, "lazy_waits": True, **FTZ}
SPLIT = {form for form in LADDER if ", last wave split" in form}             # launched with split=True
PDL = {form for form in LADDER if form.endswith(", pdl")}                    # launched with pdl=True
DIAGONAL = {form for form in LADDER if ", diagonal loop" in form}          # forms launched with diagonal=True
BRANCH_MASK = {form for form in LADDER if ", branch mask" in form}         # forms launched with diagonal=2
PREFETCH = {form for form in LADDER if ", prefetch" in form}               # forms launched with prefetch=True
DEFERRED = {form for form in LADDER if ", deferred dQ" in form}            # prefetch=2: each dQ added a step late
# heads_in_turn=8: blocks take eight heads' key blocks in turns (tile.block_order), the heaviest of causal
# attention's (the first of each head) first everywhere: modelled at B4 H16 S4096 on 132 SMs, the grid's last
# block ends 7 % past the mean in the natural order, within 1 % so (interop_tests/dsl_tile/test_tile_block_runs.py)
HEADS_IN_TURN = {form: 8 for form in LADDER if ", heads in turn" in form}
SQUARE = (128, 128, 8)  # 128 key rows a block owns and 128 query rows a step: D64's (HEAD_DIMS)
# forms for some head dims only (else every one of 64 and 128): applies()
HEAD_DIMS: dict[str, tuple[int, ...]] = {**{form: (64,) for form in LADDER if form.startswith(("128x128 w8", "64x64 w4"))},
                                         **{form: (128,) for form in PDL if form.startswith("128x64 w8")}}
# the forms that choose their own tiles (else pick_tiles' on 4 warps): 128 key rows on two warpgroups halve
# the dQ tiles a head adds (S / 128 key blocks), 200 KiB of shared memory, 255 registers and 12 spill bytes at D128
NARROW = (64, 64, 4)    # 64 key rows a block, 64 query rows a step, one warpgroup: cuDNN's D64 tile
TILES: dict[str, tuple[int, int, int]] = {**{form: WIDE for form in LADDER if form.startswith("128x64 w8")},
                                           **{form: SQUARE for form in HEAD_DIMS if form.startswith("128x128 w8")},
                                           **{form: NARROW for form in HEAD_DIMS if form.startswith("64x64 w4")}}
# The form a caller gets by default (pick_form), by head dim (and, where it differs, causal or not), where it is
# measured faster than the two-kernel backward on warpgroup MMA (bf16 B4 H16 S4096, full / causal TFLOP/s; H100
# 2026-12-06 04:36, docs/results/gpu_runs_2026-12-06_0435): D128, the 8-warp K V swizzled ring form with early
# loads, lazy waits, fp_fusion and ftz whose steps load the next step's lse and Delta rows, 496.8 / 432.2 (0.89 /
# 0.91x cuDNN) against 497.2 / 426.7 for the same with the diagonal loop; D64, 128 query rows a step on that ring
# with early loads and the prefetch, 360.3 / 307.0 (0.81 / 0.85x) against 343.5 / 277.5 without the prefetch and
# 291.9 causal for the producer-warpgroup form with it. D256 keeps the two kernels (no wgmma tile fits it). Since
# dQ's and dK / dV's f32 staging is free of bank conflicts (lowering switch staging_swap, on by default): D128
# 523.6 / 453.8 (0.956 / 0.978x), D64 378.4 / 323.4 (0.839 / 0.886x) against 490.8 / 430.1 and 362.6 / 309.1
# without it in the same run (H100 2026-12-06 06:11, docs/results/gpu_runs_2026-12-06_0610).
# D64 since lazy waits: the 128-row step with them, with early loads for full attention (407.1 TFLOP/s, 0.908x) and
# without for causal (342.1, 0.939x; H100 2026-12-06 06:24). D128 full since warp vectors: the same form with the
# lse and Delta rows shuffled from every warp's copy, 551.6 / 548.6 (0.973 / 0.967x), causal without (0.951x).
# D64 since deferred dQ (each step's dQ staged and added while the next step's S^T runs): 413.1 / 357.2 TFLOP/s
# (0.922 / 0.979x cuDNN) against 406.3 / 329.4 (0.907 / 0.903x) for the same step adding its own dQ, in one run, and
# against the causal pick before it (the 128-row step without early loads, heads in turn) 352.2 (0.967x) the run
# before (H100 2026-12-06 17:07 / 13:55, docs/results/gpu_runs_2026-12-06_1707): one form for both. D64 since heads
# in turn on that step: 413.2 / 360.9 TFLOP/s (0.921 / 0.998x cuDNN) against 409.9 / 354.8 in the same run (H100
# 2026-12-06 18:40, docs/results/gpu_check_2026-12-06_1819/bwd64). The ratios above leave out the conversion of the
# f32 dQ sum to the inputs' dtype that the SDPA drop-in runs and cuDNN's timed backward holds (~3 %); with it and the
# drop-in's bf16 O, dK, dV: D128 0.975 / 0.966x, D64 0.922 / 0.988x (H100 2026-12-07, docs/results/gpu_runs_2026-12-07_0637).
# Both since the last wave split (last_wave: 1980 key blocks whole, 68 in thirds): D128 546.6 against 541.8 TFLOP/s
# (0.988 / 0.979x cuDNN), D64 416.3 against 413.0 (0.935 / 0.928x), full attention, in one run (H100 2026-12-07
# 09:11, docs/results/gpu_runs_2026-12-07_0845); causal launches are never split (the same kernel as without).
# FASTEST's picks by programmatic dependent launch since (", pdl": D64 +1.3 / +0.9 %, D128 +0.1 / +2.1 % full / causal, in
# one run: H100 2026-12-07 11:52, docs/results/gpu_runs_2026-12-07_1152).
FASTEST: dict[int, str] = {
    128: "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
         "warp vectors, last wave split, pdl",
    64: "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
        "deferred dQ, heads in turn, last wave split, pdl"}
# Full attention's key blocks of a head walk the query blocks in step, all adding into one dQ tile at a time and
# reading one Q and dO tile; each starting at its own query block and wrapping around instead lost 8 %: D128 505.7
# against 548.6 TFLOP/s (0.894 / 0.970x cuDNN), D64 380.6 against 413.6 (H100 2026-12-07 09:12; not kept). And the
# last wave: 2048 key blocks on 132 SMs are 15.5 waves, and B1 S4096 D128 ran 2236 us at 61 heads (14.8 waves) but
# 2393 at 62 (15.03), cuDNN's backward 2316 / 2439 the same way: both pay it.
# D128's two picks on a ring of three stages of Q and dO, not two (218 KiB, one block an SM as before, the same
# registers) lost: full 524.7 against 549.5 TFLOP/s (0.939 / 0.983x cuDNN), causal 456.0 against 462.6 (0.966 /
# 0.979x), in one run (H100 2026-12-07 03:06); dropped from LADDER.
# causal attention's own pick where it differs from FASTEST's. Since heads in turn (tile.block_order, eight heads'
# key blocks in turns, each head's heaviest first): D128 461.3 TFLOP/s (0.977x cuDNN) against 450.7 (0.955x) in
# the same run, D64 352.2 (0.967x) against 342.3 (0.940x) (H100 2026-12-06 13:55, docs/results/gpu_runs_2026-12-06_1355);
# full attention, whose blocks carry even work, gains nothing by it (D128 541.0 against 540.1, D64 388.9 against 397.0).
# D64 causal takes FASTEST[64] since deferred dQ (above; at D128 deferred dQ loses: LADDER's comment)
# (its ", pdl" form lost: 455.7 against 460.3 TFLOP/s causal, 0.969 / 0.979x cuDNN, H100 2026-12-07 14:53,
# docs/results/gpu_runs_2026-12-07_1453; and cuDNN's D128 tile, 64 x 64 on one warpgroup over this pick's steps,
# 292.6: one block an SM, its ring and staging 146 KiB)
FASTEST_CAUSAL: dict[int, str] = {
    128: "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
         "heads in turn"}
CHECKED = ("atomic dQ", "TMA reduce dQ", "TMA ring + TMA reduce dQ", "TMA ring + TMA reduce dQ, K V swizzled",
           "TMA ring + TMA reduce dQ, K V swizzled, early loads",
           "128x64 w8, TMA ring + TMA reduce dQ", "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled",
           "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads",
           "TMA ring + TMA reduce dQ, K V swizzled, batched products",
           "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, batched products",
           "ws + TMA reduce dQ, K V swizzled", "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled",
           "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads",
           "TMA ring + TMA reduce dQ, K V swizzled, lazy waits",
           "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits",
           "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits",
           *sorted({*FASTEST.values(), *FASTEST_CAUSAL.values(), *DIAGONAL, *HEAD_DIMS, *PREFETCH}))
# (the forms main() and the GPU tests run)


def applies(form: str, d: int) -> bool:
    """Does LADDER form `form` run at head dim `d` (HEAD_DIMS; the others at 64 and 128)."""
    return d in HEAD_DIMS.get(form, (64, 128))


def form_options(form: str) -> dict:
    """launch_args' (and forward_and_backward's) `lowering`, `tiles`, `diagonal`, `prefetch` and `heads_in_turn` of
    LADDER form `form`."""
    prefetch = 2 if form in DEFERRED else form in PREFETCH
    return {"lowering": LADDER[form], "tiles": TILES.get(form), "prefetch": prefetch,
            "diagonal": 2 if form in BRANCH_MASK else form in DIAGONAL,
            "heads_in_turn": HEADS_IN_TURN.get(form, 1), "split": form in SPLIT, "pdl": form in PDL}


def pick_form(d: int, seq: int, wgmma: bool, causal: bool = False) -> str | None:
    """The LADDER form a caller should run the fused backward in for head dim `d`, length `seq` and `causal`,
    or None where the two-kernel backward is the faster choice (or the only one: the form's tiles must divide
    seq). `wgmma`: the kernels run their products on warpgroup MMA (flash_attention.on_warpgroup_mma)."""
    form = ((causal and FASTEST_CAUSAL.get(d)) or FASTEST.get(d)) if wgmma else None
    if form is None:
        return None
    if form in TILES:
        own, stream, _ = TILES[form]
        return form if seq > 0 and seq % own == 0 and seq % stream == 0 else None
    try:
        bwd.pick_tiles(d, seq, tensor_cores=True, wgmma=True)      # the form's tiles: the two-kernel backward's
    except ValueError:
        return None
    return form


def fused_kernel(lowering: dict | None = None, warps: int | None = None, pdl: bool = False) -> Any:
    """flash_bwd_fused under the lowering switches `lowering` (None: the defaults) on `warps` warps, by
    programmatic dependent launch where `pdl`."""
    return bwd.fwd.variant(flash_bwd_fused, lowering, warps, pdl=pdl)


def launch_args(q: Any, k: Any, v: Any, o: Any, dout: Any, lse: Any, delta: Any, dq: Any, dk: Any, dv: Any,
                seq: int, causal: bool, scale: float | None = None, tensor_cores: bool | None = None,
                wgmma: bool | None = None, group: int = 1, lowering: dict | None = None,
                tiles: tuple[int, int, int] | None = None, diagonal: bool | int = False,
                prefetch: bool | int = False, heads_in_turn: int = 1, split: bool = False,
                slots: int | None = None, pdl: bool = False) -> list[tuple[Any, tuple]]:
    """The fused backward's launches, [(kernel, arguments)] (the preprocess and the fused kernel; split: the fused
    kernel over the whole key blocks, over the parts, then sum_parts), for the arrays of the two-kernel
    backward's launch_args (checked the same way before anything runs); `dq` must be float32 (the
    atomic adds), and is overwritten (set to zero, then added into). `lowering`: the fused kernel's
    switches (LADDER's values); `tiles`: (key rows a block owns, query rows it streams, warps), else
    the two-kernel backward's tiles on 4 warps (form_options gives both for a LADDER form); `diagonal`:
    causal with one query head a key head, the query blocks that cross the diagonal in a loop of their own,
    the others unmasked (DIAGONAL's forms), or 2: with `prefetch` (1 or 2), one loop masking only those blocks,
    under a branch (BRANCH_MASK's forms); `prefetch`: one query head a key head, each step loads the next
    one's lse and Delta rows (PREFETCH's forms); 2: and adds each step's dQ in the next step, behind that
    step's S^T (DEFERRED's forms, not with `diagonal`); `heads_in_turn`: blocks take that many heads' key
    blocks in turns (tile.block_order; 1: one head's after another, HEADS_IN_TURN's forms 8); `split`: full
    attention with one query head a key head, the key blocks of the last wave split (last_wave; SPLIT's forms)
    on `slots` blocks at a time (None: this GPU's SMs), their parts' dK and dV rows in f32 scratch of the
    arrays' library (torch, NumPy; others run unsplit) that a last launch, sum_parts, adds up; `pdl`: every
    launch by programmatic dependent launch (each waits at its entry for the one before: its launch latency
    hidden behind that one's last blocks; PDL's forms)."""
    bwd._check_arguments(q, seq, group, {"k": k, "v": v, "o": o, "dout": dout, "dq": dq, "dk": dk, "dv": dv},
                         {"lse": lse, "delta": delta})
    if type(diagonal) not in (bool, int) or diagonal not in (0, 1, 2) or (diagonal == 2 and not prefetch):
        raise ValueError(f"diagonal: expected False, True (a loop of its own) or 2 (a branch, with prefetch), got "
                         f"{diagonal!r}" + (" without prefetch" if diagonal == 2 else ""))
    if not str(dq.dtype).endswith("float32"):
        raise DTypeError(f"dq: expected float32 (blocks add into it atomically), got {dq.dtype}", arg_name="dq")
    d = q.shape[1]
    own, stream, warps = bwd.block_tiles(d, seq, tiles, tensor_cores, wgmma)
    sc = float(scale if scale is not None else d ** -0.5)
    pre = (bwd.fwd.variant(attn_bwd_preprocess_zero, None, pdl=pdl),
           (o, dout, tile.partition(delta, (PRE_ROWS,)), tile.partition(dq, (PRE_ROWS, d))))
    kern = fused_kernel(lowering, warps, pdl)

    def launch(dk_rows: Any, dv_rows: Any, turns: int, parts: int, first: int) -> tuple[Any, tuple]:
        return (kern, (q, k, v, dout, lse, delta, dq, tile.partition(dk_rows, (own, d)), tile.partition(dv_rows, (own, d)),
                       seq, sc, stream, bool(causal), group, int(diagonal), int(prefetch), turns, parts, first))
    units = dk.shape[0] // own
    whole, parts = (last_wave(units, _slots() if slots is None else slots, min(MAX_PARTS, seq // stream))
                    if split and not causal and group == 1 else (units, 1))
    dk_parts = _scratch(dk, (units - whole) * parts * own, d) if parts > 1 else None
    dv_parts = _scratch(dv, (units - whole) * parts * own, d) if parts > 1 else None
    if dk_parts is None or dv_parts is None:
        return [pre, launch(dk, dv, int(heads_in_turn), 1, 0)]
    steps = [pre] + ([launch(dk[:whole * own], dv[:whole * own], int(heads_in_turn), 1, 0)] if whole else [])
    tail = (dk[whole * own:], dv[whole * own:])
    return steps + [launch(dk_parts, dv_parts, 1, parts, whole),
                    (bwd.fwd.variant(sum_parts, None, pdl=pdl),
                     (dk_parts, dv_parts, *(tile.partition(x, (SUM_ROWS, d)) for x in tail), parts, own))]


# an unsplit launch's last key/value heads in a launch of their own (staged_launch_args), 0: no cut. A model of the
# block scheduler (greedy, 132 SMs, B4 H16 S4096 D128; interop_tests/dsl_tile/test_tile_block_runs.py) gives the
# conversion beside causal attention's second stage no idle SMs (heads in turn pack it within 1 %): no gain for a
# cut; full attention's split leaves ~3200 SM-us idle in its parts against 1900-4300 the conversion needs. Measured
# (H100 2026-12-07 21:31, docs/results/gpu_runs_2026-12-07_2131): staged +1.4-1.6 % full, none causal; cuts of 8 or
# 16 heads -0.1 to -0.5 %.
TAIL_HEADS = 0


class Stages(NamedTuple):
    """The fused backward's launches in two stages, for a caller that converts the f32 dQ sum while the
    second runs: after `first`, dQ's rows [0, done) are final (every key block of their heads has added
    into them), and `rest` adds into the others only."""
    first: list
    done: int
    rest: list


def staged_launch_args(*args: Any, tail_heads: int | None = None, **options: Any) -> Stages:
    """launch_args' launches (same arguments) in Stages: a split launch cut before its parts (the key blocks
    of the heads the whole key blocks cover are all in the first stage); another cut by heads, the last
    `tail_heads` key/value heads' key blocks in a launch of their own over those heads' rows (none where
    there are no more heads than that: then the first stage is everything, and done covers all of dQ; None:
    TAIL_HEADS)."""
    steps = launch_args(*args, **options)
    tail_heads = TAIL_HEADS if tail_heads is None else tail_heads
    q, k, dq, seq = args[0], args[1], args[7], args[10]
    group = options.get("group", 1)
    rows_per_head = group * seq                                   # a key/value head's query rows
    if len(steps) > 2:                                            # the split: [pre, whole?, parts, sum_parts]
        own = steps[-2][1][7].tile_shape[0]
        whole = steps[-2][1][-1]                                  # the parts' launch starts at key block `whole`
        return Stages(steps[:-2], (whole // (seq // own)) * rows_per_head, steps[-2:])
    kv_heads = k.shape[0] // seq
    if tail_heads <= 0 or kv_heads <= tail_heads:
        return Stages(steps, dq.shape[0], [])
    cut = (kv_heads - tail_heads) * seq                           # key/value rows of the first stage's heads
    rows = (kv_heads - tail_heads) * rows_per_head

    def heads(lo: int, hi: int, klo: int, khi: int) -> list:
        """The fused kernel's launch over query rows lo..hi and key/value rows klo..khi."""
        qs = [a[lo:hi] for a in (q, args[3], args[4], args[5], args[6], dq)]      # q, o, dout, lse, delta, dq
        ks = [a[klo:khi] for a in (k, args[2], args[8], args[9])]                 # k, v, dk, dv
        return launch_args(qs[0], ks[0], ks[1], qs[1], qs[2], qs[3], qs[4], qs[5], ks[2], ks[3], *args[10:],
                           **options)[1:]
    return Stages([steps[0], *heads(0, rows, 0, cut)], rows,
                  heads(rows, dq.shape[0], cut, k.shape[0]))


def forward_and_backward(q: Any, k: Any, v: Any, dout: Any, seq: int, causal: bool, simulate: bool = False,
                         group: int = 1, lowering: dict | None = None, tiles: tuple[int, int, int] | None = None,
                         diagonal: bool = False, prefetch: bool | int = False,
                         heads_in_turn: int = 1, split: bool = False, slots: int | None = None,
                         dtype: Any = None, pdl: bool = False) -> tuple[Any, Any, Any, Any]:
    """(o, dq, dk, dv) as the two-kernel example's forward_and_backward (O, dK and dV in `dtype`, f32 when None;
    dQ f32), with the fused backward."""
    return bwd.forward_and_backward(q, k, v, dout, seq, causal, simulate, group,
                                    steps=functools.partial(launch_args, lowering=lowering, tiles=tiles,
                                                            diagonal=diagonal, prefetch=prefetch,
                                                            heads_in_turn=heads_in_turn, split=split,
                                                            slots=slots, pdl=pdl), dtype=dtype)


def run_gpu(batch: int, heads: int, seq: int, d: int, kv_heads: int | None = None, form: str = "atomic dQ") -> None:
    """Ours against torch autograd of SDPA in float64 on the same bf16 inputs, as the two-kernel
    example's run_gpu checks (its bound, 1e-2 of the largest gradient), with the fused backward in `form`."""
    bwd.run_gpu(batch, heads, seq, d, kv_heads=kv_heads, steps=functools.partial(launch_args, **form_options(form)),
                label=f" fused ({form})")


def run_simulator(seq: int, d: int, group: int = 1) -> None:
    bwd.run_simulator(seq, d, group, steps=launch_args, label=" fused")


def example_forms(d: int, seq: int = 256) -> list[str]:
    """The forms main() runs at head dim `d` and length `seq` by default: the portable one and those pick_form
    gives a caller on warpgroup MMA, full and causal (none where their tiles do not divide `seq`)."""
    picks = (pick_form(d, seq, wgmma=True, causal=causal) for causal in (False, True))
    return ["atomic dQ", *dict.fromkeys(f for f in picks if f)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    ap.add_argument("--all-forms", action="store_true", help="on the GPU, every checked LADDER form (as the GPU "
                    "tests do; minutes), not only the picks and the portable atomic-dQ form")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        for d in (64, 128):
            for form in (f for f in CHECKED if applies(f, d)) if args.all_forms else example_forms(d, args.seq):
                run_gpu(2, 4, args.seq, d, form=form)
            run_gpu(2, 4, args.seq, d, kv_heads=2)
        print("ran on the GPU")
    else:
        for d in (64, 128):
            run_simulator(min(args.seq, 128), d)
        run_simulator(64, 64, group=2)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
