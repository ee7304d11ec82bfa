"""Warp specialisation of a tile GEMM kernel (KB_TILE_GEMM_PIPELINE=ws, dsl/tile/lower/matmul/tma.py): which
kernels take it, and the roles' thread ids. The block gets WS_PRODUCERS more threads in front of the
tile program's: tid.x < WS_PRODUCERS produce (thread 0 issues the TMA copies), the others run the tile
program with geo.tid = tid.x - WS_PRODUCERS.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile import ir as T
from dsl.tile.lower.layout import c32

WS_PRODUCERS = 128  # the producer warpgroup


def ws_loop(L) -> int | None:
    """Index of the top-level GEMM loop a warp-specialised kernel splits at, or None: sm_90, 8 warps,
    a loop the TMA path lowers, only scalar and constant-tile assignments before it (the producers
    run them too) and no other product after it. A persistent kernel splits the same way inside its
    tile loop: the producer walks the block's tiles too and runs ahead into the next tile while the
    consumers store this one."""
    from dsl.tile.lower.matmul.mma_sync import match
    if L.cc < 90 or L.T != 256:
        return None
    body = L.fn.body
    k = next((i for i, s in enumerate(body) if not isinstance(s, T.Assign)), None)
    if k is None or not isinstance(body[k], T.For):
        return None
    plan = match(L, body[k], L.max_stages)
    if plan is None or plan.kind != "tma":
        return None
    simple = all(not isinstance(e, (T.Load, T.Matmul, T.Reduce)) for s in body[:k] for e in T.walk_exprs(s.value))
    later = any(isinstance(e, T.Matmul) for e in T.body_exprs(body[k + 1:]))
    return k if simple and not later else None


def bind_roles(L, tid: N.Var) -> None:
    """tid = tid.x - WS_PRODUCERS; L.ws_tid = tid.x; L.ws_consumer = this warp computes. The role
    test goes through lane 0's value (a shuffle), so ptxas sees it uniform per warp: a wgmma under a
    branch it cannot prove uniform is serialised."""
    L.ws_tid = L.tmp(N.Cast(N.Special("tid.x"), I32), "rawtid")
    L.emit(N.Assign(tid, N.BinOp("sub", L.ws_tid, c32(WS_PRODUCERS), I32)))
    group = L.tmp(N.Warp("shfl", [N.BinOp("rshift", L.ws_tid, c32(7), I32), c32(0)], I32), "wgidx")
    L.ws_consumer = L.tmp(N.Compare("ge", group, c32(WS_PRODUCERS // 128)), "consumer")
