"""The chunk kernels whose accesses became vectors compute what NumPy computes in float64: on the CPU
simulator (which runs the typed IR, so it pins the meaning the vector code must keep) and, as a GPU
twin, on the device through the vectorised PTX, with a length that leaves a partial last chunk,
unaligned and strided inputs, a read-modify-write and a write on some paths only."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from interop_tests.dsl_codegen import chunk_kernels as C

# (kernel, NumPy dtype, relative tolerance: a few units in the last place of the output type)
GELU = {"bf16": (C.gelu_bf16, ml_dtypes.bfloat16, 1e-2), "f16": (C.gelu_f16, np.float16, 2e-3),
        "f32": (C.gelu_f32, np.float32, 2e-6)}
N = 1001                     # not a multiple of 4 or 8: the last chunk takes the per-element tail


def gelu64(x: np.ndarray) -> np.ndarray:
    v = x.astype(np.float64)
    return 0.5 * v * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (v + 0.044715 * v ** 3)))


def inputs(rng, np_dt, n: int = N) -> np.ndarray:
    return rng.uniform(-4.0, 4.0, n).astype(np_dt)


def close(got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=rtol)    # outputs are O(1)


# ------------------------------------------------------------------------------------ simulator
@pytest.mark.parametrize("name", list(GELU))
def test_simulated_gelu_chunks_match_numpy_float64(rng, name):
    kernel, np_dt, rtol = GELU[name]
    x = inputs(rng, np_dt)
    out = np.full(N, np.nan, np_dt)
    kernel.simulate(x, out)
    close(out, gelu64(x), rtol)


def test_simulated_read_modify_write_adds_to_what_out_held(rng):
    x, out0 = inputs(rng, np.float32), inputs(rng, np.float32)
    out = out0.copy()
    C.gelu_residual.simulate(x, out)
    close(out, out0.astype(np.float64) + gelu64(x), 1e-5)


def test_simulated_write_on_some_paths_leaves_the_other_elements(rng):
    x = inputs(rng, np.float32)
    out = np.full(N, -7.0, np.float32)
    C.relu_some_paths.simulate(x, out)
    want = np.where(x > 0, np.tanh(x.astype(np.float64)), -7.0)
    close(out, want, 2e-6)


# ------------------------------------------------------------------------------------ GPU twin
def _on_gpu(kernel, x: np.ndarray, out: np.ndarray, pad: int = 0) -> np.ndarray:
    """Run on device copies (out inside a NaN-padded buffer when pad > 0) and return out's buffer."""
    import bridge
    buf = np.full(len(out) + pad, np.nan, out.dtype)
    buf[:len(out)] = out
    dbuf = bridge.from_host(buf)
    kernel(bridge.from_host(x), dbuf[:len(out)])
    bridge.synchronize()
    return dbuf.to_host()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [7, 8, N, 4096])
@pytest.mark.parametrize("name", list(GELU))
def test_gpu_gelu_chunks_match_numpy_float64_and_leave_the_rest(rng, name, n):
    kernel, np_dt, rtol = GELU[name]
    x = inputs(rng, np_dt, n)
    host = _on_gpu(kernel, x, np.zeros(n, np_dt), pad=16)
    close(host[:n], gelu64(x), rtol)
    assert np.isnan(host[n:].astype(np.float32)).all()        # nothing written past the array


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GELU))
def test_gpu_gelu_of_an_unaligned_input_matches(rng, name):
    import bridge
    kernel, np_dt, rtol = GELU[name]
    whole = inputs(rng, np_dt, N + 1)
    x = bridge.from_host(whole)[1:]                           # one element in: not 16-byte aligned
    out = bridge.from_host(np.zeros(N, np_dt))
    kernel(x, out)
    bridge.synchronize()
    close(out.to_host(), gelu64(whole[1:]), rtol)


@pytest.mark.gpu
def test_gpu_read_modify_write_and_some_paths_match_the_simulator(rng):
    x, out0 = inputs(rng, np.float32), inputs(rng, np.float32)
    gpu = _on_gpu(C.gelu_residual, x, out0.copy())
    sim = out0.copy()
    C.gelu_residual.simulate(x, sim)
    close(gpu, out0.astype(np.float64) + gelu64(x), 1e-5)
    np.testing.assert_allclose(gpu, sim, rtol=1e-6, atol=1e-6)
    some = _on_gpu(C.relu_some_paths, x, np.full(N, -7.0, np.float32))
    close(some, np.where(x > 0, np.tanh(x.astype(np.float64)), -7.0), 2e-6)
