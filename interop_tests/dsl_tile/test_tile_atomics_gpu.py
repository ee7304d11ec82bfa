"""Tile atomics on the GPU against NumPy float64 (the twins of test_tile_atomics_numpy.py): many
blocks adding into one element, a histogram, a region max, a gather, and a violated relation
refused before anything runs. Skipped with a visible reason where there is no GPU."""
from __future__ import annotations

import numpy as np
import pytest
import tile_atomics_lib as K

import bridge
from dsl import tile

pytestmark = pytest.mark.gpu


def dev(a: np.ndarray) -> bridge.Array:
    return bridge.from_host(np.ascontiguousarray(a))


@pytest.mark.parametrize("n", [1, 1000, 4_000_037])
def test_global_norm_over_many_blocks(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    out = dev(np.zeros(1, np.float32))
    K.global_norm(tile.partition(dev(x), (1024,)), out)
    assert out.to_host()[0] == pytest.approx(float(np.sum(x.astype(np.float64) ** 2)), rel=1e-4)


def test_histogram(rng):
    x = rng.integers(-5, 300, 1_000_003).astype(np.int32)
    hist = dev(np.zeros(256, np.int32))
    K.histogram(tile.partition(dev(x), (2048,)), hist)
    inside = x[(x >= 0) & (x < 256)]
    assert np.array_equal(hist.to_host(), np.bincount(inside, minlength=256))


def test_column_max_and_row_min(rng):
    x = rng.standard_normal((1000, 777)).astype(np.float32)
    colmax = dev(np.full((1, 777), -np.inf, np.float32))
    K.column_max(tile.partition(dev(x), (32, 128)), colmax)
    assert np.array_equal(colmax.to_host()[0], x.max(axis=0))
    xi = rng.integers(-10**6, 10**6, (333, 500)).astype(np.int32)
    rowmin = dev(np.full(333, np.iinfo(np.int32).max, np.int32))
    K.row_min(tile.partition(dev(xi), (16, 128)), rowmin)
    assert np.array_equal(rowmin.to_host(), xi.min(axis=1))


def test_gather_and_two_axis_scatter(rng):
    src = rng.standard_normal(5000).astype(np.float32)
    idx = rng.integers(-100, 5100, 100_001).astype(np.int32)
    out = dev(np.full(100_001, 9.0, np.float32))
    K.gather(dev(idx), dev(src), tile.partition(out, (1024,)))
    ok = (idx >= 0) & (idx < 5000) & (idx % 2 == 0)
    assert np.array_equal(out.to_host(), np.where(ok, src[np.clip(idx, 0, 4999)], -1.0).astype(np.float32))
    r, c = rng.integers(-1, 65, 50_000).astype(np.int32), rng.integers(0, 70, 50_000).astype(np.int32)
    v = rng.standard_normal(50_000).astype(np.float32)
    grid = dev(np.zeros((64, 64), np.float32))
    K.scatter_2d(tile.partition(dev(r), (512,)), dev(c), dev(v), grid)
    want = np.zeros((64, 64))
    keep = (r >= 0) & (r < 64) & (c < 64)
    np.add.at(want, (r[keep], c[keep]), v[keep].astype(np.float64))
    np.testing.assert_allclose(grid.to_host(), want, rtol=1e-4, atol=1e-4)


def test_a_violated_relation_launches_nothing(rng):
    x = dev(rng.standard_normal(1000).astype(np.float32))
    out = dev(np.full(2, -777.0, np.float32))
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(out\) == 1"):
        K.global_norm(tile.partition(x, (256,)), out)
    assert np.all(out.to_host() == -777.0)
