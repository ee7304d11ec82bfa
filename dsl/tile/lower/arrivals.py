"""Lowering of arrival counters (dsl/tile/arrivals.py) onto the SIMT IR: `if tile.arrive(c, i, n):` and
tile.store_at.

The arrival, CUDA's last-block idiom as CUTLASS's split-K semaphores write it:
1. every thread: on sm_90, `cp.async.bulk.wait_group 0` (its TMA reduce-adds and stores complete, their
   writes visible to it; a no-op for a thread with none in flight) and `fence.proxy.async.global`;
2. a block barrier: every thread's updates are ordered before thread 0's next step;
3. thread 0: `fence.acq_rel.gpu` (the release: cumulative over what the barrier ordered before it), an atomic
   add of 1 to c[i] (relaxed); the block that read n - 1 won: `fence.acq_rel.gpu` again (the acquire: every
   other arrival's updates visible) and c[i] = 0 (no block arrives there again this launch); the outcome into
   a shared word;
4. a block barrier, and every thread reads the outcome: the branch is taken by the whole block or by none.
An index outside the counter arrives nowhere (no block wins it; the simulator reports it).
So an arrival costs two block barriers and one atomic a block. The winner's loads are ordinary loads after
the acquire; store_at is an ordinary edge-masked store of the owned tile (a vector access per run where the
array's facts allow, dsl/tile/lower/runs.py).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, I32, INDEX
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, c32
from dsl.tile.lower.runs import store_runs

ARRIVAL_SLOT = "arrival"      # the shared word that carries thread 0's outcome to the block


def complete_bulk_copies(L) -> None:
    """Step 1: on sm_90 this thread's bulk copies complete (their writes visible to it), and ordered before
    its later generic accesses."""
    if L.cc >= 90:
        L.asm("cp.async.bulk.wait_group", keep=0)
        L.asm("fence.proxy.async.global")


class ArrivalsLowering:
    """Mixin of the Lowerer (dsl/tile/lower/kernel.py): `x_Arrival` for an arrival's `If` condition (lowered
    once, where the If stands) and `store_at` for the StoreAt statement."""

    def x_Arrival(self, e: T.Arrival) -> LV:
        counter = self.pref(e.counter)  # type: ignore[attr-defined]
        dt = e.counter.type.dtype
        at = [self.scalar(i) for i in e.index]  # type: ignore[attr-defined]
        count = self.scalar(e.count)  # type: ignore[attr-defined]
        complete_bulk_copies(self)
        self.sync()  # type: ignore[attr-defined]
        buf = self.scratch(I32, 1, ARRIVAL_SLOT)  # type: ignore[attr-defined]
        idx = [self.tmp(N.Cast(i, INDEX), "ai") for i in at]  # type: ignore[attr-defined]

        def leader() -> None:
            self.asm("fence.acq_rel.gpu")  # type: ignore[attr-defined]
            # tested even in an interior copy: the counter's element is not the block's tile
            inside = self.in_array(counter, idx, signed=True, always=True)  # type: ignore[attr-defined]
            won = self.new_var(BOOL, "won")  # type: ignore[attr-defined]
            self.emit(N.Assign(won, N.Const(False, BOOL)))  # type: ignore[attr-defined]

            def add() -> None:
                old = self.tmp(N.Atomic("add", counter, idx, [N.Const(1, dt)], "none", 0, dt, e.loc), "arr")  # type: ignore[attr-defined]
                last = N.Compare("eq", N.Cast(N.BinOp("add", old, N.Const(1, dt), dt), I32), count)
                self.emit(N.Assign(won, last))  # type: ignore[attr-defined]
                self.guarded(N.ReadVar(won), acquire)  # type: ignore[attr-defined]

            def acquire() -> None:
                self.asm("fence.acq_rel.gpu")  # type: ignore[attr-defined]
                self.emit(N.Store(counter, idx, N.Const(0, dt), "unchecked", 0, e.loc))  # type: ignore[attr-defined]
            self.guarded(inside if inside is not None else True, add)  # type: ignore[attr-defined]
            self.smem_store(buf, 0, N.ReadVar(won))  # type: ignore[attr-defined]
        self.guarded(N.Compare("eq", self.geo.tid, c32(0)), leader)  # type: ignore[attr-defined]
        self.sync()  # type: ignore[attr-defined]
        # (no write-after-read mark for the shared word: the next arrival's first barrier comes before its write)
        won = self.tmp(self.smem_load(buf, 0, BOOL), "won")  # type: ignore[attr-defined]
        return LV("U", (), BOOL, [won])

    def store_at(self, s: T.StoreAt) -> None:
        value = self.to_layout(self.expr(s.value), "D")  # type: ignore[attr-defined]
        shape = s.value.type.shape
        arr = self.pref(s.param)  # type: ignore[attr-defined]
        region = [self.scalar(i) for i in s.index]  # type: ignore[attr-defined]

        def origin() -> list[N.Expr]:
            return [self.global_index(region[k], shape[k], 0) for k in range(len(shape))]  # type: ignore[attr-defined]
        if store_runs(self, s.param, value, origin, s.loc):
            return
        own = self.geo.owner(value.size)  # type: ignore[attr-defined]
        for x, coords in zip(value.elems, self.coords_of("D", shape)):  # type: ignore[attr-defined]
            gidx = [self.global_index(region[k], shape[k], c) for k, c in enumerate(coords)]  # type: ignore[attr-defined]
            self.store_masked(arr, gidx, x, own, s.loc)  # type: ignore[attr-defined]
