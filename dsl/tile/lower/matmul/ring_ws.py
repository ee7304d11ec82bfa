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
share the ring: each stage's empty barrier counts both. A persistent kernel splits before its tile loop
(lower_split's `walk`): each role walks the block's tiles. Under wgmma_a "shared" the producer also
copies the loop-invariant A operands waiting in swizzle atoms (flash attention's Q: matmul/produced_a.py).

Under the lowering switch ws_chain (KB_TILE_WS_CHAIN, off by default), top-level loops after
it whose ring loads are the same (array, tile shape and dtype, in the same order) and whose bounds and
indices the producer can compute as well share its ring (chained_loops):
causal attention's two stages, the key blocks left of the diagonal and the ones it crosses. The
producer walks them one after another, and each side counts the iterations the earlier loops ran,
so stages and phases go on where the last loop left them (pipeline.Pipeline.done).
"""
from __future__ import annotations

from typing import Callable

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile import ir as T
from dsl.tile.lower.matmul import pingpong
from dsl.tile.lower.matmul import produced_a as PA
from dsl.tile.lower.matmul import ring as R
from dsl.tile.lower.matmul.mma_sync import match
from dsl.tile.lower.matmul.warp_specialised import reallocate
from dsl.tile.lower.layout import c32
from dsl.tile.lower.pipeline import candidate_loads, index_at, iteration, plan, ring_pipeline, ring_tiles, trips


def ring_ws_loop(L) -> int | None:
    """Index of the top-level loop a KB_TILE_LOOP_PIPELINE=ws kernel splits at, or None."""
    if L.cc < 90 or L.T % 128:
        return None
    body = L.fn.body
    for k, s in enumerate(body):
        if not isinstance(s, T.For) or match(L, s, L.max_stages) is not None:
            continue                    # a GEMM main loop has pipelines of its own (matmul/mma_sync.py)
        one = _ring_tiles(L, s)
        if one is not None and producer_prefix(body[:k], [(s, list(one))]) is not None:
            return k
    return None


def _ring_tiles(L, s: T.For) -> dict[T.Load, list[T.Load]] | None:
    """The tiles loop `s`'s ring would hold (pipeline.ring_tiles of its loads), or None without a ring."""
    loads = candidate_loads(L, s)
    return ring_tiles(L, loads) if loads else None


def chained_loops(L, at: int) -> list[tuple[int, dict[T.Load, list[T.Load]]]]:
    """(index, ring tiles as pipeline.distinct gives them) of the top-level loops that share loop `at`'s
    ring, `at` first: under the lowering switch ws_chain, each later loop whose ring tiles match its
    tiles position by position and whose bounds and indices the producer can compute (without it,
    `at` alone: the others keep cp.async)."""
    body = L.fn.body
    chain = [(at, _ring_tiles(L, body[at]))]
    for k in range(at + 1, len(body) if L.ws_chain else 0):
        s = body[k]
        if not isinstance(s, T.For) or match(L, s, L.max_stages) is not None:
            continue
        one = _ring_tiles(L, s)
        if one is None or not _same_ring(list(chain[0][1]), list(one)):
            continue
        if producer_prefix(body[:k], [(body[i], list(t)) for i, t in chain] + [(s, list(one))]) is not None:
            chain.append((k, one))
    return chain


def _same_ring(a: list[T.Load], b: list[T.Load]) -> bool:
    return len(a) == len(b) and all(x.param.name == y.param.name and x.type.shape == y.type.shape
                                    and x.type.dtype == y.type.dtype for x, y in zip(a, b))


def _reads(e: T.TExpr) -> set[int]:
    return {id(x.var) for x in T.walk_exprs(e) if isinstance(x, T.Read)}


def producer_prefix(before: list[T.TStmt], loops: list[tuple[T.For, list[T.Load]]]) -> list[T.TStmt] | None:
    """The statements of `before` that the bounds of `loops` and the indices of their ring loads
    depend on, in order: all scalar assignments free of loads, products and reductions; None when
    one is not (or sits in an `if` or a loop), since the producer warpgroup cannot run it."""
    needed: set[int] = set()
    for loop, loads in loops:
        for e in [loop.start, loop.stop, loop.step] + [i for op in loads for i in op.index]:
            needed |= _reads(e)
    for loop, _ in loops:
        needed.discard(id(loop.var))
    keep: list[T.TStmt] = []
    for st in reversed(before):
        if isinstance(st, (T.If, T.For)):
            inner = st.then + st.else_ if isinstance(st, T.If) else st.body
            assigned = {id(x.var) for x in T.walk_stmts(inner) if isinstance(x, T.Assign)}
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


def lower_split(L, at: int, walk: Callable[[Callable[[], None]], None]) -> None:
    """The tile program of a kernel split at top-level loop `at` (ring_ws_loop): the ring, then the
    two roles under one concurrent If. Loops chained to it (chained_loops) share its ring. `walk`
    (tiles.tile_walk) runs a role's work over the block's tiles: each role walks them on its own side
    of the split, so a persistent block's producer fills the next tile's stages while the consumers
    finish this one, and one count of iterations run carries stages and phases from tile to tile (as
    it does from loop to loop in a chain)."""
    body = L.fn.body
    found = chained_loops(L, at)
    chain = [body[k] for k, _ in found]
    first = plan(L, chain[0], ws=True)
    assert first is not None and first.ring is not None and first.ring.ws
    # a chained loop's pipeline: its own ring loads in the stages of the first loop's ring
    pipes = [first] + [ring_pipeline(body[k], one, [st.buf for st in first.stages], first.ring)
                       for k, one in found[1:]]
    ring_loads = [(loop, [st.load for st in pipe.stages]) for loop, pipe in zip(chain, pipes)]
    staged = PA.candidates(L, body[:at], chain)     # A operands the producer can copy (Q)...
    if staged and producer_prefix(body[:found[-1][0]], ring_loads + [(chain[0], [s.value for s in staged])]) is None:
        staged = []                                 # ...where it can compute their indices
    produced = PA.bind(L, staged)
    if produced:
        L.emit(N.If(first.ring.leader, L.block_of(lambda: PA.init(L, produced)), []))
    R.set_up(L, first.ring)
    prefix = producer_prefix(body[:found[-1][0]], ring_loads + [(chain[0], [pa.load for pa in produced])])
    assert prefix is not None, "ring_ws_loop / chained_loops checked the ring's part, the candidates Q's"
    counted = len(chain) > 1 or L.persistent
    last = found[-1][0]

    def producer() -> None:
        reallocate(L, consumer=False)
        done = _counter(L, "pdone") if counted else None
        count = _counter(L, "ptiles") if produced else None

        def tile_work() -> None:
            L.stmts(prefix)
            if produced:
                PA.produce(L, produced, first.ring.leader, N.ReadVar(count))
            for loop, pipe in zip(chain, pipes):
                pipe.done = done
                _producer_loop(L, pipe, loop)
            if produced:
                _count_up(L, count)
        walk(tile_work)

    def consumers() -> None:
        reallocate(L, consumer=True)
        done = _counter(L, "cdone") if counted else None
        count = _counter(L, "ctiles") if produced else None

        def tile_work() -> None:
            for loop, pipe in zip(chain, pipes):
                pipe.done = done
                L.rings[id(loop)] = pipe
            L.produced_tiles = count
            L.consumers_only = True       # block barriers: the consumers' named barrier
            if produced:                  # their readers are the chain's loops: released after the last
                L.stmts(body[:last + 1])
                PA.release(L, produced)
                L.stmts(body[last + 1:])
                _count_up(L, count)
            else:
                L.stmts(body)
            L.consumers_only = False
        spanned = pingpong.spans_program(L)     # pingpong_span "program": the turns open once, close once
        if spanned:
            pingpong.program_turns(L, opening=True)
        L.turns_spanned = spanned
        walk(tile_work)
        L.turns_spanned = False
        if spanned:
            pingpong.program_turns(L, opening=False)
    side = L.block_of(producer)
    L.emit(N.If(L.ws_consumer, L.block_of(consumers), side, concurrent=True))


def _counter(L, name: str) -> N.Var:
    """The iterations the chained loops ran so far (0 before the first): where the next one's
    iteration numbers, and so its stages and phases, start."""
    v = L.new_var(I32, name)
    L.emit(N.Assign(v, c32(0)))
    return v


def _count_up(L, v: N.Var) -> None:
    L.emit(N.Assign(v, N.BinOp("add", N.ReadVar(v), c32(1), I32)))


def _producer_loop(L, pipe, loop: T.For) -> None:
    """Thread 0 of the producer warpgroup: every iteration's ring loads, each once its stage is free;
    in a chain, then the count of iterations run moves on by this loop's."""
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
    if pipe.done is not None:
        L.emit(N.Assign(pipe.done, N.BinOp("add", N.ReadVar(pipe.done), trips(L, start, stop, step), I32)))
