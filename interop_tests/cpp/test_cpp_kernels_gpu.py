"""The package's C++ kernels on the GPU, launched through bridge.cpp_kernels.load(name) with the
contracts read from the fatbin: results against NumPy float64 references (sizes never a multiple of
the block), and contract violations refused with the typed error, the output left untouched."""
from __future__ import annotations

import numpy as np
import pytest

import bridge

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def mods():
    return {name: bridge.cpp_kernels.load(name) for name in bridge.cpp_kernels.KERNELS}


def _dev(a: np.ndarray) -> bridge.Array:
    return bridge.from_host(np.ascontiguousarray(a))


def _poisoned(rng, shape) -> tuple[bridge.Array, np.ndarray]:
    poison = (rng.standard_normal(shape) * 1e6 + 12345.0).astype(np.float32)
    return _dev(poison), poison


# ---- results ----------------------------------------------------------------------------------
def test_contracts_come_from_the_fatbin(mods):
    for name, mod in mods.items():
        kernel = getattr(mod, name)
        assert kernel.contract is not None, f"{name}: no contract found in {bridge.cpp_kernels.path(name)}"
        assert kernel.contract.kernel == name


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_saxpy_matches_numpy(mods, rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(-3, 3))
    dx, dy = _dev(x), _dev(y)
    mods["saxpy"].saxpy(a, dx, dy, n)                       # grid derived from y, default block
    ref = a * x.astype(np.float64) + y.astype(np.float64)
    np.testing.assert_allclose(dy.to_host(), ref, rtol=1e-6, atol=1e-6)
    dy2 = _dev(y)
    mods["saxpy"].saxpy[((n + 999) // 1000,), 1000](a, dx, dy2, n)   # explicit, odd block size
    np.testing.assert_allclose(dy2.to_host(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows,cols", [(1000, 777), (33, 5001), (1, 1)])
def test_transpose_matches_numpy(mods, rng, rows, cols):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    out = _dev(np.full((cols, rows), np.nan, dtype=np.float32))
    mods["transpose"].transpose(_dev(a), out, rows, cols)    # grid (ceil(cols/32), ceil(rows/32))
    np.testing.assert_array_equal(out.to_host(), a.T)


@pytest.mark.parametrize("n", [1, 257, 1_000_003])
def test_block_reduce_sum_matches_numpy(mods, rng, n):
    x = rng.uniform(-1.0, 2.0, n).astype(np.float32)
    start = np.float32(rng.uniform(-10, 10))
    out = _dev(np.array([start], dtype=np.float32))
    mods["block_reduce_sum"].block_reduce_sum(_dev(x), out, n)   # accumulates into out
    ref = float(start) + np.sum(x.astype(np.float64))
    tol = 1e-5 * (np.sum(np.abs(x.astype(np.float64))) + abs(float(start)))
    assert abs(float(out.to_host()[0]) - ref) <= tol
    few = _dev(np.zeros(1, dtype=np.float32))
    mods["block_reduce_sum"].block_reduce_sum[(3,), 256](_dev(x), few, n)   # grid-stride with 3 blocks
    assert abs(float(few.to_host()[0]) - (ref - float(start))) <= tol


def _softmax64(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("rows,cols", [(300, 1000), (7, 1), (5, 4099)])
def test_legacy_softmax_matches_numpy_and_is_stable(mods, rng, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 10).astype(np.float32)
    x[::2] += np.float32(500.0)              # exp(500) overflows f32: only a max-subtracting kernel survives
    ref = _softmax64(x)
    for grid in ((rows,), (3,)):             # one block per row, and fewer blocks striding over rows
        y = _dev(np.full((rows, cols), np.nan, dtype=np.float32))
        mods["legacy_softmax"].legacy_softmax[grid, 256](_dev(x), y, rows, cols)
        got = y.to_host()
        assert np.isfinite(got).all()
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-7)


# ---- refused launches: typed error naming the argument, output untouched ----------------------
def _refused(launch, error, out: bridge.Array, poison: np.ndarray, *needles: str) -> None:
    with pytest.raises(error) as info:
        launch()
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    np.testing.assert_array_equal(out.to_host(), poison)


def test_saxpy_refuses_length_that_disagrees_with_n(mods, rng):
    n = 1001
    y, poison = _poisoned(rng, n)
    x = _dev(rng.standard_normal(n).astype(np.float32))
    _refused(lambda: mods["saxpy"].saxpy(2.0, x, y, n + 1), bridge.ShapeRelationError, y, poison,
             "saxpy", "len(x) == n")


def test_saxpy_refuses_float64_input(mods, rng):
    n = 513
    y, poison = _poisoned(rng, n)
    x = _dev(rng.standard_normal(n))                         # float64
    _refused(lambda: mods["saxpy"].saxpy(2.0, x, y, n), bridge.DTypeError, y, poison,
             "saxpy: argument 'x' (#1)", "float32")


def test_saxpy_refuses_overlapping_x_and_y(mods, rng):
    buf, poison = _poisoned(rng, 2001)
    x, y = buf[1:], buf[:-1]                                 # y is written while x is read: overlap
    _refused(lambda: mods["saxpy"].saxpy(2.0, x, y, 2000), bridge.AliasingError, buf, poison, "'y'", "'x'")


def test_saxpy_refuses_host_memory(mods, rng):
    n = 99
    y, poison = _poisoned(rng, n)
    x_host = rng.standard_normal(n).astype(np.float32)
    _refused(lambda: mods["saxpy"].saxpy(2.0, x_host, y, n), bridge.DeviceMismatchError, y, poison,
             "saxpy: argument 'x' (#1)")


def test_saxpy_refuses_missing_argument(mods, rng):
    n = 77
    y, poison = _poisoned(rng, n)
    x = _dev(rng.standard_normal(n).astype(np.float32))
    _refused(lambda: mods["saxpy"].saxpy(2.0, x, y), bridge.ArgumentCountError, y, poison, "saxpy")


def test_transpose_refuses_strided_input(mods, rng):
    rows, cols = 64, 70
    out, poison = _poisoned(rng, (cols // 2, rows))
    full = _dev(rng.standard_normal((rows, cols)).astype(np.float32))
    strided = full[:, ::2]                                   # (64, 35) view with a column stride of 2
    _refused(lambda: mods["transpose"].transpose(strided, out, rows, cols // 2), bridge.LayoutError, out,
             poison, "transpose: argument 'in' (#0)")


def test_transpose_refuses_a_block_other_than_32x8(mods, rng):
    rows, cols = 50, 40
    out, poison = _poisoned(rng, (cols, rows))
    a = _dev(rng.standard_normal((rows, cols)).astype(np.float32))
    _refused(lambda: mods["transpose"].transpose[(2, 2), (16, 16)](a, out, rows, cols), bridge.BlockSizeError,
             out, poison, "transpose")


def test_transpose_refuses_one_dimensional_input(mods, rng):
    out, poison = _poisoned(rng, (10, 1))
    a = _dev(rng.standard_normal(10).astype(np.float32))
    _refused(lambda: mods["transpose"].transpose(a, out, 1, 10), bridge.NdimError, out, poison,
             "transpose: argument 'in' (#0)")


def test_block_reduce_sum_refuses_wide_output(mods, rng):
    out, poison = _poisoned(rng, 2)
    x = _dev(rng.standard_normal(300).astype(np.float32))
    _refused(lambda: mods["block_reduce_sum"].block_reduce_sum(x, out, 300), bridge.ShapeRelationError, out,
             poison, "len(out) == 1")


def test_block_reduce_sum_refuses_block_of_128(mods, rng):
    out, poison = _poisoned(rng, 1)
    x = _dev(rng.standard_normal(300).astype(np.float32))
    _refused(lambda: mods["block_reduce_sum"].block_reduce_sum[(3,), 128](x, out, 300), bridge.BlockSizeError,
             out, poison, "block_reduce_sum")


def test_legacy_softmax_refuses_mismatched_output_shape(mods, rng):
    y, poison = _poisoned(rng, (20, 31))
    x = _dev(rng.standard_normal((20, 30)).astype(np.float32))
    _refused(lambda: mods["legacy_softmax"].legacy_softmax[(20,), 256](x, y, 20, 30), bridge.ShapeRelationError,
             y, poison, "x.shape == y.shape")


def test_legacy_softmax_needs_an_explicit_grid(mods, rng):
    y, poison = _poisoned(rng, (20, 30))
    x = _dev(rng.standard_normal((20, 30)).astype(np.float32))
    _refused(lambda: mods["legacy_softmax"].legacy_softmax(x, y, 20, 30), bridge.GridSizeError, y, poison,
             "legacy_softmax", "grid")


def test_legacy_softmax_refuses_int32_scalar_overflow(mods, rng):
    y, poison = _poisoned(rng, (4, 5))
    x = _dev(rng.standard_normal((4, 5)).astype(np.float32))
    _refused(lambda: mods["legacy_softmax"].legacy_softmax[(4,), 256](x, y, 4, 2**40), bridge.ScalarRangeError,
             y, poison, "legacy_softmax: argument 'cols' (#3)")


# ---- a freshly built module: contract-less kernels load but launch only through unsafe_launch -------
MIXED_CU = r'''#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void add_one(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
extern "C" __global__ void __launch_bounds__(128) scale2(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= 2.0f;
}
KB_CONTRACT(scale2, KB_BLOCK(128), KB_ARGS(KB_ARRAY(y, f32, 1, readwrite), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(y) == n"), KB_GRID_FROM(y));
'''


def test_kernel_without_contract_needs_unsafe_launch(nvcc, include_dir, tmp_path, rng):
    import subprocess

    (tmp_path / "mixed.cu").write_text(MIXED_CU)
    subprocess.run([nvcc, "-fatbin", "-std=c++17", f"-I{include_dir}", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=[sm_90,compute_90]", str(tmp_path / "mixed.cu"),
                    "-o", str(tmp_path / "mixed.fatbin")], check=True, capture_output=True, timeout=300)
    mod = bridge.load_module(str(tmp_path / "mixed.fatbin"))
    n = 1000
    y, poison = _poisoned(rng, n)
    _refused(lambda: mod.add_one(y, n), bridge.MissingContractError, y, poison, "add_one", "unsafe_launch")
    bridge.unsafe_launch(mod.add_one, ((n + 127) // 128,), (128,), y, np.int32(n))
    np.testing.assert_allclose(y.to_host(), poison.astype(np.float64) + 1.0, rtol=1e-6)
    mod.scale2(y, n)                                        # the other kernel has its embedded contract
    np.testing.assert_allclose(y.to_host(), (poison.astype(np.float64) + 1.0) * 2.0, rtol=1e-6)
