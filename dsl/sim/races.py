"""Write-write races on global memory, found while simulating one launch.

The compiler proves that safe code gives every DisjointSlice element one owner
(dsl/frontend/ownership.py); this is the run-time twin, for what the proof cannot see (writes in
`with simt.unsafe():`, hand-built IR, a lowering's own stores). For each global array the launch
writes, `RaceLog` keeps the last writer of every element (its global linear thread id), the writer's
block barrier epoch and the store that wrote it. A store by another thread is a race unless both
threads are in one block and that block passed a `sync_threads()` since the first write (the barrier
orders them), or a grid or cluster barrier (`simt.grid.sync()`, `simt.cluster.sync()`) was passed
since (`RaceLog.sync_epoch`; a cluster barrier counts for every block, so a race across clusters
around one can go unreported, never the reverse). Atomics are not stores and never race here. The first race is reported, like a bounds
fault, as a `bridge.errors.KernelFault` once the launch has completed, naming both threads, the
element and both source lines.
"""
from __future__ import annotations

import numpy as np

from dsl.ir.nodes import Loc
from dsl.sim.faults import where
from dsl.sim.memory import MemRef


def thread_text(grid: tuple[int, int, int], block: tuple[int, int, int], gid: int) -> str:
    """`thread (x, y, z) of block (x, y, z)` of global linear thread id `gid` (block-major, x fastest)."""
    T = block[0] * block[1] * block[2]
    b, t = divmod(int(gid), T)
    bxyz = (b % grid[0], (b // grid[0]) % grid[1], b // (grid[0] * grid[1]))
    txyz = (t % block[0], (t // block[0]) % block[1], t // (block[0] * block[1]))
    return f"thread {txyz} of block {bxyz}"


class _Writers:
    """Last writer, its epoch and its store site, per element of one array (shaped like the array)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.thread = np.full(shape, -1, np.int64)
        self.epoch = np.zeros(shape, np.int64)
        self.sync = np.zeros(shape, np.int64)       # grid / cluster barriers passed before the write
        self.site = np.zeros(shape, np.int32)


class RaceLog:
    """Writers of one launch (all batches of blocks); `first` holds the first race found."""

    def __init__(self, kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int]) -> None:
        self.kernel, self.grid, self.block = kernel, grid, block
        self.T = block[0] * block[1] * block[2]
        self.arrays: dict[int, _Writers] = {}
        self.sites: list[Loc] = []
        self.site_ids: dict[int, int] = {}
        self.first: tuple | None = None
        self.sync_epoch = 0                           # grid / cluster barriers passed (dsl/sim/launch_ops.py)

    def _site(self, loc: Loc) -> int:
        k = self.site_ids.get(id(loc))
        if k is None:
            k = self.site_ids[id(loc)] = len(self.sites)
            self.sites.append(loc)
        return k

    def record(self, mem: MemRef, idx: list[np.ndarray], gids: np.ndarray, epochs: np.ndarray,
               loc: Loc) -> None:
        """Threads `gids` (block epochs `epochs`) store to `mem` at `idx` (in range, one per thread)."""
        if mem.shared or len(gids) == 0 or mem.data.ndim == 0:
            return
        w = self.arrays.get(id(mem))
        if w is None:
            w = self.arrays[id(mem)] = _Writers(mem.data.shape)
        key = tuple(np.broadcast_to(np.asarray(i, np.int64), gids.shape) for i in idx)
        site = self._site(loc)
        if self.first is None:
            self._check(mem, w, key, gids, epochs, site)
        w.thread[key], w.epoch[key], w.site[key] = gids, epochs, site
        w.sync[key] = self.sync_epoch

    def _check(self, mem: MemRef, w: _Writers, key: tuple, gids: np.ndarray, epochs: np.ndarray,
               site: int) -> None:
        flat = np.ravel_multi_index(key, mem.data.shape)
        order = np.argsort(flat, kind="stable")
        same = np.flatnonzero(flat[order][1:] == flat[order][:-1])
        if len(same):                    # two threads of this one store hit one element
            a, b = order[same[0]], order[same[0] + 1]
            self.first = (mem.name, mem.data.shape, tuple(int(k[a]) for k in key), int(gids[a]), site,
                          int(gids[b]), site)
            return
        prev = w.thread[key]
        ordered = ((prev // self.T == gids // self.T) & (epochs > w.epoch[key])) | (w.sync[key] < self.sync_epoch)
        bad = np.flatnonzero((prev >= 0) & (prev != gids) & ~ordered)
        if len(bad):
            p = bad[0]
            self.first = (mem.name, mem.data.shape, tuple(int(k[p]) for k in key), int(prev[p]),
                          int(w.site[key][p]), int(gids[p]), site)

    def exception(self) -> Exception:
        from bridge.errors import KernelFault  # lazy: dsl.sim must import without the runtime
        assert self.first is not None
        array, shape, index, t1, s1, t2, s2 = self.first
        element = f"{array}[{', '.join(map(str, index))}]"
        first, second = self.sites[s1], self.sites[s2]
        msg = (f"{self.kernel}: data race on '{array}': {element} was written by "
               f"{thread_text(self.grid, self.block, t1)} at {where(first)} and by "
               f"{thread_text(self.grid, self.block, t2)} at {where(second)}, with no sync_threads() of "
               "one block between them (simulated; on the GPU either value may win)")
        flat = int(np.ravel_multi_index(index, shape))
        return KernelFault(msg, kernel=self.kernel, array=array, index=flat, extent=-1,
                           file=second.file, line=second.line)
