"""GPU twins of test_tile_vector_runs.py: distributed tiles loaded and stored a 16-byte run at a time
(ld/st.global.v4) on the device, against float64 NumPy: reductions along both axes, f16/f32 mixed
through astype, 1-D arrays of every element size and of lengths that split a run, chunked stores and
tutorial 05's whole-row layer norm in f16. Outputs start poisoned.

    python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_vector_runs_gpu.py
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import test_tile_vector_runs as V

import bridge
from dsl import tile

pytestmark = pytest.mark.gpu


def dev(a: np.ndarray) -> bridge.Array:
    return bridge.from_host(np.ascontiguousarray(a))


def poison(shape, dtype) -> bridge.Array:
    kind = np.dtype(dtype).kind
    return dev(np.full(shape, np.iinfo(dtype).min if kind in "iu" else np.nan, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("tile_shape,warps", [((64, 64), 4), ((4, 256), 4), ((256, 4), 4), ((2, 512), 4),
                                              ((1, 1024), 2), ((8, 8), 2), ((8, 128), 8)])
def test_reductions_along_both_axes_on_the_gpu(dtype, tile_shape, warps, rng):
    bm, bn = tile_shape
    x = rng.standard_normal((bm * 2 + 3, bn * 2 + 8)).astype(dtype)
    out = poison(x.shape, np.float32)
    V._warps(V.stats, warps)(dev(x), tile.partition(out, tile_shape))
    np.testing.assert_allclose(out.to_host(), V._stats_ref(x, bm, bn), rtol=2e-5, atol=2e-3)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (np.float32, 1e-6)])
@pytest.mark.parametrize("shape", [(37, 296), (37, 300), (1000, 1024)])
def test_f16_and_f32_mixed_through_astype_on_the_gpu(dtype, tol, shape, rng):
    x = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(np.float32)
    out = poison(shape, dtype)
    V._warps(V.mixed, 4)(dev(x), dev(y), tile.partition(out, (4, 128)))
    ref = (2.0 * x.astype(np.float64) - y).astype(dtype)
    np.testing.assert_allclose(out.to_host().astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("n", [5000, 5003, 1 << 20])
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.int32, np.float64, np.int8])
def test_one_d_arrays_of_any_length_on_the_gpu(n, dtype, rng):
    x, y = ((rng.standard_normal(n) * 20).astype(dtype) for _ in range(2))
    out = poison(n, dtype)
    V._warps(V.add1d, 2)(dev(x), dev(y), tile.partition(out, (1024,)))
    np.testing.assert_array_equal(out.to_host(), x + y)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n,block", [(1000, 256), (300, 128), (4096, 1024)])
def test_chunked_stores_in_runs_on_the_gpu(dtype, n, block, rng):
    x = rng.standard_normal((5, n)).astype(dtype)
    out = poison(x.shape, dtype)
    V._warps(V.row_chunks, 2)(dev(x), tile.partition(out, (1, 1 << (n - 1).bit_length())), block)
    ref = (x.astype(np.float64) - x.max(1, keepdims=True)).astype(dtype)
    np.testing.assert_allclose(out.to_host().astype(np.float64), ref.astype(np.float64), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [1024, 1000, 777, 4096])
def test_layer_norm_row_f16_on_the_gpu(n):
    (x, w, b, y, mean, rstd), _ = V._layer_norm_args(64, n, np.float16)
    dy, dmean, drstd = dev(y), dev(mean), dev(rstd)
    width = V.LN.next_power_of_2(n)
    V.LN.row_kernel(max(1, width // 512))(dev(x), tile.partition(dy, (1, width)), dev(w), dev(b),
                                          tile.partition(dmean, (1,)), tile.partition(drstd, (1,)), np.float32(1e-5))
    for got, want in zip((dy.to_host(), dmean.to_host(), drstd.to_host()), V.LN.reference(x, w, b)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=4e-3, atol=4e-3)
