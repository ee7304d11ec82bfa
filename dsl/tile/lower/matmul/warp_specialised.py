"""Warp specialisation of a tile kernel (KB_TILE_GEMM_PIPELINE=ws, dsl/tile/lower/matmul/tma.py, or
KB_TILE_LOOP_PIPELINE=ws, matmul/ring_ws.py): which kernels take it, the roles' thread ids and their
register reallocation (KB_TILE_SETMAXNREG). The block gets WS_PRODUCERS more threads in front of the
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
    """Index of the top-level loop a warp-specialised kernel splits at, or None: a GEMM loop under
    KB_TILE_GEMM_PIPELINE=ws (gemm_ws_loop), or a loop of products fed by a TMA ring under
    KB_TILE_LOOP_PIPELINE=ws (matmul/ring_ws.py)."""
    if L.gemm_pipeline == "ws":
        k = gemm_ws_loop(L)
        if k is not None:
            return k
    if L.loop_pipeline == "ws":
        from dsl.tile.lower.matmul.ring_ws import ring_ws_loop
        return ring_ws_loop(L)
    return None


def gemm_ws_loop(L) -> int | None:
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


REGISTER_FILE = 65536        # 32-bit registers of an SM (sm_90), all a block of one per SM may hold


def reallocation(L) -> tuple[int, int] | None:
    """(consumer, producer) registers a thread under KB_TILE_SETMAXNREG="C/P", or None where it would
    not help or could not be met: the consumers get more than ptxas could give every thread of the
    block (its register file over the threads, in steps of 8, at most 255: 168 for 384 threads; a
    block of 256 has 255 already), and the pool of a block alone on its SM covers what both ask."""
    if L.setmaxnreg == "off":
        return None
    regs, producer = (int(x) for x in L.setmaxnreg.split("/"))
    threads = L.T + WS_PRODUCERS
    cap = min(255, REGISTER_FILE // threads // 8 * 8)
    if regs <= cap or regs * L.T + producer * WS_PRODUCERS > cap * threads:
        return None
    return regs, producer


def reallocate(L, consumer: bool) -> None:
    """setmaxnreg at the start of a role (reallocation): the producer warpgroup gives registers back
    to the block's pool (dec P), the consumers take them (inc C). Every warp of a warpgroup runs it
    (the roles are whole warpgroups)."""
    got = reallocation(L)
    if got is None:
        return
    regs, producer = got
    L.arch_specific = True
    L.min_blocks = 1        # ptxas then allocates the registers the roles ask for (without: 10 a thread
                            # for a small kernel, and the consumers' inc would wait for ever)
    L.asm("setmaxnreg", action="inc" if consumer else "dec", count=regs if consumer else producer)
