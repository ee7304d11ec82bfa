"""Tile kernels that finish a region in the launch that sums it: the last block to arrive at the region's
counter reads the tile.Atomic sum and writes the result (dsl/tile/arrivals.py;
interop_tests/dsl_tile/test_tile_arrivals.py)."""
from __future__ import annotations

from dsl import TypeVar, f32, i32, tile

E = TypeVar("E")
F = TypeVar("F")
K = tile.Constant[int]


@tile.kernel
def row_sums(x: tile.Array[f32, 2], acc: tile.Atomic[f32, 2], counts: tile.Atomic[i32, 1],
             out: tile.Atomic[F, 2], grid: tile.Partition[f32, 2]):
    """out = x.sum(axis=1) in out's dtype: block (i, j) adds the sums of its tile's rows into acc's rows, and
    the last of row block i's blocks converts them (per-element atomics: one thread an element)."""
    bm, bn = grid.tile_shape
    i = tile.bid(0)
    tile.atomic_add(acc, (i, 0), tile.sum(tile.load(x, (i, tile.bid(1)), (bm, bn)), axis=1).reshape((bm, 1)))
    if tile.arrive(counts, i, tile.num_blocks(1)):
        tile.store_at(out, (i, 0), tile.load(acc, (i, 0), (bm, 1)).astype(out.dtype))


@tile.kernel
def split_k_gemm(a: tile.Array[E, 2], b: tile.Array[E, 2], acc: tile.Atomic[f32, 2], counts: tile.Atomic[i32, 2],
                 c: tile.Atomic[F, 2], grid: tile.Partition[f32, 2], splits: K, bk: K):
    """c = a @ b in c's dtype, K cut into `splits` parts: block (i, j * splits + s) adds part s's product
    into acc's tile (i, j), and the last of the tile's `splits` blocks reads the sum and stores it into c.
    (grid: an (M, N * splits) array whose (bm, bn) tiles are the blocks; nothing is stored into it.)"""
    bm, bn = grid.tile_shape
    i = tile.bid(0)
    j = tile.bid(1) // splits
    s = tile.bid(1) % splits
    steps = tile.cdiv(a.shape[1], bk)
    part = tile.zeros((bm, bn), f32)
    for k in range(s * steps // splits, (s + 1) * steps // splits):
        part = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), part)
    tile.atomic_add(acc, (i, j), part)
    if tile.arrive(counts, (i, j), splits):
        tile.store_at(c, (i, j), tile.load(acc, (i, j), (bm, bn)).astype(c.dtype))


@tile.kernel
def row_sums_each_step(x: tile.Array[f32, 2], acc: tile.Atomic[f32, 2], counts: tile.Atomic[i32, 1],
                       out: tile.Atomic[F, 2], grid: tile.Partition[f32, 2], steps: K):
    """row_sums with each block walking `steps` row blocks (block (b, j): row blocks b * steps ...) and
    arriving after each add, as attention's backward adds into every query block it walks: the arrival in a
    loop, whose last block converts that row block."""
    bm, bn = grid.tile_shape
    j = tile.bid(1)
    for r in range(steps):
        i = tile.bid(0) * steps + r
        tile.atomic_add(acc, (i, 0), tile.sum(tile.load(x, (i, j), (bm, bn)), axis=1).reshape((bm, 1)))
        if tile.arrive(counts, i, tile.num_blocks(1)):
            tile.store_at(out, (i, 0), tile.load(acc, (i, 0), (bm, 1)).astype(out.dtype))
