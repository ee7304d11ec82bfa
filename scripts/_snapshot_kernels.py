"""Kernels of scripts/ptx_contract_snapshot.py beyond the zoo and the tile cases (module level: the
tile model reads annotations at the decorator)."""
from __future__ import annotations

from dsl import f32, simt, tile


@tile.kernel(persistent=True)
def padd(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


@simt.kernel(block=128, shared_mem=("max", 4096))
def stage(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    with simt.unsafe():
        dyn = simt.shared.dynamic(f32)
        fixed = simt.shared.array((128,), f32)
        t = simt.threadIdx.x
        if i < len(x):
            dyn[t] = x[i]
            fixed[t] = x[i] * 2.0
        simt.sync_threads()
        if i < len(out):
            out[i] = dyn[t] + fixed[127 - t]
