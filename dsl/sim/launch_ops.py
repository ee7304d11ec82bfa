"""The launch features in the CPU simulator (dsl/ir/launch_nodes.py; rows of dsl/vocab/launch.py):
`LaunchSemantics`, one of Machine's bases, the cluster registers of a batch, and how blocks batch.

The simulator runs the blocks of a batch in lock-step, so a barrier is a check that every thread that
must reach it did, at the same statement:
- grid.sync: a cooperative kernel runs its whole grid in one batch (the validator caps the grid at
  limits.SIM_MAX_CORESIDENT blocks); every running thread of the grid must arrive, and every block must
  have a thread that does (a block whose threads all returned never arrives: a deadlock on the GPU).
  Both are SimulationErrors. After a bounds fault (whose thread exited), the barrier ends every thread,
  as the device's barrier does (dsl/backend/launch_codegen.py), so the launch reports the fault.
- cluster.sync: the running threads of each cluster that any of them reached it with must all reach it
  (threads that exited do not hold it up, as PTX `exit` says); batches hold whole clusters.
- map_shared: block `rank` of the lane's cluster's shared array (one buffer per block, so a peer's
  writes are seen as the device shows them after a cluster.sync).
- pdl.wait / launch_dependents change only timing: nothing to do here.
"""
from __future__ import annotations

import numpy as np

from dsl.sim.lanes import count, to_mask, vec
from dsl.sim.memory import MemRef


def batch_blocks(grid: tuple[int, int, int], cooperative: bool, cluster, per_batch: int) -> int:
    """Blocks per batch: the whole grid for a cooperative kernel, whole clusters (a multiple of the
    consecutive linear block ids that hold complete clusters) for a cluster kernel."""
    nblocks = grid[0] * grid[1] * grid[2]
    if cooperative:
        return nblocks
    if cluster is None:
        return per_batch
    cx, cy, cz = cluster
    unit = grid[0] * grid[1] * cz if cz > 1 else grid[0] * cy if cy > 1 else cx
    return max(unit, per_batch // unit * unit)


def add_cluster_registers(lanes, cluster) -> None:
    """%cluster_ctarank, %cluster_nctarank and %cluster_ctaid.{x,y,z} of every lane of the batch."""
    if cluster is None:
        return
    c = np.asarray(cluster, np.int64)
    pos = lanes.block_xyz % c                           # per block of the batch
    rank = pos[:, 0] + c[0] * (pos[:, 1] + c[1] * pos[:, 2])
    sp = lanes.special
    sp["cluster_ctarank"] = rank[lanes.blk]
    sp["cluster_nctarank"] = np.int64(c.prod())
    for k, ax in enumerate("xyz"):
        sp[f"cluster_ctaid.{ax}"] = pos[lanes.blk, k]


class LaunchSemantics:
    """e_LaunchOp / e_ClusterShared of the Machine (dsl/sim/interp.py)."""

    def e_LaunchOp(self, e, sel):
        if e.op == "grid.sync":
            self._grid_sync(e, sel)
        elif e.op == "cluster.sync":
            self._cluster_sync(e, sel)
        elif e.op not in ("pdl.wait", "pdl.launch_dependents"):
            raise self._err(e, f"launch operation {e.op!r} cannot be simulated")
        return None

    def _grid_sync(self, e, sel) -> None:
        if self.fault.hit:            # the device's barrier ends every block after a fault
            self._exit(np.flatnonzero(self.live()))
            return
        T = self.lanes.T
        arrived = to_mask(sel, self.L)
        missing = self.live() & ~arrived
        if missing.any():
            lane = int(np.flatnonzero(missing)[0])
            raise self._err(e, f"grid.sync() not reached by {self.lanes.describe(lane)}, which is still "
                               "running elsewhere (a deadlock on the GPU: every running thread of the grid "
                               "must reach the same grid.sync())")
        absent = ~arrived.reshape(-1, T).any(axis=1)
        if absent.any():
            xyz = tuple(int(v) for v in self.lanes.block_xyz[int(np.flatnonzero(absent)[0])])
            raise self._err(e, f"grid.sync() reached by no thread of block {xyz}: its threads all returned "
                               "before it (a deadlock on the GPU: every block of a cooperative grid must reach "
                               "each grid.sync())")
        self.block_epoch += 1
        if self.races is not None:
            self.races.sync_epoch += 1

    def _cluster_sync(self, e, sel) -> None:
        cluster = np.asarray(self.fn.cluster, np.int64)
        T = self.lanes.T
        cid = self._cluster_ids()
        arrived = to_mask(sel, self.L)
        blocks_in = np.zeros(int(cid.max()) + 1, bool)
        blocks_in[cid[arrived.reshape(-1, T).any(axis=1)]] = True
        concerned = blocks_in[cid][self.lanes.blk]       # lanes of the clusters that reached it
        missing = self.live() & ~arrived & concerned
        if missing.any():
            lane = int(np.flatnonzero(missing)[0])
            raise self._err(e, f"cluster.sync() not reached by {self.lanes.describe(lane)}, which is still "
                               f"running elsewhere in its cluster of {int(cluster.prod())} blocks (undefined "
                               "behaviour on the GPU: every thread of the cluster must reach it)")
        self.block_epoch[blocks_in[cid]] += 1
        if self.races is not None:
            self.races.sync_epoch += 1

    def _cluster_ids(self) -> np.ndarray:
        """A cluster number per block of the batch."""
        c = np.asarray(self.fn.cluster, np.int64)
        g = np.asarray(self.lanes.grid, np.int64)
        cxyz = self.lanes.block_xyz // c
        per = g // c
        return cxyz[:, 0] + per[0] * (cxyz[:, 1] + per[1] * cxyz[:, 2])

    def e_ClusterShared(self, e, sel):
        """Block `rank` of each lane's cluster: the shared array's buffer read at that block."""
        mem = self.shared.get(e.alloc)
        c = np.asarray(self.fn.cluster, np.int64)
        n = count(sel, self.L)
        rank = vec(np.asarray(self.ev(e.rank, sel)).astype(np.int64), n)
        size = int(c.prod())
        bad = (rank < 0) | (rank >= size)
        if bad.any():
            raise self._err(e, f"map_shared rank {int(rank[np.flatnonzero(bad)[0]])} is outside the cluster "
                               f"of {size} blocks (undefined behaviour on the GPU)")
        lanes = self._lanes_of(sel)
        origin = self.lanes.block_xyz[self.lanes.blk[lanes]] // c * c
        g = self.lanes.grid
        tx = origin[:, 0] + rank % c[0]
        ty = origin[:, 1] + (rank // c[0]) % c[1]
        tz = origin[:, 2] + rank // (c[0] * c[1])
        target = tx + g[0] * (ty + g[1] * tz) - self.lanes.first
        remote = np.full(self.L, -1, np.int64)
        remote[lanes] = target
        view = MemRef(f"{mem.name}@rank", mem.data, mem.dtype, shared=True)
        view.remote = remote                            # read by Machine._blk
        return view


__all__ = ["LaunchSemantics", "add_cluster_registers", "batch_blocks"]
