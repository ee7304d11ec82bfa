"""The tile simulator's check of arrival counters (dsl/tile/arrivals.py): what the GPU would get wrong.

The simulator runs tile blocks one after another, so the last block to arrive at a counter element always
finds every other block's updates done; on the GPU the blocks run at once, and the winner's reads are right
only if every block that updates what it reads arrives there after its updates. The ledger records, per
simulated launch, the atomic updates (block, sequence number, elements), the arrivals and the winners'
reads and tile.store_at writes, and `check` raises a SimulationError where:
- a block updated an element that a winner read without arriving at the winner's counter element after
  that update (a count too small, an update after the arrival, another counter);
- a counter element got other than its `count` arrivals (fewer: no block won, and the element is left
  non-zero for the next launch), or was not zero at its first arrival;
- an element was written by store_at twice, or by store_at and an atomic update.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dsl.sim.faults import SimulationError
from dsl.tile import ir as T


class ArrivalLedger:
    """One simulated launch's arrivals, updates, winners' reads and stores (see the module docstring)."""

    def __init__(self, fn: T.TileFunction, grid: tuple[int, ...]) -> None:
        self.fn, self.grid = fn, grid
        self.seq = 0
        self.updates: dict[int, list[tuple[int, int, np.ndarray]]] = {}   # param -> (block, seq, flat elements)
        self.arrivals: dict[tuple, dict[int, int]] = {}         # (counter, index...) -> block -> seq
        self.counts: dict[tuple, tuple[int, T.Arrival]] = {}    # (counter, index...) -> (count, site)
        self.reads: list[tuple[int, tuple, int, np.ndarray, T.Load]] = []
        self.stores: dict[int, np.ndarray] = {}                         # param -> block that stored, -1 none

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    @staticmethod
    def key(interp: Any, e: T.Arrival) -> tuple[int, ...]:
        """The counter element arrival `e` names."""
        return tuple(int(interp.eval(i)) for i in e.index)

    def block(self, interp: Any) -> int:
        return int(np.ravel_multi_index(interp.coords, self.grid))

    def arrive(self, interp: Any, e: T.Arrival) -> bool:
        """This block's arrival: the counter element incremented (back to zero by the winner); won?"""
        arr = interp.args[e.counter.index]
        at, count = self.key(interp, e), int(interp.eval(e.count))
        who = self.block(interp)
        if not all(0 <= i < n for i, n in zip(at, arr.shape)):
            raise SimulationError(f"{self.fn.name}: tile block {who} arrived at element {at} of `{e.counter.name}`, "
                                  f"whose shape is {arr.shape}: no block wins it (at {e.loc})")
        key = (e.counter.index, at)
        arrived = self.arrivals.setdefault(key, {})
        if not arrived and int(arr[at]) != 0:
            raise SimulationError(f"{self.fn.name}: `{e.counter.name}`{list(at)} is {int(arr[at])} at its first arrival; "
                                  f"counters start at zero (zero the array once: each winner sets its element "
                                  f"back to zero) (at {e.loc})")
        if key in self.counts and self.counts[key][0] != count:
            raise SimulationError(f"{self.fn.name}: tile block {who} arrived at `{e.counter.name}`{list(at)} expecting "
                                  f"{count} arrivals, an earlier block {self.counts[key][0]} (at {e.loc})")
        self.counts[key] = (count, e)
        arrived[who] = self._next()
        old = int(arr[at])
        won = old + 1 == count
        arr[at] = 0 if won else old + 1
        return won

    def updated(self, interp: Any, p: T.TParam, flat: np.ndarray) -> None:
        self.updates.setdefault(p.index, []).append((self.block(interp), self._next(), flat))

    def read(self, interp: Any, e: T.Load, flat: np.ndarray) -> None:
        """A winner's load of a tile.Atomic array (the innermost arrival it is in names the counter)."""
        self.reads.append((self.block(interp), interp.won[-1], e.param.index, flat, e))

    def stored(self, interp: Any, s: T.StoreAt, shape: tuple[int, ...], flat: np.ndarray) -> None:
        by = self.stores.setdefault(s.param.index, np.full(int(np.prod(shape)), -1, np.int64))
        twice = flat[by[flat] >= 0]
        who = self.block(interp)
        if twice.size:
            raise SimulationError(f"{self.fn.name}: tile blocks {int(by[twice[0]])} and {who} both stored element "
                                  f"{int(twice[0])} (flat) of `{s.param.name}` with tile.store_at (at {s.loc})")
        by[flat] = who

    def check(self) -> None:
        names = {p.index: p.name for p in self.fn.params}
        for key, arrived in self.arrivals.items():
            count, site = self.counts[key]
            if len(arrived) != count:
                raise SimulationError(
                    f"{self.fn.name}: `{site.counter.name}`{list(key[1])} got {len(arrived)} arrivals, tile.arrive's "
                    f"count says {count}: " + ("no block won it, and the element stays non-zero for the next launch"
                                               if len(arrived) < count else "the counter went round more than once")
                    + f" (at {site.loc})")
        for who, (c, at), p, flat, e in self.reads:
            arrived = self.arrivals.get((c, at), {})
            for b, s, done in self.updates.get(p, ()):
                hit = np.intersect1d(flat, done)
                if hit.size and not (b in arrived and arrived[b] > s):
                    how = "after its arrival there" if b in arrived else "without arriving there"
                    raise SimulationError(
                        f"{self.fn.name}: tile block {who} won `{names[c]}`{list(at)} and read element {int(hit[0])} "
                        f"(flat) of `{names[p]}`, which tile block {b} updated {how}: on the GPU the read may miss "
                        f"that update (check tile.arrive's count and where the blocks arrive) (at {e.loc})")
        for p, by in self.stores.items():
            for b, _s, done in self.updates.get(p, ()):
                hit = done[by[done] >= 0]
                if hit.size:
                    raise SimulationError(f"{self.fn.name}: element {int(hit[0])} (flat) of `{names[p]}` was stored "
                                          f"with tile.store_at and updated atomically (tile block {b}): one or the "
                                          f"other, or the result depends on their order")
