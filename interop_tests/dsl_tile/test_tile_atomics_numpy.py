"""Tile atomics, scatter and gather on the CPU against NumPy float64: the tile simulator
(`simulate`) and the lowered SIMT IR on the SIMT simulator (`simulate_lowered`), with array sizes
that are not multiples of the tiles, so the edge masking is exercised."""
from __future__ import annotations

import json

import numpy as np
import pytest
import tile_atomics_lib as K

from dsl import tile

RNG = np.random.default_rng(28)


def _run(kernel, args, lowered: bool) -> None:
    (kernel.simulate_lowered if lowered else kernel.simulate)(*args)


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_global_norm_adds_every_blocks_sum_of_squares_into_one_element(lowered):
    x = RNG.standard_normal(5000 if not lowered else 1000).astype(np.float32)
    out = np.zeros(1, np.float32)
    _run(K.global_norm, (tile.partition(x, (256,)), out), lowered)
    want = float(np.sum(x.astype(np.float64) ** 2))
    assert out[0] == pytest.approx(want, rel=1e-5)


def test_global_norm_accumulates_onto_what_the_array_holds():
    x = np.arange(1, 301, dtype=np.float32)
    out = np.full(1, 7.0, np.float32)
    K.global_norm.simulate(tile.partition(x, (128,)), out)
    assert out[0] == pytest.approx(7.0 + float(np.sum(np.arange(1, 301, dtype=np.float64) ** 2)), rel=1e-6)


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_histogram_counts_values_inside_the_bins_and_skips_the_rest(lowered):
    n = 10007 if not lowered else 1500
    x = RNG.integers(-5, 45, n).astype(np.int32)          # some values fall outside the 37 bins
    hist = np.zeros(37, np.int32)
    _run(K.histogram, (tile.partition(x, (512,)), hist), lowered)
    inside = x[(x >= 0) & (x < 37)]
    assert np.array_equal(hist, np.bincount(inside, minlength=37))
    assert hist.sum() < n                                  # the out-of-range values were skipped


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_weighted_histogram_adds_only_where_the_mask_holds(lowered):
    x = RNG.integers(0, 20, 777).astype(np.int32)
    w = RNG.standard_normal(777).astype(np.float32)
    hist = np.zeros(20, np.float32)
    _run(K.histogram_masked, (tile.partition(x, (128,)), tile.partition(w, (128,)), hist), lowered)
    want = np.zeros(20)
    keep = w > 0
    np.add.at(want, x[keep], w[keep].astype(np.float64))
    np.testing.assert_allclose(hist, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_column_max_takes_the_maximum_over_row_blocks_of_a_region(lowered):
    x = RNG.standard_normal((100, 300) if not lowered else (40, 70)).astype(np.float32)
    colmax = np.full((1, x.shape[1]), -np.inf, np.float32)
    _run(K.column_max, (tile.partition(x, (16, 64)), colmax), lowered)
    assert np.array_equal(colmax[0], x.astype(np.float64).max(axis=0).astype(np.float32))


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_row_min_scatters_each_rows_minimum(lowered):
    x = RNG.integers(-1000, 1000, (37, 90)).astype(np.int32)
    rowmin = np.full(37, np.iinfo(np.int32).max, np.int32)
    _run(K.row_min, (tile.partition(x, (8, 32)), rowmin), lowered)
    assert np.array_equal(rowmin, x.min(axis=1))


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_two_axis_scatter_adds_at_row_and_column_index_tiles(lowered):
    r = RNG.integers(-2, 9, 500).astype(np.int32)          # rows 7 and 8 and negatives are outside
    c = RNG.integers(0, 13, 500).astype(np.int32)          # columns 11 and 12 are outside
    v = RNG.standard_normal(500).astype(np.float32)
    grid = np.zeros((7, 11), np.float32)
    _run(K.scatter_2d, (tile.partition(r, (128,)), c, v, grid), lowered)
    want = np.zeros((7, 11))
    ok = (r >= 0) & (r < 7) & (c < 11)
    np.add.at(want, (r[ok], c[ok]), v[ok].astype(np.float64))
    np.testing.assert_allclose(grid, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("lowered", [False, True], ids=["tile_sim", "lowered"])
def test_gather_reads_at_the_index_tile_with_padding_outside_and_where_masked(lowered):
    src = RNG.standard_normal(50).astype(np.float32)
    idx = RNG.integers(-10, 60, 333).astype(np.int32)
    out = np.full(333, 123.0, np.float32)
    _run(K.gather, (idx, src, tile.partition(out, (128,))), lowered)
    ok = (idx >= 0) & (idx < 50) & (idx % 2 == 0)
    want = np.where(ok, src[np.clip(idx, 0, 49)], -1.0).astype(np.float32)
    assert np.array_equal(out, want)


def test_contract_records_the_atomic_argument_and_a_read_only_grid_partition():
    x, out = np.zeros(1000, np.float32), np.zeros(1, np.float32)
    c = json.loads(K.global_norm.compile((tile.partition(x, (256,)), out), "sm_90").contract_json)
    access = {a["name"]: a["access"] for a in c["args"]}
    assert access == {"x": "read", "out": "atomic"}
    assert c["grid_from"] == {"arg": "x", "tile": [256]}
    assert "len(out) == 1" in c["requires"]


def test_tile_ir_prints_the_atomic_update():
    x, hist = np.zeros(10, np.int32), np.zeros(4, np.int32)
    from dsl.tile.printer import format_tile_function
    text = format_tile_function(K.histogram.tile_ir(tile.partition(x, (64,)), hist))
    assert "hist: Atomic[i32, 1]" in text and "atomic_add %hist[" in text
