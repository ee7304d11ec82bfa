"""Lowering of a tile `for` loop (Lowerer.stmts hands it every loop that is not a GEMM main loop): the
loop pipeline of pipeline.py copies its products' operand loads ahead, by cp.async or a TMA ring
(matmul/ring.py), with the last product rotated into the next iteration where asked
(matmul/overlap.py). The plan predicts how the body consumes the loads; the body is lowered, the
count checked, and the loop lowered again without the pipeline when it differs (never a wrong wait
count).

This is the part of the pipeline that lowers statements, so it sits above the products it reaches
(through L.stmts) and the pipeline's helpers they call (pipeline.py): the imports stay one way.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile import ir as T
from dsl.tile.lower import pipeline as P
from dsl.tile.lower.copies import cp_async_wait
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.matmul import overlap, pingpong
from dsl.tile.lower.matmul import ring as R


def lower_for(L, s: T.For) -> None:
    """A tile `for` loop: with its products' operand loads copied ahead (pipeline.plan: cp.async, or a
    TMA ring) when the body consumes each pipelined load as planned, else lowered again plainly."""
    start, stop, step = (L.scalar(e) for e in (s.start, s.stop, s.step))
    var = L.new_var(I32, s.var.name)
    L.vars[id(s.var)] = ("U", [var])
    pipe = L.rings.pop(id(s), None) or P.plan(L, s)     # a ws kernel's ring is planned before its roles split
    if pipe is not None:
        pipe.var, pipe.stop, pipe.step, pipe.start = var, stop, step, start
        if pipe.ring is not None:
            pipe.rotation = overlap.plan_rotation(L, s, pipe)
            pipe.pingpong = pingpong.plan_pingpong(L, s, pipe)
        for ld in pipe.loads():
            L.pipelined[id(ld)] = pipe
        body = L.block_of(lambda: L.stmts(s.body))
        for ld in pipe.loads():
            del L.pipelined[id(ld)]
        if pipe.ring is not None:
            if pipe.accepted():
                return _emit_ring_loop(L, pipe, s, body)
            if pipe.ring.ws:
                raise LoweringError(f"{s.loc}: internal: a warp-specialised loop read its ring's stages "
                                    f"{pipe.seen}, not {pipe.use_counts()} times each")
            R.drop(L, pipe.ring)
        elif pipe.accepted():
            if L.pipelined_loops:                       # an earlier loop's warps may still read the
                L.sync()                                # buffers these copies refill (shared: pipeline.py)
            for k in range(pipe.ahead):                 # the copies of the first `ahead` iterations
                first = L.new_var(I32, "pf0")
                L.emit(N.Assign(first, P.value_of(pipe, k)))
                runs = N.Compare("lt", N.ReadVar(first), stop)
                for st in pipe.stages:
                    P.issue(L, pipe, st, N.ReadVar(first), runs)
            L.emit(N.ForRange(var, start, stop, step, body, s.loc))
            cp_async_wait(L, 0)
            L.pipelined_loops += 1
            return
    body = L.block_of(lambda: L.stmts(s.body))
    L.emit(N.ForRange(var, start, stop, step, body, s.loc))


def _emit_ring_loop(L, pipe: P.Pipeline, s: T.For, body: list) -> None:
    """The loop of a ring (tma: set up and copy the first S iterations before it; ws: the producer
    role does both, matmul/ring_ws.py)."""
    ring = pipe.ring
    if not ring.ws:
        R.set_up(L, ring)
        for k in range(ring.S):
            at = L.tmp(P.value_of(pipe, k), "rj")

            def first(k: int = k, at: N.Expr = at) -> None:
                for i, st in enumerate(pipe.stages):
                    R.issue(L, ring, i, N.Const(k, I32), P.index_at(L, pipe, st.load, at))
            L.emit(N.If(N.Logical("and", ring.leader, N.Compare("lt", at, pipe.stop)), L.block_of(first), []))
    if pipe.rotation is not None:
        overlap.start(L, pipe)
    if pipe.pingpong is not None:
        pingpong.start(L, pipe)
    L.emit(N.ForRange(pipe.var, pipe.start, pipe.stop, pipe.step, body, s.loc))
    if pipe.rotation is not None:
        overlap.drain(L, pipe)
    if pipe.pingpong is not None:
        pingpong.finish(L, pipe, s.loc)
    if pipe.done is not None:                   # a chained ring: the next loop's numbers start here
        L.emit(N.Assign(pipe.done, N.BinOp("add", N.ReadVar(pipe.done),
                                           P.trips(L, pipe.start, pipe.stop, pipe.step), I32)))
    L.pipelined_loops += 1
