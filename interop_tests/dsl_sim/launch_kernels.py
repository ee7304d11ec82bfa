"""Kernels with launch features (docs/dsl.md, "Launch features"), shared by the PTX tests
(interop_tests/dsl_codegen/test_launch_features_ptx.py), the simulator tests
(interop_tests/dsl_sim/test_launch_features_sim.py) and the GPU tests
(interop_tests/runtime/test_launch_features_dsl_gpu.py). Each has a NumPy float64 reference here."""
from __future__ import annotations

import numpy as np

from dsl import f32, simt, tile

BLOCK = 128


# ---------------------------------------------------------------------------- cooperative: grid.sync
@simt.kernel(block=BLOCK, cooperative=True)
def center(x: simt.Array[f32], partial: simt.DisjointSlice[f32], out: simt.DisjointSlice[f32]):
    """out = x - mean(x): block sums into `partial`, one grid-wide barrier, then every block reads them."""
    with simt.unsafe():
        s = simt.shared.array(BLOCK, f32)
        t = simt.threadIdx.x
        b = simt.blockIdx.x
        stride = BLOCK * simt.gridDim.x
        acc = f32(0)
        i = b * BLOCK + t
        while i < len(x):
            acc += x[i]
            i += stride
        s[t] = acc
        simt.sync_threads()
        k = BLOCK // 2
        while k > 0:
            if t < k:
                s[t] = s[t] + s[t + k]
            simt.sync_threads()
            k = k // 2
        if t == 0:
            partial[b] = s[0]
        simt.grid.sync()
        total = f32(0)
        for j in range(simt.gridDim.x):
            total += partial[j]
        mean = total / f32(len(x))
        i = b * BLOCK + t
        while i < len(x):
            out[i] = x[i] - mean
            i += stride


def center_reference(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return x64 - x64.mean()


# ---------------------------------------------------------------------------- clusters: DSM
CLUSTER = 2


@simt.kernel(block=BLOCK, cluster=(CLUSTER, 1, 1))
def neighbour_sums(x: simt.Array[f32], out: simt.DisjointSlice[f32], ranks: simt.DisjointSlice[f32]):
    """out[b] = the sum of block b's BLOCK elements of x plus the sum of its cluster neighbour's (rank + 1
    mod size), read from the neighbour's shared memory; ranks[b] = the block's cluster rank."""
    with simt.unsafe():
        s = simt.shared.array(BLOCK, f32)
        t = simt.threadIdx.x
        b = simt.blockIdx.x
        i = b * BLOCK + t
        s[t] = x[i] if i < len(x) else f32(0)
        simt.sync_threads()
        k = BLOCK // 2
        while k > 0:
            if t < k:
                s[t] = s[t] + s[t + k]
            simt.sync_threads()
            k = k // 2
        simt.cluster.sync()                          # every block's s[0] is written
        peer = simt.cluster.map_shared(s, (simt.cluster.rank() + 1) % simt.cluster.size())
        theirs = peer[0]
        simt.cluster.sync()                          # no block leaves while a neighbour still reads it
        if t == 0:
            out[b] = s[0] + theirs
            cx, cy, cz = simt.cluster.block_index()
            ranks[b] = f32(simt.cluster.rank() * 100 + cx * 10 + cy + cz)


def neighbour_reference(x: np.ndarray, blocks: int) -> tuple[np.ndarray, np.ndarray]:
    own = np.zeros(blocks)
    own[: -(-len(x) // BLOCK)] = np.add.reduceat(x.astype(np.float64), np.arange(0, len(x), BLOCK))
    ranks = np.arange(blocks) % CLUSTER
    peer = (np.arange(blocks) // CLUSTER) * CLUSTER + (ranks + 1) % CLUSTER
    return own + own[peer], (ranks * 100 + ranks * 10).astype(np.float64)


# ---------------------------------------------------------------------------- PDL
@simt.kernel(block=256, pdl=True, requires=["len(x) == len(out)"])
def axpb(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    """One step of a dependent chain: out = a * x + b (waits for its predecessor at entry)."""
    simt.pdl.launch_dependents()
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b


@simt.kernel(block=256, pdl=True, requires=["len(x) == len(out)"])
def axpb_explicit(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    """The same step with its own wait: the index arithmetic runs before it, no memory access does."""
    i = simt.thread.index_1d()
    simt.pdl.wait()
    simt.pdl.launch_dependents()
    out[i] = a * x[i] + b


def chain_reference(x: np.ndarray, steps: int, a: float = 1.0001, b: float = 0.5) -> np.ndarray:
    y = x.astype(np.float64)
    for _ in range(steps):
        y = np.float32(a) * y + np.float32(b)
    return y


# ---------------------------------------------------------------------------- tile kernels
@tile.kernel(pdl=True)
def tile_axpb(x: tile.Array[f32], out: tile.Partition[f32], a: f32, b: f32):
    tile.pdl.launch_dependents()
    tile.pdl.wait()
    out.store(tile.load(x, tile.bid(0), out.tile_shape) * a + b)


@tile.kernel(cluster=2)
def tile_ranks(out: tile.Partition[f32]):
    r = tile.cluster_rank()
    tile.cluster_sync()
    out.store(tile.full(out.tile_shape, 0.0) + r + tile.cluster_size() * 10)


@tile.kernel(cluster=2, group_m=3)
def tile_grouped_ranks(out: tile.Partition[f32, 2]):
    """Each tile: its cluster rank + 10 * its row + 100 * its column, in a grouped block order."""
    out.store(tile.full(out.tile_shape, 0.0) + tile.cluster_rank() + 10.0 * tile.bid(0) + 100.0 * tile.bid(1))


@tile.kernel(cooperative=True)
def tile_plus_one(x: tile.Array[f32], out: tile.Partition[f32]):
    v = tile.load(x, tile.bid(0), out.tile_shape)
    tile.grid_sync()
    out.store(v + 1.0)
