"""On sm_90 a tile.matmul that warpgroup MMA could not take says so (dsl/perf.py, "mma-sync-product"):
the fused attention backward's dQ on 8 warps at head dim 64 had silently run on mma.sync with 2-byte
shared loads (a third of the 4-warp form's speed) until its warpgroups could split half a panel."""
from __future__ import annotations

import linecache

import ml_dtypes
import numpy as np
import pytest

from dsl import f16, f32, tile
from dsl.perf import from_metadata
from interop_tests.dsl_tile.test_flash_attention_bwd_fused import FUSED, nan


@tile.kernel(num_warps=4)
def rows_product(a: tile.Array[f16, 2], b: tile.Array[f16, 2], c: tile.Partition[f32, 2]):
    bm, bn = c.tile_shape
    c.store(tile.matmul(tile.load(a, (tile.bid(0), 0), (bm, 64)), tile.load(b, (0, tile.bid(1)), (64, bn))))  # m-rows


def _kinds(kernel, args, arch):
    return from_metadata(kernel.compile(args, arch).metadata)


def _args(rows: int):
    a = np.ones((128, 64), np.float16)
    b = np.ones((64, 128), np.float16)
    return a, b, tile.partition(np.zeros((128, 128), np.float32), (rows, 64))


def test_a_product_of_32_rows_on_a_warpgroup_says_it_left_warpgroup_mma_and_why():
    paths = [p for p in _kinds(rows_product, _args(32), "sm_90") if p.kind == "mma-sync-product"]
    assert len(paths) == 1
    (p,) = paths
    assert "m-rows" in linecache.getline(p.file, p.line)
    assert "32 rows are not one m64 slice a warpgroup (64 rows on 4 warps" in p.reason
    assert "use tiles of 64 rows" in p.reason


def test_a_product_warpgroup_mma_takes_reports_nothing_and_sm80_never_reports_it():
    assert not [p for p in _kinds(rows_product, _args(64), "sm_90") if p.kind == "mma-sync-product"]
    assert "wgmma.mma_async" in rows_product.compile(_args(64), "sm_90").ptx
    assert not [p for p in _kinds(rows_product, _args(32), "sm_80") if p.kind == "mma-sync-product"]


def test_the_32_row_product_on_mma_sync_is_still_right(rng):
    a = rng.standard_normal((128, 64)).astype(np.float16)
    b = rng.standard_normal((64, 128)).astype(np.float16)
    out = np.full((128, 128), np.nan, np.float32)
    rows_product.simulate(a, b, tile.partition(out, (32, 64)))
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def _fused_paths(d: int, form: str):
    seq, rows = 256, 512
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    kern, args = steps[1]
    return [p for p in from_metadata(kern.compile(args, "sm_90").metadata) if p.kind == "mma-sync-product"]


@pytest.mark.parametrize("d,form,reported", [
    (128, "TMA ring + TMA reduce dQ, K V swizzled", True),          # 32 query rows on 4 warps: documented
    (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", False),
    (64, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", False),   # half a panel a warpgroup
    (64, "128x64 w8, TMA ring + TMA reduce dQ", True)])                # dS^T not in swizzle atoms
def test_the_fused_backwards_dq_is_reported_exactly_where_it_runs_on_mma_sync(d, form, reported):
    paths = _fused_paths(d, form)
    assert bool(paths) == reported
    for p in paths:
        assert "dq" in linecache.getline(p.file, p.line).lower()
