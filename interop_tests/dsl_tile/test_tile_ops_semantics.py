"""Tile ops against NumPy, run twice: by the tile simulator (NumPy per tile block) and by the GPU
lowering (SIMT IR) on the SIMT CPU simulator, so the thread mapping, shared-memory staging and warp
reductions of the lowering are checked without a GPU."""
from __future__ import annotations

import math

import numpy as np
import pytest

from dsl import tile
from dsl.types import f16, f32, i32

RUNNERS = ["simulate", "simulate_lowered"]


def _run(kernel, runner, *args, **kw):
    getattr(kernel, runner)(*args, **kw)


@tile.kernel
def ew(x: tile.Array[f32, 2], y: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    a = tile.load(x, (tile.bid(0), tile.bid(1)), out.tile_shape)
    b = tile.load(y, (tile.bid(0), tile.bid(1)), out.tile_shape)
    r = tile.where(a > b, a * 2.0 - b, tile.exp(b) / (1.0 + abs(a)))
    r = r + tile.maximum(a, 0.5) - tile.minimum(b, -0.25) + tile.sqrt(abs(b)) * tile.tanh(a)
    out.store(r)


@pytest.mark.parametrize("runner", RUNNERS)
def test_elementwise_where_math_match_numpy_with_ragged_edges(runner, rng):
    x = rng.standard_normal((45, 70)).astype(np.float32)
    y = rng.standard_normal((45, 70)).astype(np.float32)
    out = np.full((45, 70), np.nan, np.float32)
    _run(ew, runner, x, y, tile.partition(out, (16, 32)))
    r = np.where(x > y, x * 2 - y, np.exp(y) / (1 + np.abs(x)))
    r = r + np.maximum(x, 0.5) - np.minimum(y, -0.25) + np.sqrt(np.abs(y)) * np.tanh(x)
    np.testing.assert_allclose(out, r, rtol=2e-6, atol=2e-6)


@tile.kernel
def bcast(x: tile.Array[f32, 2], col: tile.Array[f32, 1], row: tile.Array[f32, 1],
          out: tile.Partition[f32, 2]):
    bm, bn = out.tile_shape
    a = tile.load(x, (tile.bid(0), tile.bid(1)), (bm, bn))
    c = tile.load(col, tile.bid(0), (bm,))
    r = tile.load(row, tile.bid(1), (bn,))
    out.store(a * c[:, None] + r[None, :] - tile.sum(a, axis=1, keepdims=True))


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("tshape", [(8, 64), (32, 16), (2, 256)])
def test_broadcasting_of_rows_columns_and_reductions(runner, tshape, rng):
    m, n = 37, 83
    x = rng.standard_normal((m, n)).astype(np.float32)
    col = rng.standard_normal(m).astype(np.float32)
    row = rng.standard_normal(n).astype(np.float32)
    out = np.zeros((m, n), np.float32)
    _run(bcast, runner, x, col, row, tile.partition(out, tshape))
    # the row sum covers only this tile's columns (padding 0 outside the array)
    bn = tshape[1]
    sums = np.zeros_like(x)
    for j0 in range(0, n, bn):
        sums[:, j0:j0 + bn] = x[:, j0:j0 + bn].sum(1, keepdims=True)
    np.testing.assert_allclose(out, x * col[:, None] + row[None, :] - sums, rtol=1e-5, atol=1e-5)


@tile.kernel
def col_reduce(x: tile.Array[f32, 2], out: tile.Partition[f32, 1]):
    bm = 64
    (bn,) = out.tile_shape
    v = tile.load(x, (0, tile.bid(0)), (bm, bn), padding=-1e30)
    out.store(tile.max(v, axis=0) + tile.argmax(v, axis=0).astype(f32) * 1000.0)


@pytest.mark.parametrize("runner", RUNNERS)
def test_column_reduction_with_argmax_through_shared_memory(runner, rng):
    x = rng.standard_normal((50, 100)).astype(np.float32)
    out = np.zeros(100, np.float32)
    _run(col_reduce, runner, x, tile.partition(out, (32,)))
    np.testing.assert_allclose(out, x.max(0) + x.argmax(0) * 1000.0, rtol=1e-6)


@tile.kernel
def row_stats(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    bm, bn = out.tile_shape
    v = tile.load(x, (tile.bid(0), 0), (bm, 128), padding=-math.inf)
    z = tile.where(v > -math.inf, v, 0.0)
    s = tile.sum(z, axis=1, keepdims=True)
    mx = tile.max(v, axis=1, keepdims=True)
    am = tile.argmax(v, axis=1, keepdims=True).astype(f32)
    mn = tile.min(tile.where(v > -math.inf, v, math.inf), axis=1, keepdims=True)
    an = tile.argmin(tile.where(v > -math.inf, v, math.inf), axis=1, keepdims=True).astype(f32)
    k = tile.arange(bn)[None, :]
    r = tile.where(k == 0, s, tile.where(k == 1, mx, tile.where(k == 2, am, tile.where(k == 3, mn, an))))
    out.store(r)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("bm", [1, 4, 16])
def test_row_sum_max_min_argmax_argmin(runner, bm, rng):
    x = rng.standard_normal((23, 100)).astype(np.float32)
    x[3, 7] = x[3, 60] = 50.0      # ties: the first index wins
    out = np.zeros((23, 5), np.float32)
    _run(row_stats, runner, x, tile.partition(out, (bm, 8)))
    ref = np.stack([x.sum(1), x.max(1), x.argmax(1), x.min(1), x.argmin(1)], 1)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@tile.kernel
def full_sum(x: tile.Array[f32, 2], out: tile.Partition[f32, 1]):
    v = tile.load(x, (tile.bid(0), 0), (8, 64))
    out.store(tile.sum(v) + tile.max(v) * 0.0 + tile.argmin(v).astype(f32) * 0.0)


@pytest.mark.parametrize("runner", RUNNERS)
def test_full_reduction_to_a_scalar_stored_into_a_unit_tile(runner, rng):
    x = rng.standard_normal((20, 50)).astype(np.float32)
    out = np.zeros(3, np.float32)
    _run(full_sum, runner, x, tile.partition(out, (1,)))
    ref = [x[i * 8:(i + 1) * 8].sum() for i in range(3)]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@tile.kernel
def int_ops(x: tile.Array[i32, 1], y: tile.Array[i32, 1], out: tile.Partition[i32, 1]):
    a = tile.load(x, tile.bid(0), out.tile_shape)
    b = tile.load(y, tile.bid(0), out.tile_shape, padding=1)
    out.store((a // b) * 3 + a % b - (a & 7) + (a ^ b) + (a >> 2) + tile.where(a < b, -a, a * 2))


@pytest.mark.parametrize("runner", RUNNERS)
def test_integer_floor_division_and_bit_ops_follow_numpy(runner, rng):
    n = 1000
    x = rng.integers(-10000, 10000, n).astype(np.int32)
    y = rng.integers(1, 60, n).astype(np.int32) * rng.choice([-1, 1], n).astype(np.int32)
    out = np.zeros(n, np.int32)
    _run(int_ops, runner, x, y, tile.partition(out, (256,)))
    ref = (x // y) * 3 + x % y - (x & 7) + (x ^ y) + (x >> 2) + np.where(x < y, -x, x * 2)
    np.testing.assert_array_equal(out, ref)


@tile.kernel
def casts(x: tile.Array[f32, 1], out: tile.Partition[f16, 1]):
    a = tile.load(x, tile.bid(0), out.tile_shape)
    i = a.astype(i32)
    h = a.astype(f16)
    out.store(h * 2.0 + i.astype(f16) - tile.floor(a).astype(f16))


@pytest.mark.parametrize("runner", RUNNERS)
def test_casts_and_half_arithmetic(runner, rng):
    x = (rng.standard_normal(300) * 40).astype(np.float32)
    out = np.zeros(300, np.float16)
    _run(casts, runner, x, tile.partition(out, (128,)))
    h = x.astype(np.float16)
    ref = (h.astype(np.float32) * 2).astype(np.float16)
    ref = (ref.astype(np.float32) + np.trunc(x).astype(np.float16).astype(np.float32)).astype(np.float16)
    ref = (ref.astype(np.float32) - np.floor(x).astype(np.float16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(out, ref)


@tile.kernel
def shapes(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), tile.bid(1)), (16, 8))
    w = v.reshape((8, 16)).T.reshape((16, 8))
    p = tile.permute(v.reshape((2, 8, 8)), (1, 0, 2)).reshape((16, 8))
    out.store(w + p * 100.0)


@pytest.mark.parametrize("runner", RUNNERS)
def test_reshape_transpose_permute(runner, rng):
    x = rng.standard_normal((40, 24)).astype(np.float32)
    out = np.zeros((40, 24), np.float32)
    _run(shapes, runner, x, tile.partition(out, (16, 8)))
    xp = np.zeros((48, 24), np.float32)
    xp[:40] = x
    ref = np.zeros_like(xp)
    for i in range(3):
        for j in range(3):
            v = xp[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8]
            w = v.reshape(8, 16).T.reshape(16, 8)
            p = v.reshape(2, 8, 8).transpose(1, 0, 2).reshape(16, 8)
            ref[i * 16:(i + 1) * 16, j * 8:(j + 1) * 8] = w + p * 100
    np.testing.assert_allclose(out, ref[:40], rtol=1e-6)


@tile.kernel
def loop_scalar(x: tile.Array[f32, 1], n_chunks: i32, out: tile.Partition[f32, 1]):
    (bs,) = out.tile_shape
    acc = tile.zeros((bs,), f32)
    for k in range(n_chunks):
        v = tile.load(x, tile.bid(0) * n_chunks + k, (bs,))
        if k % 2 == 0:
            acc = acc + v
        else:
            acc = acc - v
    out.store(acc)


@pytest.mark.parametrize("runner", RUNNERS)
def test_loops_and_uniform_if_with_loop_carried_tiles(runner, rng):
    x = rng.standard_normal(64 * 6 - 5).astype(np.float32)
    out = np.zeros(64 * 2, np.float32)
    _run(loop_scalar, runner, x, np.int32(3), tile.partition(out, (64,)))
    xp = np.concatenate([x, np.zeros(5, np.float32)]).reshape(6, 64)
    ref = np.concatenate([xp[0] - xp[1] + xp[2], xp[3] - xp[4] + xp[5]])
    np.testing.assert_allclose(out, ref, rtol=1e-6)
