"""Tile kernels whose accumulator tiles leave through tile.atomic_add of a region: what TMA reduce-adds
carry under `tma_store` on sm_90 (interop_tests/dsl_tile/test_tile_tma_reduce.py)."""
from __future__ import annotations

from dsl import TypeVar, f32, tile

E = TypeVar("E")
T = tile.Constant[int]


@tile.kernel
def gemm_and_column_sum(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2],
                        total: tile.Atomic[f32, 2], bk: T):
    """c = a @ b, and every block adds its tile of c into `total`'s tile (0, j): total holds the sum
    of c's row blocks (every block of a column updates one region at once)."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)
    tile.atomic_add(total, (0, j), acc)


@tile.kernel
def gemm_by_k_updates(a: tile.Array[E, 2], b: tile.Array[E, 2], marks: tile.Partition[f32, 2],
                      c: tile.Atomic[f32, 2], bk: T):
    """c += a @ b one k tile at a time: each k step's product is added into the block's region of c
    (a region updated in a loop, as attention's backward adds dQ); `marks` (the grid) records 1."""
    bm, bn = marks.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    for k in range((a.shape[1] + bk - 1) // bk):
        part = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), tile.zeros((bm, bn), f32))
        tile.atomic_add(c, (i, j), part * 0.5)
    marks.store(tile.full((bm, bn), 1.0, f32))
