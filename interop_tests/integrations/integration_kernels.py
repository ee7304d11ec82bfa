"""Kernels the torch/JAX integration tests turn into ops (a module: the DSL reads kernel source)."""
from __future__ import annotations

from dsl import TypeVar, f32, i32, i64, simt, tile

T = TypeVar("T")


@simt.kernel(block=64, requires=["x.shape == out.shape"])
def scale(x: simt.Array[T], out: simt.DisjointSlice[T], s: T):
    i = simt.thread.index_1d()
    out[i] = x[i] * s


@simt.kernel(block=128, requires=["x.shape == out.shape"])
def silu(x: simt.Array[T], out: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    out[i] = x[i] / (T(1) + simt.exp(-x[i]))


@simt.kernel(block=128, requires=["x.shape == grad_x.shape", "grad_out.shape == grad_x.shape"])
def silu_backward(x: simt.Array[T], grad_out: simt.Array[T], grad_x: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    # d/dx x*sig(x) = sig(x) * (1 + x * (1 - sig(x))), in one guarded store (threads past the end read nothing)
    grad_x[i] = grad_out[i] * (T(1) + x[i] * (T(1) - T(1) / (T(1) + simt.exp(-x[i])))) / (T(1) + simt.exp(-x[i]))


@simt.kernel(domain=2, block=(16, 16, 1), requires=["a.shape == b.shape", "out.shape == a.shape"])
def add2d(a: simt.Array[f32, 2], b: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    out[ij] = a[ij[0], ij[1]] + b[ij[0], ij[1]]


@simt.kernel(block=64, requires=["len(out) == len(a)"])
def row_sums(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0)
    if i < len(out):                     # threads past the end must not read a
        for k in range(a.shape[1]):
            acc += a[i, k]
    out[i] = acc


@simt.kernel(block=64, requires=["len(out) == n"])
def iota(out: simt.DisjointSlice[i64], n: i64):
    i = simt.thread.index_1d()
    out[i] = i


@simt.kernel(block=64, requires=["len(out) == len(idx)"])
def gather(x: simt.Array[f32], idx: simt.Array[i32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = x[idx[i]]                   # idx[i] is not proven in range: checked at run time


@simt.kernel(block=(128, 1, 1))
def histogram(data: simt.Array[i32], hist: simt.DisjointSlice[i32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(data):
        with simt.unsafe():
            simt.atomic.add(hist, data[i], 1)


@simt.kernel(block=(256, 1, 1))
def total(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(a):
        with simt.unsafe():
            simt.atomic.add(out, 0, a[i])


@tile.kernel
def tile_add(a: tile.Array[T], b: tile.Array[T], out: tile.Partition[T]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


@tile.kernel
def tile_axpy(a: tile.Array[f32], y: tile.Partition[f32], alpha: f32):
    t = tile.bid(0)
    y.store(y.load() + alpha * tile.load(a, t, y.tile_shape))


@tile.kernel
def tile_rows_scaled(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], k: tile.Constant[int]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape)
    out.store(v * k)


@tile.kernel
def tile_two_outputs(a: tile.Array[f32], p: tile.Partition[f32], q: tile.Partition[f32]):
    t = tile.bid(0)
    p.store(tile.load(a, t, p.tile_shape))
    q.store(tile.load(a, t, q.tile_shape))


@tile.kernel
def tile_doubled_total(a: tile.Array[f32, 1], out: tile.Partition[f32, 1], total: tile.Atomic[f32, 1]):
    """out = 2 a, and every block adds its tile's sum of a into total[0] (a tile.Atomic: any block updates it)."""
    v = tile.load(a, tile.bid(0), out.tile_shape)
    out.store(v * 2.0)
    tile.atomic_add(total, 0, tile.sum(v))


@tile.kernel
def tile_global_sumsq(x: tile.Partition[f32, 1], out: tile.Atomic[f32, 1]):
    """docs/tile.md's global norm: x only loaded (read-only, and the grid), out[0] += each block's sum of squares."""
    v = x.load()
    tile.atomic_add(out, 0, tile.sum(v * v))
