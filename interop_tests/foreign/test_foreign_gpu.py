"""Foreign kernels launched through the bridge on the GPU, vs NumPy float64: a C++ saxpy cubin declared
from Python, Triton add and softmax kernels, a CuPy RawKernel's source; each refused before launch,
output untouched, for a wrong dtype, a wrong length and an aliased output; and a mixed pipeline
(Triton -> C++ -> CuPy source) on one stream, run directly and as a captured graph.

Run: python3 -m pytest -m gpu interop_tests/foreign -q
"""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge.errors import AliasingError, DTypeError, NdimError, ShapeRelationError
from bridge.foreign.compile_cuda import compile_cuda, nvrtc_problem
from bridge.foreign.wrap import device_arch

pytestmark = pytest.mark.gpu

N = 100_000 + 37                       # a multiple of no block or tile size used
SAXPY = "void saxpy(float a, const float* x, float* y, int n)"
SAXPY_KW = dict(requires=["len(x) == n", "len(y) == n"], access={"y": "readwrite"}, grid_from="y", block=256)
SAXPY_CU = r"""
extern "C" __global__ void saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
SCALE_CU = r"""
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * x[i];
}
"""


class RawKernelStandIn:
    """What bridge.foreign.cupy reads of a cupy.RawKernel."""

    def __init__(self, code: str, name: str) -> None:
        self.code, self.name, self.options, self.backend = code, name, (), "nvrtc"


def _need_a_cuda_compiler() -> None:
    from bridge.toolkit import locate
    if nvrtc_problem() and locate("nvcc").path is None:
        pytest.skip(f"no CUDA compiler here: NVRTC ({nvrtc_problem()}) and nvcc (not found)")


@pytest.fixture(scope="module")
def saxpy():
    """The C++ saxpy: the package's nvcc-built fatbin when installed, else compiled now; contract declared."""
    from bridge import cpp_kernels
    if "saxpy" in cpp_kernels.available():
        image = cpp_kernels.path("saxpy").read_bytes()
    else:
        _need_a_cuda_compiler()
        image = compile_cuda(SAXPY_CU, arch=device_arch())[0]
    return bridge.foreign.kernel(image, contract=SAXPY, **SAXPY_KW)


@pytest.fixture(scope="module")
def scale():
    _need_a_cuda_compiler()
    return bridge.foreign.cupy(RawKernelStandIn(SCALE_CU, "scale"), requires=["len(x) == n", "len(y) == n"],
                               grid_from="y")


@pytest.fixture(scope="module")
def tk():
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
    import foreign_triton_kernels
    return foreign_triton_kernels


@pytest.fixture(scope="module")
def add(tk):
    return bridge.foreign.triton(tk.add, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                 access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                                 grid=("out", "BLOCK"))


def host(rng, n=N):
    return (rng.standard_normal(n) * 4).astype(np.float32)


def refused_untouched(launch, out, error):
    """`launch()` raises `error` and `out` (a bridge array) keeps its bytes."""
    before = out.to_host().copy()
    with pytest.raises(error):
        launch()
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), before)


def test_cpp_saxpy_declared_from_python(saxpy, rng):
    x_np, y_np = host(rng), host(rng)
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    saxpy(np.float32(2.5), x, y, N)
    bridge.synchronize()
    np.testing.assert_allclose(y.to_host(), 2.5 * x_np.astype(np.float64) + y_np, rtol=1e-6, atol=1e-6)
    refused_untouched(lambda: saxpy(2.5, bridge.from_host(x_np.astype(np.float64)), y, N), y, DTypeError)
    refused_untouched(lambda: saxpy(2.5, x[:-1], y, N), y, ShapeRelationError)
    refused_untouched(lambda: saxpy(2.5, y, y, N), y, AliasingError)


def test_triton_add(add, rng):
    x_np, y_np = host(rng), host(rng)
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    out = bridge.full((N,), -7.0, "float32")
    add(x, y, out, N)                                            # grid from the contract: one program per 1024
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), x_np.astype(np.float64) + y_np, rtol=1e-6)
    out2 = bridge.full((N,), -7.0, "float32")
    add[(N + 1023) // 1024, 128](x, y, out2, N)                  # explicit grid and block
    bridge.synchronize()
    np.testing.assert_array_equal(out2.to_host(), out.to_host())
    half = bridge.full((N,), -7.0, "float16")
    refused_untouched(lambda: add(x, y, half, N), half, DTypeError)
    refused_untouched(lambda: add(x, y, out, N - 1), out, ShapeRelationError)
    refused_untouched(lambda: add(out, y, out, N), out, AliasingError)
    assert isinstance(add, bridge.Kernel) and add.launcher.kernel_name == "add"     # scratch pointers dropped


def test_triton_add_with_its_scratch_parameters_passed(tk, rng):
    """drop_unused=False keeps Triton's cubin as compiled: a ForeignKernel passes the null scratch pointers."""
    from bridge.foreign.launch import ForeignKernel
    add = bridge.foreign.triton(tk.add, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                                grid=("out", "BLOCK"), drop_unused=False)
    assert isinstance(add, ForeignKernel) and len(add.hidden) >= 1
    x_np, y_np = host(rng), host(rng)
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    out = bridge.full((N,), -7.0, "float32")
    add(x, y, out, N)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), x_np.astype(np.float64) + y_np, rtol=1e-6)
    refused_untouched(lambda: add(out, y, out, N), out, AliasingError)


@pytest.mark.parametrize("num_warps", [4, 8])
@pytest.mark.parametrize("rows,cols", [(37, 1000), (129, 257)])
def test_triton_softmax(tk, rng, num_warps, rows, cols):
    k = bridge.foreign.triton(tk.softmax, {"x": "*fp32", "out": "*fp32", "n_rows": "i32", "n_cols": "i32"},
                              constexprs={"BLOCK": 1024}, num_warps=num_warps, ndim={"x": 2, "out": 2},
                              access={"x": "read"}, grid=("x", (1,)),
                              requires=["x.shape == out.shape", "x.shape[0] == n_rows", "x.shape[1] == n_cols",
                                        "n_cols <= BLOCK"])
    x_np = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    x, out = bridge.from_host(x_np), bridge.full((rows, cols), -7.0, "float32")
    k(x, out, rows, cols)
    bridge.synchronize()
    e = np.exp(x_np.astype(np.float64) - x_np.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out.to_host(), e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    wide, wide_out = bridge.zeros((rows, 2000), "float32"), bridge.full((rows, 2000), -7.0, "float32")
    refused_untouched(lambda: k(wide, wide_out, rows, 2000), wide_out, ShapeRelationError)   # n_cols > BLOCK
    refused_untouched(lambda: k(x.reshape(rows * cols), out, rows, cols), out, NdimError)
    f64 = bridge.full((rows, cols), -7.0, "float64")
    refused_untouched(lambda: k(x, f64, rows, cols), f64, DTypeError)


def test_cupy_raw_kernel_source_launched_through_the_bridge(scale, rng):
    x_np = host(rng)
    x, y = bridge.from_host(x_np), bridge.full((N,), -7.0, "float32")
    scale(x, y, np.float32(-1.5), N)
    bridge.synchronize()
    np.testing.assert_allclose(y.to_host(), -1.5 * x_np.astype(np.float64), rtol=1e-6)
    refused_untouched(lambda: scale(x, y, 1.0, N + 1), y, ShapeRelationError)
    refused_untouched(lambda: scale(y, y, 1.0, N), y, AliasingError)
    refused_untouched(lambda: scale(bridge.zeros((N,), "int32"), y, 1.0, N), y, DTypeError)


def test_a_real_cupy_raw_kernel_with_cupy_arrays(rng):
    cp = pytest.importorskip("cupy")
    _need_a_cuda_compiler()
    raw = cp.RawKernel(SCALE_CU, "scale")
    k = bridge.foreign.cupy(raw, requires=["len(x) == n", "len(y) == n"], grid_from="y")
    x_np = host(rng)
    x, y = cp.asarray(x_np), cp.full(N, -7.0, cp.float32)
    k(x, y, np.float32(3.0), N)
    bridge.synchronize()
    np.testing.assert_allclose(cp.asnumpy(y), 3.0 * x_np.astype(np.float64), rtol=1e-6)
    with pytest.raises(DTypeError):
        k(x.astype(cp.float64), y, np.float32(3.0), N)


def _pipeline(add, saxpy, scale, x, y, tmp, out):
    """tmp = x + y (Triton); tmp = 2 * x + tmp (C++); out = -0.5 * tmp (CuPy source)."""
    add(x, y, tmp, N)
    saxpy(np.float32(2.0), x, tmp, N)
    scale(tmp, out, np.float32(-0.5), N)


def test_mixed_pipeline_on_one_stream_and_as_a_graph(add, saxpy, scale, rng):
    x_np, y_np = host(rng), host(rng)
    want = -0.5 * (2.0 * x_np.astype(np.float64) + (x_np.astype(np.float64) + y_np))
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    tmp, out = bridge.empty((N,), "float32"), bridge.full((N,), -7.0, "float32")
    s = bridge.Stream()
    with bridge.use_stream(s):
        _pipeline(add, saxpy, scale, x, y, tmp, out)
    s.synchronize()
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-5)
    out2 = bridge.full((N,), -7.0, "float32")
    with bridge.capture(s) as g:
        _pipeline(add, saxpy, scale, x, y, tmp, out2)
    np.testing.assert_array_equal(out2.to_host(), np.full(N, -7.0, np.float32))     # captured, not run
    for _ in range(2):
        g.replay(s)
        s.synchronize()
        np.testing.assert_allclose(out2.to_host(), want, rtol=1e-5, atol=1e-5)
