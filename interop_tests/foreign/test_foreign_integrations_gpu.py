"""Foreign kernels as framework ops on the GPU, vs NumPy float64: a generated CuPy ElementwiseKernel, a
Triton kernel (scratch pointers dropped, and kept: null pointers filled) and a numba-cuda kernel (its
per-array fields filled) through dsl.torch.custom_op (torch's stream, torch.compile(fullgraph=True), a
torch CUDA graph) and dsl.jax.kernel_call (jax.jit through the XLA FFI handler); a wrong dtype refused
with the validator's typed error. The Triton and numba parts skip with their reason when absent.

Run: python3 -m pytest -m gpu interop_tests/foreign/test_foreign_integrations_gpu.py -q -n 0
"""
from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest

import bridge
import dsl
from bridge.errors import DTypeError, ShapeRelationError

pytestmark = pytest.mark.gpu
N = 100_000 + 37
MUL1 = bridge.foreign.elementwise_spec("T x, T y", "T out", "out = x * y + (T)1", "mul1")
_ids = itertools.count()


def op_name(base: str) -> str:
    return f"kb_foreign_gpu::{base}_{next(_ids)}"


@pytest.fixture(scope="module")
def mul1():
    return bridge.foreign.elementwise(MUL1, types={"T": "float32"}, ndim=1)


@pytest.fixture(scope="module")
def tk():
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
    return importlib.import_module("foreign_triton_kernels")


def triton_add(tk, **kw):
    return bridge.foreign.triton(tk.add, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                 access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                                 grid=("out", "BLOCK"), **kw)


@pytest.fixture(scope="module")
def nk():
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'kernelbridge[foreign]')")
    kernels = importlib.import_module("foreign_numba_kernels")
    if (why := kernels.compile_problem()) is not None:
        pytest.skip(why)
    return kernels


@pytest.fixture(scope="module")
def numba_saxpy(nk):
    return bridge.foreign.numba(nk.saxpy, "void(float32, float32[::1], float32[::1], int64)", access={"x": "read"},
                                requires=["len(x) == n", "len(y) == n"], grid_from="y", block=256)


def host(rng, n=N):
    return (rng.standard_normal(n) * 4).astype(np.float32)


# ---------------------------------------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    assert torch.cuda.is_available(), "PyTorch sees no CUDA device on the GPU machine"
    return torch


def test_a_generated_elementwise_kernel_as_a_torch_op(torch, mul1, rng):
    op = dsl.torch.custom_op(op_name("mul1"), mul1)
    x_np, y_np = host(rng), host(rng)
    want = x_np.astype(np.float64) * y_np + 1
    x, y = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()
    np.testing.assert_allclose(op(x, y).cpu().numpy(), want, rtol=1e-6, atol=1e-6)
    twice = torch.compile(lambda a, b: op(a, b) * 2, fullgraph=True)
    np.testing.assert_allclose(twice(x, y).cpu().numpy(), 2 * want, rtol=1e-6, atol=1e-5)
    with pytest.raises(DTypeError, match=r"mul1: argument 'y' \(#1\)"):
        op(x, y.double())
    out = torch.empty_like(x)
    g = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        op(x, y)                                         # warm (allocations) outside the capture
        with torch.cuda.graph(g, stream=stream):
            out.copy_(op(x, y))
    torch.cuda.current_stream().wait_stream(stream)
    x.mul_(-1)
    g.replay()
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), -want + 2, rtol=1e-6, atol=1e-5)   # (-x) * y + 1


@pytest.mark.parametrize("drop_unused", [True, False])
def test_a_triton_kernel_as_a_torch_op(torch, tk, rng, drop_unused):
    op = dsl.torch.custom_op(op_name("tadd"), triton_add(tk, drop_unused=drop_unused))
    x_np, y_np = host(rng), host(rng)
    x, y = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()
    np.testing.assert_allclose(op(x, y, N).cpu().numpy(), x_np.astype(np.float64) + y_np, rtol=1e-6)
    with pytest.raises(ShapeRelationError):
        op(x[:-1], y, N)


def test_a_numba_kernel_as_an_in_place_torch_op(torch, numba_saxpy, rng):
    op = dsl.torch.custom_op(op_name("saxpy"), numba_saxpy, mutates=("y",))
    x_np, y_np = host(rng), host(rng)
    x, y = torch.from_numpy(x_np).cuda(), torch.from_numpy(y_np).cuda()
    op(2.5, x, y, N)
    np.testing.assert_allclose(y.cpu().numpy(), 2.5 * x_np.astype(np.float64) + y_np, rtol=1e-6, atol=1e-5)


# ------------------------------------------------------------------------------------------------ JAX

@pytest.fixture(scope="module")
def jax():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    assert jax.default_backend() == "gpu", f"JAX runs on {jax.default_backend()!r}, not the GPU (CUDA plugin?)"
    assert dsl.jax.ffi_available(), "the JAX FFI handler was not built on the GPU machine"
    return jax


def test_a_generated_elementwise_kernel_under_jax_jit(jax, mul1, rng):
    x_np, y_np = host(rng), host(rng)
    f = jax.jit(dsl.jax.kernel_call(mul1))
    got = np.asarray(f(jax.numpy.asarray(x_np), jax.numpy.asarray(y_np)))
    np.testing.assert_allclose(got, x_np.astype(np.float64) * y_np + 1, rtol=1e-6, atol=1e-6)
    with pytest.raises(DTypeError):
        f(jax.numpy.asarray(x_np), jax.numpy.asarray(y_np.astype(np.int32)))


@pytest.mark.parametrize("drop_unused", [True, False])
def test_a_triton_kernel_under_jax_jit(jax, tk, rng, drop_unused):
    """Kept scratch pointers reach the kernel as 1-byte XLA results (the FFI has no null slot)."""
    call = dsl.jax.kernel_call(triton_add(tk, drop_unused=drop_unused))
    x_np, y_np = host(rng), host(rng)
    f = jax.jit(lambda a, b: call(a, b, N))
    got = np.asarray(f(jax.numpy.asarray(x_np), jax.numpy.asarray(y_np)))
    np.testing.assert_allclose(got, x_np.astype(np.float64) + y_np, rtol=1e-6)


def test_a_numba_kernel_under_jax_jit(jax, numba_saxpy, rng):
    call = dsl.jax.kernel_call(numba_saxpy, mutates=("y",))
    x_np, y_np = host(rng), host(rng)
    f = jax.jit(lambda x, y: call(2.5, x, y, N))
    got = np.asarray(f(jax.numpy.asarray(x_np), jax.numpy.asarray(y_np)))
    np.testing.assert_allclose(got, 2.5 * x_np.astype(np.float64) + y_np, rtol=1e-6, atol=1e-5)
