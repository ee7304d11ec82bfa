"""The block order of a 2-D tile grid is the user's to choose (`@tile.kernel(group_m=)`, issue 28 item 2):
blocks walk the tiles in groups of group_m tile rows (Triton's GROUP_SIZE_M), group_m=1 is row-major,
and without the option GEMM kernels keep their grouped order of 8. Every order is a bijection of the
tiles, so the results are the NumPy float64 ones for ragged tile counts; the option reaches the
lowering (the PTX changes) and the cache key; bad values are refused at the `def`."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import DslCompileError, f32, tile
from dsl.tile.lower.tiles import GROUP_M, block_group


def _gemm(group_m):
    @tile.kernel(group_m=group_m)
    def gemm(a: tile.Array[f32, 2], b: tile.Array[f32, 2], c: tile.Partition[f32, 2]):
        i, j = tile.bid(0), tile.bid(1)
        bm, bn = c.tile_shape
        acc = tile.zeros((bm, bn), f32)
        for k in range(tile.cdiv(a.shape[1], 16)):
            acc += tile.matmul(tile.load(a, (i, k), (bm, 16)), tile.load(b, (k, j), (16, bn)))
        c.store(acc)
    return gemm


@pytest.mark.parametrize("group_m", [None, 1, 3, 8])
def test_every_block_order_gives_the_float64_product(rng, group_m):
    m, n, k = 16 * 7 + 5, 16 * 3 + 9, 40
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    _gemm(group_m).simulate_lowered(a, b, tile.partition(c, (16, 16)))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_the_option_reaches_the_lowering_and_gemm_kernels_default_to_groups_of_eight(rng):
    a = np.ones((64, 32), np.float32)
    b = np.ones((32, 64), np.float32)
    c = tile.partition(np.zeros((64, 64), np.float32), (16, 16))
    kernels = {g: _gemm(g) for g in (None, 1, 8)}
    fns = {g: k.tile_ir(a, b, c) for g, k in kernels.items()}
    assert block_group(fns[None], 2) == GROUP_M == 8 and block_group(fns[1], 2) == 1
    ptx = {g: k.ptx(a, b, c, arch="sm_80") for g, k in kernels.items()}
    assert ptx[1] != ptx[8]
    assert ptx[None] == ptx[8]


def test_bad_group_m_is_refused_at_the_def():
    for bad in (0, -2, 2.5, "8", 1000):
        with pytest.raises(DslCompileError, match="group_m="):
            @tile.kernel(group_m=bad)
            def k(a: tile.Array[f32], out: tile.Partition[f32]):
                out.store(tile.load(a, tile.bid(0), (64,)))
