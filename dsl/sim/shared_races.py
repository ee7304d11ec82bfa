"""Read/write races on shared memory that no barrier orders, found while simulating (KB_SIM_SHARED_RACES=1).

The simulator runs a block's threads in lock step, so an access that the GPU may reorder (a thread
reading a scratch element before another thread's store to it has landed, or overwriting one another
thread has yet to read) still gives the right answer here. This log makes such an order visible: for
every element of a shared buffer it keeps the last writer (global thread id) and the readers since that
write, each with the block's barrier count at the access (`Machine.shared_epoch`: sync_threads() and
every named or warpgroup barrier the block's threads pass). Another thread's store or load of that
element at the same count is a race: read after write, write after read, or write after write (two
lanes of one store hitting one element too). The first is raised at once as a SimulationError naming
both threads, the buffer, the element and the line.

What it tracks: loads and stores of shared buffers in the IR (SIMT `simt.shared.array`, the tile
lowering's relayout and reduction scratch), not inline PTX (ldmatrix, wgmma operands, TMA copies and
their mbarriers: racecheck covers those on the GPU). A named barrier of some threads counts for the
whole block, so a race across warpgroups around one can go unreported, never the reverse. Off by
default: it costs a few NumPy operations per shared access.
"""
from __future__ import annotations

import numpy as np

from bridge.settings import env_switch
from dsl.sim.faults import SimulationError, where
from dsl.sim.memory import MemRef
from dsl.sim.races import thread_text

NONE, SEVERAL = -1, -2          # reader slots: no reader since the last write / more than one thread


def shared_races_enabled() -> bool:
    """KB_SIM_SHARED_RACES=1: check shared-memory accesses for races (this module)."""
    return env_switch("KB_SIM_SHARED_RACES", False)


class _Elements:
    """Last writer and readers of every element of one shared buffer, all blocks of the batch."""

    def __init__(self, size: int) -> None:
        self.writer = np.full(size, NONE, np.int64)
        self.w_epoch = np.full(size, -1, np.int64)
        self.reader = np.full(size, NONE, np.int64)
        self.r_epoch = np.full(size, -1, np.int64)


class SharedRaceLog:
    """Accesses of one kernel launch's batch to its shared buffers (module docstring)."""

    def __init__(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        self.kernel, self.grid, self.block = kernel, grid, block
        self.buffers: dict[int, _Elements] = {}

    def _of(self, mem: MemRef) -> _Elements:
        got = self.buffers.get(id(mem))
        if got is None:
            got = self.buffers[id(mem)] = _Elements(int(mem.data.size))
        return got

    def _raise(self, kind: str, mem: MemRef, flat: int, gid: int, other: int, loc) -> None:
        per_block = max(1, int(np.prod(mem.extents)))
        raise SimulationError(
            f"{self.kernel}: shared-memory race ({kind}) on '{mem.name}'[{flat % per_block}]: "
            f"{thread_text(self.grid, self.block, gid)} at {where(loc)} and "
            + ("several other threads" if other == SEVERAL else thread_text(self.grid, self.block, other))
            + " with no barrier of the block between them")

    def store(self, mem: MemRef, elem: np.ndarray, gid: np.ndarray, epoch: np.ndarray, loc) -> None:
        """Lanes `gid` store elements `elem` (MemRef.element_id) at their blocks' barrier counts `epoch`."""
        if elem.size == 0:
            return
        log = self._of(mem)
        uniq, counts = np.unique(elem, return_counts=True)
        if (counts > 1).any():
            k = int(np.flatnonzero(counts > 1)[0])
            lanes = np.flatnonzero(elem == uniq[k])
            self._raise("write after write", mem, int(uniq[k]), int(gid[lanes[1]]), int(gid[lanes[0]]), loc)
        same = log.w_epoch[elem] == epoch
        waw = same & (log.writer[elem] != NONE) & (log.writer[elem] != gid)
        if waw.any():
            j = int(np.flatnonzero(waw)[0])
            self._raise("write after write", mem, int(elem[j]), int(gid[j]), int(log.writer[elem[j]]), loc)
        rd = log.reader[elem]
        war = (log.r_epoch[elem] == epoch) & ((rd == SEVERAL) | ((rd != NONE) & (rd != gid)))
        if war.any():
            j = int(np.flatnonzero(war)[0])
            self._raise("write after read", mem, int(elem[j]), int(gid[j]), int(rd[j]), loc)
        log.writer[elem], log.w_epoch[elem] = gid, epoch
        log.reader[elem], log.r_epoch[elem] = NONE, -1

    def load(self, mem: MemRef, elem: np.ndarray, gid: np.ndarray, epoch: np.ndarray, loc) -> None:
        """Lanes `gid` load elements `elem` at their blocks' barrier counts `epoch`."""
        if elem.size == 0:
            return
        log = self._of(mem)
        wr = log.writer[elem]
        raw = (log.w_epoch[elem] == epoch) & (wr != NONE) & (wr != gid)
        if raw.any():
            j = int(np.flatnonzero(raw)[0])
            self._raise("read after write", mem, int(elem[j]), int(gid[j]), int(wr[j]), loc)
        _, inverse, counts = np.unique(elem, return_inverse=True, return_counts=True)
        many = counts[inverse] > 1                  # several lanes of this load read the element
        fresh = (log.r_epoch[elem] != epoch) | (log.reader[elem] == NONE)
        keep_one = fresh | (log.reader[elem] == gid)
        log.reader[elem] = np.where(many, SEVERAL, np.where(keep_one, gid, SEVERAL))
        log.r_epoch[elem] = epoch
