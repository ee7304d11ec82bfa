"""Generated ElementwiseKernels on the GPU, vs NumPy float64: 1-D and 2-D arrays of sizes a multiple of no
block, a raw array indexed through CuPy's CArray surface, float16 and float64, bridge and CuPy arrays; a
shape that would need broadcasting, a strided view and an aliased output refused before launch with the
output unchanged. A real cupy.ElementwiseKernel where CuPy is installed (skips with the reason otherwise).

Run: python3 -m pytest -m gpu interop_tests/foreign/test_foreign_elementwise_gpu.py -q -n 0
"""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge.errors import AliasingError, DTypeError, LayoutError, ShapeRelationError

pytestmark = pytest.mark.gpu
spec = bridge.foreign.elementwise_spec

SCALE_ADD = spec("T x, raw T table, float32 s", "T y", "y = (T)(s * (float)x) + table[i % table.size()]", "scale_add")
ROWS = spec("T x, raw T w", "T out", "const long long col = i % w.size(); out = x * w[col] + (T)_ind.size()", "rows")


def refused_untouched(launch, out, error):
    before = out.to_host().copy()
    with pytest.raises(error):
        launch()
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_a_raw_table_and_a_scalar(rng, dtype):
    n, m = 100_003, 37
    x_np = rng.standard_normal(n).astype(dtype)
    t_np = rng.standard_normal(m).astype(dtype)
    x, table = bridge.from_host(x_np), bridge.from_host(t_np)
    y = bridge.full((n,), -7.0, np.dtype(dtype).name)
    k = bridge.foreign.elementwise(SCALE_ADD, x_np, t_np, np.float32(0), x_np)
    k(x, table, 1.5, y)
    bridge.synchronize()
    want = (1.5 * x_np.astype(np.float32)).astype(dtype).astype(np.float64) + t_np[np.arange(n) % m]
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(y.to_host().astype(np.float64), want, rtol=tol, atol=tol)
    refused_untouched(lambda: k(x[:-1], table, 1.5, y), y, ShapeRelationError)     # no broadcasting
    refused_untouched(lambda: k(y, table, 1.5, y), y, AliasingError)
    other = np.float64 if dtype != np.float64 else np.float32
    refused_untouched(lambda: k(bridge.from_host(x_np.astype(other)), table, 1.5, y), y, DTypeError)


def test_two_d_arrays_loop_over_every_element(rng):
    rows, cols = 513, 77
    x_np = rng.standard_normal((rows, cols)).astype(np.float32)
    w_np = rng.standard_normal(cols).astype(np.float32)
    k = bridge.foreign.elementwise(ROWS, x_np, w_np, x_np)
    x, w = bridge.from_host(x_np), bridge.from_host(w_np)
    out = bridge.full((rows, cols), -7.0, "float32")
    k(x, w, out)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), x_np.astype(np.float64) * w_np + rows * cols, rtol=1e-6)
    strided = bridge.from_host(np.ascontiguousarray(x_np.T)).T            # the same values, Fortran order
    refused_untouched(lambda: k(strided, w, out), out, LayoutError)


def test_a_real_cupy_elementwise_kernel_with_cupy_arrays(rng):
    cp = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda12x / cupy-cuda13x)")
    ek = cp.ElementwiseKernel("T x, T y", "T z", "z = x * y - (T)_ind.size()", "mul_minus_n")
    n = 100_003
    x_np, y_np = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    x, y, z = cp.asarray(x_np), cp.asarray(y_np), cp.full(n, -7.0, cp.float32)
    k = bridge.foreign.cupy(ek, examples=(x_np, y_np, x_np))
    k(x, y, z)
    bridge.synchronize()
    np.testing.assert_allclose(cp.asnumpy(z), x_np.astype(np.float64) * y_np - n, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(cp.asnumpy(z), cp.asnumpy(ek(x, y)), rtol=1e-6)      # CuPy's own launch agrees
