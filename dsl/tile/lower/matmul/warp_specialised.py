"""Warp specialisation of a tile kernel (KB_TILE_GEMM_PIPELINE=ws, dsl/tile/lower/matmul/tma.py, or
KB_TILE_LOOP_PIPELINE=ws, matmul/ring_ws.py): the roles' thread ids and their register reallocation
(KB_TILE_SETMAXNREG). The block gets WS_PRODUCERS more threads in front of the tile program's:
tid.x < WS_PRODUCERS produce (thread 0 issues the TMA copies), the others run the tile program with
geo.tid = tid.x - WS_PRODUCERS. Which kernels split, and where, is matmul/ws_split.py's question:
this module only emits the roles, so the loops of both kinds import it and it imports neither.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile.lower.layout import c32

WS_PRODUCERS = 128  # the producer warpgroup


def bind_roles(L, tid: N.Var) -> None:
    """tid = tid.x - WS_PRODUCERS; L.ws_tid = tid.x; L.ws_group = its warpgroup; L.ws_consumer = this
    warp computes. The role
    test goes through lane 0's value (a shuffle), so ptxas sees it uniform per warp: a wgmma under a
    branch it cannot prove uniform is serialised."""
    L.ws_tid = L.tmp(N.Cast(N.Special("tid.x"), I32), "rawtid")
    L.emit(N.Assign(tid, N.BinOp("sub", L.ws_tid, c32(WS_PRODUCERS), I32)))
    L.ws_group = L.tmp(N.Warp("shfl", [N.BinOp("rshift", L.ws_tid, c32(7), I32), c32(0)], I32), "wgidx")
    L.ws_consumer = L.tmp(N.Compare("ge", L.ws_group, c32(WS_PRODUCERS // 128)), "consumer")


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
