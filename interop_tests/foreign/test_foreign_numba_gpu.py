"""numba-cuda kernels launched through the bridge on the GPU, vs NumPy float64: a saxpy and a 2-D kernel
that reads through row views and `x.size` (so numba's byte strides and nitems must be right), with
bridge, torch and CuPy arrays, sizes a multiple of no block; wrong dtype / shape / layout / aliasing
refused before launch with the poisoned output unchanged; and a mixed pipeline of a Triton kernel, a
numba kernel, a C++ kernel (bridge.cpp_kernels) and a DSL SIMT kernel on one stream, run directly and
as a captured graph.

Run: python3 -m pytest -m gpu interop_tests/foreign/test_foreign_numba_gpu.py -q
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import bridge
from bridge.errors import AliasingError, BlockSizeError, DTypeError, ForeignKernelError, LayoutError, ShapeRelationError
from dsl import f32, simt

pytestmark = pytest.mark.gpu

N = 100_000 + 37
SAXPY_SIG = "void(float32, float32[::1], float32[::1], int64)"
SAXPY_KW = dict(access={"x": "read"}, requires=["len(x) == n", "len(y) == n"], grid_from="y", block=256)
ROWS_SIG = "void(float64[:, :], float32[::1], float32[:, ::1])"
ROWS_KW = dict(access={"x": "read", "w": "read"}, requires=["x.shape == out.shape", "len(w) == out.shape[1]"],
               grid_from="out", domain=2, block=(32, 8))


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def dsl_add(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@pytest.fixture(scope="module")
def nk():
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'kernelbridge[foreign]')")
    kernels = importlib.import_module("foreign_numba_kernels")
    if (why := kernels.compile_problem()) is not None:
        pytest.skip(why)
    return kernels


@pytest.fixture(scope="module")
def saxpy(nk):
    return bridge.foreign.numba(nk.saxpy, SAXPY_SIG, **SAXPY_KW)


def to_numpy(a) -> np.ndarray:
    if hasattr(a, "to_host"):
        return a.to_host()
    if hasattr(a, "get"):               # CuPy
        return a.get()
    return a.cpu().numpy()              # torch


def refused_untouched(launch, out, error, match=None):
    """`launch()` raises `error` (naming the user's argument) and `out` keeps its bytes."""
    bridge.synchronize()
    before = to_numpy(out).copy()
    with pytest.raises(error, match=match):
        launch()
    bridge.synchronize()
    np.testing.assert_array_equal(to_numpy(out), before)


def host(rng, n=N, dtype=np.float32):
    return (rng.standard_normal(n) * 4).astype(dtype)


def test_numba_saxpy_with_bridge_arrays(saxpy, rng):
    x_np, y_np = host(rng), host(rng)
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    saxpy(np.float32(2.5), x, y, N)
    bridge.synchronize()
    want = 2.5 * x_np.astype(np.float64) + y_np
    np.testing.assert_allclose(y.to_host(), want, rtol=1e-6, atol=1e-6)
    y2 = bridge.from_host(y_np)
    saxpy[(N + 255) // 256, 256](np.float32(2.5), x, y2, N)     # explicit grid and block
    bridge.synchronize()
    np.testing.assert_array_equal(y2.to_host(), y.to_host())
    refused_untouched(lambda: saxpy[(N + 127) // 128, 128](np.float32(2.5), x, y2, N), y2, BlockSizeError,
                      r"expected exactly \(256, 1, 1\)")    # the contract's exact block
    refused_untouched(lambda: saxpy(2.5, bridge.from_host(x_np.astype(np.float64)), y, N), y, DTypeError,
                      r"argument 'x' \(#1\)")
    refused_untouched(lambda: saxpy(2.5, x[:-1], y, N), y, ShapeRelationError, r"len\(x\) == n")
    refused_untouched(lambda: saxpy(2.5, y, y, N), y, AliasingError, r"argument 'y' \(#2\)")
    refused_untouched(lambda: saxpy(2.5, x[::2], y[: (N + 1) // 2], (N + 1) // 2), y, LayoutError,
                      r"argument 'x' \(#1\)")
    assert saxpy.name == "saxpy" and saxpy.info["entry"].startswith("_ZN")


@pytest.mark.parametrize("library", ["torch", "cupy"])
def test_numba_saxpy_with_torch_and_cupy_arrays(saxpy, rng, library):
    x_np, y_np = host(rng), host(rng)
    if library == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("torch has no CUDA device here (a CPU-only torch build)")
        x, y = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()
        wide = torch.from_numpy(x_np.astype(np.float64)).cuda()
        torch.cuda.synchronize()
    else:
        cp = pytest.importorskip("cupy")
        x, y, wide = cp.asarray(x_np), cp.asarray(y_np), cp.asarray(x_np.astype(np.float64))
        cp.cuda.Device().synchronize()
    saxpy(np.float32(-1.5), x, y, N)
    bridge.synchronize()
    np.testing.assert_allclose(to_numpy(y), -1.5 * x_np.astype(np.float64) + y_np, rtol=1e-6, atol=1e-6)
    refused_untouched(lambda: saxpy(2.0, wide, y, N), y, DTypeError)
    refused_untouched(lambda: saxpy(2.0, x[1:], y, N), y, ShapeRelationError)
    refused_untouched(lambda: saxpy(2.0, y, y, N), y, AliasingError)


@pytest.mark.parametrize("rows,cols", [(37, 1000), (129, 257)])
def test_numba_two_d_kernel_reads_through_numbas_strides_and_nitems(nk, rng, rows, cols):
    k = bridge.foreign.numba(nk.scale_rows, ROWS_SIG, **ROWS_KW)
    x_np = rng.standard_normal((rows, cols))
    w_np = host(rng, cols)
    x, w = bridge.from_host(x_np), bridge.from_host(w_np)
    out = bridge.full((rows, cols), -7.0, "float32")
    k(x, w, out)
    bridge.synchronize()
    want = x_np * w_np.astype(np.float64) + rows * cols
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-6, atol=1e-3)
    poisoned = bridge.full((rows, cols), -7.0, "float32")
    refused_untouched(lambda: k(bridge.from_host(x_np.astype(np.float32)), w, poisoned), poisoned, DTypeError,
                      r"argument 'x' \(#0\)")
    refused_untouched(lambda: k(x, w[:-1], poisoned), poisoned, ShapeRelationError)
    x_f = bridge.from_host(np.ascontiguousarray(x_np.T)).T          # the same values in Fortran order
    refused_untouched(lambda: k(x_f, w, poisoned), poisoned, LayoutError, r"argument 'x' \(#0\)")
    k_f = bridge.foreign.numba(nk.scale_rows, ROWS_SIG, **ROWS_KW, layout={"x": "F"})
    k_f(x_f, w, poisoned)
    bridge.synchronize()
    np.testing.assert_allclose(poisoned.to_host(), want, rtol=1e-6, atol=1e-3)


def test_a_numba_kernel_with_grid_sync_is_refused_when_wrapped(nk):
    with pytest.raises(ForeignKernelError, match="grid_synced: the kernel calls"):
        bridge.foreign.numba(nk.grid_synced, "void(float32[::1])", grid_from="out")


@pytest.fixture(scope="module")
def pipeline(nk):
    """(Triton add, numba mul_sub, C++ saxpy, DSL add)."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
    from bridge import cpp_kernels
    if "saxpy" not in cpp_kernels.available():
        pytest.skip(f"the package's C++ kernels are not built: {cpp_kernels.status()}")
    tk = importlib.import_module("foreign_triton_kernels")
    add = bridge.foreign.triton(tk.add, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                                grid=("out", "BLOCK"))
    mul_sub = bridge.foreign.numba(nk.mul_sub, "void(float32[::1], float32[::1], float32[::1], float32, int32)",
                                   access={"u": "read", "v": "read"}, grid_from="out", block=256,
                                   requires=["len(u) == n", "len(v) == n", "len(out) == n"])
    return add, mul_sub, cpp_kernels.load("saxpy").saxpy, dsl_add


def _run(pipeline, x, y, t1, t2, out):
    """t1 = x + y (Triton); t2 = t1 * x - 0.75 (numba); t2 = 2 y + t2 (C++); out = t2 + x (DSL)."""
    add, mul_sub, cpp_saxpy, add_simt = pipeline
    add(x, y, t1, N)
    mul_sub(t1, x, t2, np.float32(0.75), N)
    cpp_saxpy(np.float32(2.0), y, t2, N)
    add_simt(t2, x, out)


def test_mixed_pipeline_triton_numba_cpp_dsl_on_one_stream_and_as_a_graph(pipeline, rng):
    x_np, y_np = host(rng), host(rng)
    x64, y64 = x_np.astype(np.float64), y_np.astype(np.float64)
    want = ((x64 + y64) * x64 - 0.75) + 2.0 * y64 + x64
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    t1, t2 = bridge.empty((N,), "float32"), bridge.empty((N,), "float32")
    out = bridge.full((N,), -7.0, "float32")
    s = bridge.Stream()
    with bridge.use_stream(s):
        _run(pipeline, x, y, t1, t2, out)
    s.synchronize()
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-4)
    out2 = bridge.full((N,), -7.0, "float32")
    with bridge.capture(s) as g:
        _run(pipeline, x, y, t1, t2, out2)
    np.testing.assert_array_equal(out2.to_host(), np.full(N, -7.0, np.float32))     # captured, not run
    for _ in range(2):
        g.replay(s)
        s.synchronize()
        np.testing.assert_allclose(out2.to_host(), want, rtol=1e-5, atol=1e-4)


def test_each_stage_of_the_pipeline_refuses_a_wrong_argument_before_launch(pipeline, rng):
    add, mul_sub, cpp_saxpy, add_simt = pipeline
    x = bridge.from_host(host(rng))
    wide = bridge.from_host(host(rng).astype(np.float64))
    out = bridge.full((N,), -7.0, "float32")
    refused_untouched(lambda: add(x, wide, out, N), out, DTypeError)
    refused_untouched(lambda: mul_sub(x, wide, out, np.float32(1.0), N), out, DTypeError, r"argument 'v' \(#1\)")
    refused_untouched(lambda: mul_sub(x, x[:-1], out, np.float32(1.0), N), out, ShapeRelationError)
    refused_untouched(lambda: mul_sub(out, x, out, np.float32(1.0), N), out, AliasingError)
    refused_untouched(lambda: cpp_saxpy(np.float32(2.0), wide, out, N), out, DTypeError)
    refused_untouched(lambda: add_simt(x, wide, out), out, DTypeError)
