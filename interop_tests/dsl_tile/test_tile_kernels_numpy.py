"""The issue's tile kernels (add, saxpy, softmax, layernorm, two-stage sum, transpose, GEMM in
f16/bf16/f32, GEMM + bias + ReLU) against float64 NumPy references, on the tile simulator and on the
GPU lowering run by the SIMT CPU simulator. Sizes are never multiples of the tiles."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile

RUNNERS = ["simulate", "simulate_lowered"]


def run(kernel, runner, *args):
    getattr(kernel, runner)(*args)


@pytest.mark.parametrize("runner", RUNNERS)
def test_add(runner, rng):
    n = 5003
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.full(n, np.nan, np.float32)
    run(K.add, runner, a, b, tile.partition(out, (1024,)))
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("runner", RUNNERS)
def test_saxpy(runner, rng):
    n = 3001
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.full(n, np.nan, np.float32)
    run(K.saxpy, runner, np.float32(1.75), x, y, tile.partition(out, (512,)))
    np.testing.assert_allclose(out, 1.75 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


def softmax_ref(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,cols,tile_rows,tile_cols", [(37, 100, 1, 128), (21, 300, 4, 512),
                                                           (5, 1000, 1, 1024)])
def test_row_softmax(runner, rows, cols, tile_rows, tile_cols, rng):
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    out = np.full_like(x, np.nan)
    run(K.softmax, runner, x, tile.partition(out, (tile_rows, tile_cols)))
    np.testing.assert_allclose(out, softmax_ref(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("runner", RUNNERS)
def test_layernorm(runner, rng):
    x = (rng.standard_normal((29, 200)) * 2 + 1).astype(np.float32)
    w, b = (rng.standard_normal(200).astype(np.float32) for _ in range(2))
    out = np.full_like(x, np.nan)
    run(K.layernorm, runner, x, w, b, np.float32(1e-5), tile.partition(out, (2, 256)))
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def two_stage_sum(runner, x, block):
    partial = np.full(-(-x.size // block), np.nan, np.float32)
    run(K.block_sum, runner, x, tile.partition(partial, (1,)), block)
    total = np.full(1, np.nan, np.float32)
    second = 1 << max(0, (partial.size - 1).bit_length())      # one tile covers every partial
    run(K.block_sum, runner, partial, tile.partition(total, (1,)), second)
    return partial, total[0]


@pytest.mark.parametrize("runner", RUNNERS)
def test_full_array_sum_two_stage(runner, rng):
    x = rng.standard_normal(100_003).astype(np.float32)
    partial, total = two_stage_sum(runner, x, 4096)
    ref = x.astype(np.float64)
    np.testing.assert_allclose(partial, [ref[i:i + 4096].sum() for i in range(0, x.size, 4096)],
                               rtol=1e-4, atol=1e-3)
    assert abs(total - ref.sum()) <= 1e-5 * np.abs(ref).sum()


@pytest.mark.parametrize("runner", RUNNERS)
def test_transpose(runner, rng):
    x = rng.standard_normal((70, 45)).astype(np.float32)
    out = np.full((45, 70), np.nan, np.float32)
    run(K.transpose, runner, x, tile.partition(out, (32, 32)))
    np.testing.assert_array_equal(out, x.T)


def tf32(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


GEMM_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32]


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", GEMM_DTYPES, ids=["f16", "bf16", "f32-tf32"])
def test_gemm(runner, dtype, rng):
    m, k, n = 70, 50, 40
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = np.full((m, n), np.nan, np.float32)
    run(K.gemm, runner, a, b, tile.partition(c, (32, 32)), 16)
    if dtype is np.float32:
        ref, tol = tf32(a) @ tf32(b), 2e-3   # full-f32 FMA path vs tf32 reference
    else:
        ref, tol = a.astype(np.float64) @ b.astype(np.float64), 1e-4
    np.testing.assert_allclose(c, ref, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
def test_gemm_bias_relu_epilogue(runner, dtype, rng):
    m, k, n = 45, 70, 50
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)
    run(K.gemm_bias_relu, runner, a, b, bias, tile.partition(c, (32, 16)), 32)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(c, ref, rtol=1e-4, atol=1e-3)
    assert (c == 0).any() and (c > 0).any()
