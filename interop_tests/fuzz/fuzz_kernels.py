"""Small fixed kernels the fuzz targets launch (validate-only) or compile; a file, so the DSL can read them."""
from __future__ import annotations

from dsl import f32, simt


@simt.kernel(block=128, requires=["len(a) == len(out)"])
def scale(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


@simt.kernel(domain=2)
def copy2d(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    if ij[0] < a.shape[0] and ij[1] < a.shape[1]:
        out[ij] = a[ij]


@simt.kernel(block=256)
def block_sum(a: simt.Array[f32], total: simt.DisjointSlice[f32]):
    with simt.unsafe():
        g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        if g < len(a):
            simt.atomic.add(total, 0, a[g])
