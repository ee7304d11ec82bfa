"""Tile kernels that write through atomics, scatter or gather (docs/tile.md, "Atomics, scatter and
gather"), shared by the simulator, refusal, PTX and GPU tests."""
from __future__ import annotations

from dsl import f32, i32, tile


@tile.kernel(requires=["len(out) == 1"])
def global_norm(x: tile.Partition[f32], out: tile.Atomic[f32, 1]):
    """out[0] += sum(x * x): every block adds its tile's sum of squares (the grid is x's tiles; x is
    only loaded, so the contract reads it)."""
    v = x.load()
    tile.atomic_add(out, 0, tile.sum(v * v))


@tile.kernel
def histogram(x: tile.Partition[i32], hist: tile.Atomic[i32, 1]):
    """hist[b] += 1 for every value b of x inside [0, len(hist)); the padding -1 and other values
    outside the bins are skipped."""
    b = x.load(padding=-1)
    tile.scatter_add(hist, b, 1)


@tile.kernel
def histogram_masked(x: tile.Partition[i32], w: tile.Partition[f32], hist: tile.Atomic[f32, 1]):
    """hist[b] += w where w > 0 (weighted, masked)."""
    wv = w.load()
    tile.scatter_add(hist, x.load(padding=-1), wv, mask=wv > 0)


@tile.kernel
def column_max(x: tile.Partition[f32, 2], colmax: tile.Atomic[f32, 2]):
    """colmax[0, j] = max over rows of x[:, j], rows in blocks: each block takes the max of its
    rows and updates the (1, BN) region of its column tile."""
    v = x.load(padding=-float("inf"))
    tile.atomic_max(colmax, (0, tile.bid(1)), tile.max(v, axis=0, keepdims=True))


@tile.kernel
def row_min(x: tile.Partition[i32, 2], rowmin: tile.Atomic[i32, 1]):
    """rowmin[i] = min over columns of x[i, :], through scatter_min at the rows' indices."""
    v = x.load(padding=2147483647)
    rows = tile.bid(0) * x.tile_shape[0] + tile.arange(x.tile_shape[0])
    tile.scatter_min(rowmin, rows, tile.min(v, axis=1))


@tile.kernel
def scatter_2d(r: tile.Partition[i32], c: tile.Array[i32], v: tile.Array[f32], grid: tile.Atomic[f32, 2]):
    """grid[r[k], c[k]] += v[k]: a 2-D scatter with one index tile per axis."""
    t = tile.bid(0)
    n = r.tile_shape
    tile.scatter_add(grid, (r.load(padding=-1), tile.load(c, t, n)), tile.load(v, t, n))


@tile.kernel(requires=["len(idx) == len(out)"])
def gather(idx: tile.Array[i32], src: tile.Array[f32], out: tile.Partition[f32]):
    """out[k] = src[idx[k]], -1.0 where idx[k] is outside src or odd."""
    i = tile.load(idx, tile.bid(0), out.tile_shape)
    out.store(tile.gather(src, i, padding=-1.0, mask=i % 2 == 0))


@tile.kernel(requires=["len(a) == len(out)"])
def scaled(a: tile.Array[f32], out: tile.Partition[f32], s: f32):
    """out = a * s, with a relation the launch must meet."""
    out.store(tile.load(a, tile.bid(0), out.tile_shape) * s)
