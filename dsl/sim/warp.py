"""Warp-synchronous ops (full mask) on the warp-padded lane layout: one row of 32 per warp.

Source-lane rules follow PTX `shfl.sync` with the clamp values the backend uses (dsl/backend/
intrinsics.py SHFL): idx reads lane `src & 31`; up/down/xor read lane j and fall back to the thread's
own value when j is outside 0..31. Lanes that do not exist (the tail of a partial last warp) or have
exited contribute nothing: a shuffle from them returns the own value, sums and votes skip them (both
are undefined on the device). `sum` is the butterfly the backend emits (xor masks 16, 8, 4, 2, 1).
"""
from __future__ import annotations

import numpy as np

from dsl.ir.types import ScalarType
from dsl.sim import arith
from dsl.sim.lanes import WARP

SUM_MASKS = (16, 8, 4, 2, 1)


def check_converged(present: np.ndarray, live_padded: np.ndarray, width: int = WARP) -> np.ndarray | None:
    """Warps (lane groups of `width`: row numbers) where some live lanes take part and others do not,
    or None."""
    p = present.reshape(-1, width)
    lv = live_padded.reshape(-1, width)
    bad = p.any(axis=1) & (lv & ~p).any(axis=1)
    return np.flatnonzero(bad) if bad.any() else None


def warp_op(op: str, pos: np.ndarray, present: np.ndarray, args: list, t: ScalarType,
            vt: ScalarType) -> np.ndarray:
    """Result for the lanes at padded positions `pos` (all lanes in `present` take part).

    args[0] is the value (or predicate) per selected lane; args[1] the lane / delta / mask operand.
    `t` is the result type, `vt` the type of args[0].
    """
    n = len(pos)
    size = len(present)
    vals = np.zeros(size, arith.np_dtype(vt))
    vals[pos] = arith.as_type(args[0], vt)
    lane = pos % WARP
    if op in ("shfl", "shfl_up", "shfl_down", "shfl_xor"):
        b = np.broadcast_to(np.asarray(args[1]).astype(np.int64), (n,))
        if op == "shfl":
            j, ok = b & (WARP - 1), np.ones(n, bool)
        elif op == "shfl_up":
            j = lane - b
            ok = j >= 0
        elif op == "shfl_down":
            j = lane + b
            ok = (j <= WARP - 1) & (j >= 0)
        else:
            j = lane ^ (b & 0xFFFFFFFF)
            ok = j <= WARP - 1
        src = np.where(ok, pos - lane + np.where(ok, j, 0), pos)
        src = np.where(present[src], src, pos)
        return vals[src]
    rows = present.reshape(-1, WARP)
    w = pos // WARP
    if op == "ballot":
        pred = vals.astype(bool).reshape(-1, WARP) & rows
        bits = (pred.astype(np.uint64) << np.arange(WARP, dtype=np.uint64)).sum(axis=1)
        return bits.astype(np.uint32)[w]
    if op == "any":
        return (vals.astype(bool).reshape(-1, WARP) & rows).any(axis=1)[w]
    if op == "all":
        return (vals.astype(bool).reshape(-1, WARP) | ~rows).all(axis=1)[w]
    if op == "sum":
        m = vals.reshape(-1, WARP)
        idx = np.arange(WARP)
        for mask in SUM_MASKS:
            m = arith.binop("add", m, m[:, idx ^ mask], vt)
        return np.asarray(m).reshape(-1)[pos].astype(arith.np_dtype(t))
    raise NotImplementedError(f"simulator: warp op {op!r}")
