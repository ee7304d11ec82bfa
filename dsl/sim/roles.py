"""Both sides of a concurrent `If` (a warp-specialised kernel's producer and consumer warps) as
coroutines of the lock-step simulator.

Each side runs in its own Python thread, but only one runs at a time: they share one lock, which a side
gives up only while it waits for an mbarrier phase (`wait_until`). A state change of an mbarrier
(`notify`) wakes the waiting side to look again. When every side still running waits, nothing can
complete their phases any more: that is a deadlock on the GPU, and a SimulationError here (raised in
every waiting side, so the launch ends with it).
"""
from __future__ import annotations

import threading
from typing import Callable

from dsl.sim.faults import SimulationError

DEADLOCK = ("simulator: every role of the block waits on an mbarrier phase that never completes (a "
            "deadlock on the GPU: the copies or arrivals it waits for are never issued)")


class Roles:
    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.running = 0          # sides not finished
        self.waiting = 0          # of them, blocked in wait_until and not woken since
        self.dead = False
        self.generation = 0

    def run(self, sides: list[Callable[[], object]]) -> list[object]:
        """Run the sides to completion, the first in this thread; their results, or the first error."""
        results: list[object] = [None] * len(sides)
        errors: list[BaseException] = []

        def side(k: int) -> None:
            with self.cond:
                try:
                    results[k] = sides[k]()
                except BaseException as e:     # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(e)
                    self.dead = True
                finally:
                    self.running -= 1
                    self.notify()
        self.running = len(sides)
        threads = [threading.Thread(target=side, args=(k,), daemon=True) for k in range(1, len(sides))]
        for t in threads:
            t.start()
        side(0)
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Block this side (giving the others the lock) until `ready()`; SimulationError on deadlock."""
        while not ready():
            if self.dead or self.waiting + 1 >= self.running:
                self.dead = True
                self.cond.notify_all()
                raise SimulationError(DEADLOCK)
            self.waiting += 1
            gen = self.generation
            self.cond.wait()
            if self.generation == gen:      # not woken by notify (which counted it awake already)
                self.waiting -= 1

    def notify(self) -> None:
        """Some state changed: every waiting side looks again (and counts as awake until it waits)."""
        self.generation += 1
        self.waiting = 0
        self.cond.notify_all()
