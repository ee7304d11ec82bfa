"""Warp specialisation of a tile loop whose products are fed by a TMA ring (KB_TILE_LOOP_PIPELINE=ws,
matmul/ring.py): the block gets a producer warpgroup (warp_specialised.WS_PRODUCERS threads in front of
the tile program's), whose thread 0 copies the ring loads of every iteration, while the tile program
(the consumers: tid.x - WS_PRODUCERS) waits, multiplies and releases each stage.

    set up the ring's barriers (the producer's thread 0), one block barrier
    if consumer:                        # a concurrent If: the simulator runs the sides as coroutines
        setmaxnreg.inc C (KB_TILE_SETMAXNREG)
        the whole tile program; its block barriers are a named barrier of the consumers
    else:
        setmaxnreg.dec P
        the scalar assignments the loop's bounds and load indices read
        thread 0: for each iteration n, each ring load i: wait for the release of iteration n - S's
                  stage, then copy load i of iteration n

The producer needs only scalars: the kernel splits when the loop is a top-level one whose bounds and
ring-load indices follow from scalar assignments before it (no loads, products or reductions among
them, none inside an `if`). Two consumer warpgroups (8 warps, 128 query rows of flash attention)
share the ring: each stage's empty barrier counts both. Not for persistent kernels.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile import ir as T
from dsl.tile.lower.matmul import ring as R
from dsl.tile.lower.matmul.mma_sync import match
from dsl.tile.lower.matmul.warp_specialised import reallocate
from dsl.tile.lower.pipeline import candidate_loads, index_at, iteration, plan


def ring_ws_loop(L) -> int | None:
    """Index of the top-level loop a KB_TILE_LOOP_PIPELINE=ws kernel splits at, or None."""
    if L.cc < 90 or L.persistent or L.T % 128:
        return None
    body = L.fn.body
    for k, s in enumerate(body):
        if not isinstance(s, T.For) or match(L, s, L.max_stages) is not None:
            continue                    # a GEMM main loop has pipelines of its own (matmul/mma_sync.py)
        loads = candidate_loads(L, s)
        if loads and R.ring_wanted(L, loads) and producer_prefix(body[:k], s, [op for op, _ in loads]) is not None:
            return k
    return None


def _reads(e: T.TExpr) -> set[int]:
    return {id(x.var) for x in T.walk_exprs(e) if isinstance(x, T.Read)}


def producer_prefix(before: list[T.TStmt], loop: T.For, loads: list[T.Load]) -> list[T.TStmt] | None:
    """The statements before `loop` that its bounds and the loads' indices depend on, in order: all
    scalar assignments free of loads, products and reductions; None when one is not (or sits in an
    `if`), since the producer warpgroup cannot run it."""
    needed: set[int] = set()
    for e in [loop.start, loop.stop, loop.step] + [i for op in loads for i in op.index]:
        needed |= _reads(e)
    needed.discard(id(loop.var))
    keep: list[T.TStmt] = []
    for st in reversed(before):
        if isinstance(st, T.If):
            assigned = {id(x.var) for x in T.walk_stmts(st.then + st.else_) if isinstance(x, T.Assign)}
            if assigned & needed:
                return None
            continue
        if not (isinstance(st, T.Assign) and id(st.var) in needed):
            continue
        if getattr(st.var.type, "shape", None) or any(
                isinstance(x, (T.Load, T.Matmul, T.Reduce, T.Gather)) for x in T.walk_exprs(st.value)):
            return None
        keep.append(st)
        needed |= _reads(st.value)
    return keep[::-1]


def lower_split(L, at: int) -> None:
    """The tile program of a kernel split at top-level loop `at` (ring_ws_loop): the ring, then the
    two roles under one concurrent If."""
    body = L.fn.body
    loop = body[at]
    pipe = plan(L, loop, ws=True)
    assert pipe is not None and pipe.ring is not None and pipe.ring.ws
    R.set_up(L, pipe.ring)
    prefix = producer_prefix(body[:at], loop, [st.load for st in pipe.stages])

    def producer() -> None:
        reallocate(L, consumer=False)
        L.stmts(prefix)
        _producer_loop(L, pipe, loop)

    def consumers() -> None:
        reallocate(L, consumer=True)
        L.rings[id(loop)] = pipe
        L.consumers_only = True       # block barriers: the consumers' named barrier
        L.stmts(body)
        L.consumers_only = False
    side = L.block_of(producer)
    L.emit(N.If(L.ws_consumer, L.block_of(consumers), side, concurrent=True))


def _producer_loop(L, pipe, loop: T.For) -> None:
    """Thread 0 of the producer warpgroup: every iteration's ring loads, each once its stage is free."""
    start, stop, step = (L.scalar(e) for e in (loop.start, loop.stop, loop.step))
    pipe.var, pipe.start, pipe.stop, pipe.step = L.new_var(I32, "pj"), start, stop, step
    saved = L.vars.get(id(loop.var))

    def body() -> None:
        n = iteration(L, pipe)
        for i, st in enumerate(pipe.stages):
            R.producer_wait(L, pipe.ring, i, n)
            R.issue(L, pipe.ring, i, n, index_at(L, pipe, st.load, N.ReadVar(pipe.var)))
    L.vars[id(loop.var)] = ("U", [pipe.var])
    try:
        loop_stmt = N.ForRange(pipe.var, start, stop, step, L.block_of(body), loop.loc)
    finally:
        if saved is not None:
            L.vars[id(loop.var)] = saved
    L.emit(N.If(pipe.ring.leader, [loop_stmt], []))
