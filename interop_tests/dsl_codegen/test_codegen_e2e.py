"""Real @simt.kernel functions through the whole pipeline: PTX that ptxas accepts for several archs
with the expected properties (CPU), and on the GPU the corner-case semantics the code generator
defines — C division incl. by zero and MIN // -1, clamped shifts, saturating float->int casts, NaN
comparisons, half precision, chunk tails, fault records — agreeing bit for bit with the simulator."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dsl import f16, f32, i32, i64, simt
from dsl.backend.ptxas import assemble
from interop_tests.dsl_codegen.codegen_kit import require_ptxas


@simt.kernel
def int_corners(a: simt.Array[i32, 1], b: simt.Array[i32, 1], q: simt.DisjointSlice[i32, 1],
                r: simt.DisjointSlice[i32, 1], shl: simt.DisjointSlice[i32, 1],
                shr: simt.DisjointSlice[i32, 1]):
    i = simt.thread.index_1d()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]
    shl[i] = a[i] << b[i]
    shr[i] = a[i] >> b[i]


@simt.kernel
def float_corners(x: simt.Array[f32, 1], y: simt.Array[f32, 1], as_int: simt.DisjointSlice[i32, 1],
                  ne: simt.DisjointSlice[i32, 1], lt: simt.DisjointSlice[i32, 1],
                  mn: simt.DisjointSlice[f32, 1], fd: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    as_int[i] = i32(x[i])
    ne[i] = i32(x[i] != y[i])
    lt[i] = i32(x[i] < y[i])
    mn[i] = min(x[i], y[i])
    fd[i] = x[i] // y[i]


@simt.kernel
def half_math(x: simt.Array[f16, 1], y: simt.Array[f16, 1], out: simt.DisjointSlice[f16, 1]):
    i = simt.thread.index_1d()
    out[i] = x[i] * y[i] + x[i] / y[i]


@simt.kernel(requires=["len(a) == len(out)"])
def chunk_scale(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1], s: f32):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k] * s


@simt.kernel(block=128)
def gather(a: simt.Array[f32, 1], idx: simt.Array[i64, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = a[idx[i]]


@simt.kernel
def lane_sum(a: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    v = f32(0.0)
    if i < len(a):
        v = a[i]
    s = simt.warp.sum(v)        # every lane of the warp takes part (not inside the guarded store)
    out[i] = s


@simt.kernel(launch_bounds=256)
def transcendental(x: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = simt.exp(x[i]) + math.sin(x[i]) + simt.sqrt(abs(x[i])) + simt.tanh(x[i])


def f32a(n):
    return np.zeros(n, np.float32)


CPU_CASES = {
    "int_corners": (int_corners, lambda: [np.zeros(10, np.int32)] * 6),
    "float_corners": (float_corners, lambda: [f32a(10), f32a(10)] + [np.zeros(10, np.int32)] * 3
                      + [f32a(10), f32a(10)]),
    "half_math": (half_math, lambda: [np.zeros(10, np.float16)] * 3),
    "chunk_scale": (chunk_scale, lambda: [f32a(10), f32a(10), np.float32(2)]),
    "gather": (gather, lambda: [f32a(10), np.zeros(10, np.int64), f32a(10)]),
    "lane_sum": (lane_sum, lambda: [f32a(10), f32a(10)]),
    "transcendental": (transcendental, lambda: [f32a(10), f32a(10)]),
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_real_kernels_assemble_without_trap(name, arch, monkeypatch, tmp_path):
    require_ptxas()
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    kernel, make = CPU_CASES[name]
    ptx = kernel.ptx(*make(), arch=arch)
    assert f".entry {name}(" in ptx and not re.search(r"\btrap\b", ptx)
    assemble(ptx, arch)


def test_real_kernel_properties(monkeypatch, tmp_path):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    chunk = chunk_scale.ptx(*CPU_CASES["chunk_scale"][1]())
    assert re.search(r"ld\.global\.nc\.v4\.b32", chunk) and re.search(r"st\.global\.v4\.b32", chunk)
    g = gather.ptx(*CPU_CASES["gather"][1]())
    assert ".reqntid 128, 1, 1" in g and re.search(r"atom\.cas\.b32 %r\d+, \[%rd\d+\], 0, 1;", g) and "exit;" in g
    t = transcendental.ptx(*CPU_CASES["transcendental"][1]())
    assert ".maxntid 256" in t and ".extern" not in t


# ------------------------------------------------------------------------------------ GPU
def _gpu_run(kernel, args):
    """Launch on device copies (bridge arrays), synchronise (raises KernelFault), copy back."""
    import bridge
    dev = [bridge.from_host(a) if isinstance(a, np.ndarray) else a for a in args]
    kernel(*dev)
    bridge.synchronize()
    return [d.to_host() if isinstance(d, bridge.Array) else d for d in dev]


def _sim_run(kernel, args):
    host = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    kernel.simulate(*host)
    return host


@pytest.mark.gpu
def test_gpu_integer_corners_match_simulator_bit_for_bit(rng):
    n = 1000 + 37
    a = rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    b = rng.integers(-40, 40, n).astype(np.int32)       # zeros, negatives, >= 32 shift amounts
    a[:4] = [-2**31, -2**31, 7, -7]
    b[:4] = [-1, 0, 0, 0]
    outs = [np.full(n, 12345, np.int32) for _ in range(4)]
    gpu = _gpu_run(int_corners, [a, b, *outs])
    sim = _sim_run(int_corners, [a, b, *outs])
    for k in range(2, 6):
        np.testing.assert_array_equal(gpu[k], sim[k])
    nz = (b != 0) & ~((a == -2**31) & (b == -1))
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    q = np.trunc(a64[nz] / b64[nz]).astype(np.int64)
    np.testing.assert_array_equal(gpu[2][nz], q)                       # truncating division
    np.testing.assert_array_equal(gpu[3][nz], a64[nz] - q * b64[nz])   # remainder sign of dividend
    np.testing.assert_array_equal(gpu[2][1:4], [0, 0, 0])              # x // 0 == 0 (defined)
    np.testing.assert_array_equal(gpu[3][1:4], [0, 0, 0])              # x % 0 == 0
    assert gpu[2][0] == -2**31 and gpu[3][0] == 0                      # MIN // -1 wraps
    big = (b < 0) | (b >= 32)
    np.testing.assert_array_equal(gpu[4][big], 0)                      # clamped shifts
    np.testing.assert_array_equal(gpu[5][big], np.where(a[big] < 0, -1, 0))


@pytest.mark.gpu
def test_gpu_float_corners_match_simulator(rng):
    n = 777
    x = rng.normal(0, 1e10, n).astype(np.float32)
    y = rng.normal(0, 1, n).astype(np.float32)
    x[:6] = [np.nan, np.inf, -np.inf, 3e9, -3e9, 2.5]
    y[:6] = [1.0, np.nan, 0.0, np.nan, 1.0, 0.5]
    outs = [np.full(n, -7, np.int32) for _ in range(3)] + [np.full(n, np.nan, np.float32)] * 2
    outs = [o.copy() for o in outs]
    gpu = _gpu_run(float_corners, [x, y, *outs])
    sim = _sim_run(float_corners, [x, y, *outs])
    for k in range(2, 7):
        np.testing.assert_array_equal(gpu[k], sim[k])
    assert list(gpu[2][:5]) == [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31]   # saturating, NaN -> 0
    assert gpu[3][0] == 1 and gpu[3][1] == 1                               # NaN != x is True
    assert gpu[4][0] == 0 and gpu[4][1] == 0                               # NaN < x is False
    assert gpu[5][0] == 1.0 and gpu[5][1] == np.inf                        # min ignores NaN
    np.testing.assert_array_equal(gpu[6][6:], np.floor(x[6:] / y[6:]))     # float // floors


@pytest.mark.gpu
def test_gpu_half_arithmetic_is_correctly_rounded(rng):
    n = 1025
    x = rng.normal(0, 4, n).astype(np.float16)
    y = (rng.uniform(0.5, 4, n) * rng.choice([-1, 1], n)).astype(np.float16)
    out = np.full(n, np.nan, np.float16)
    gpu = _gpu_run(half_math, [x, y, out])
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    expected = ((xf * yf).astype(np.float16).astype(np.float32)
                + (xf / yf).astype(np.float16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(gpu[2], expected)
    np.testing.assert_array_equal(gpu[2], _sim_run(half_math, [x, y, out])[2])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 3, 4, 1001, 4 * 256 + 5])
def test_gpu_chunked_vector_kernel_handles_tails(rng, n):
    import bridge
    a = rng.normal(size=n).astype(np.float32)
    s = np.float32(rng.uniform(1, 3))
    full = bridge.from_host(np.full(n + 8, np.nan, np.float32))
    chunk_scale(bridge.from_host(a), full[:n], s)          # a view: the 8 elements past n stay NaN
    bridge.synchronize()
    host = full.to_host()
    assert np.isnan(host[n:]).all()
    gpu = [a, host[:n]]
    np.testing.assert_array_equal(gpu[1], a * s)


@pytest.mark.gpu
def test_gpu_out_of_range_gather_records_fault_and_leaves_other_threads_done(rng):
    from dsl import KernelFault
    n = 500
    a = rng.normal(size=n).astype(np.float32)
    idx = rng.integers(0, n, n).astype(np.int64)
    idx[123] = n + 77
    out = np.full(n, np.nan, np.float32)
    with pytest.raises(KernelFault) as err:
        _gpu_run(gather, [a, idx, out])
    msg = str(err.value)
    assert "gather" in msg and "'a'" in msg and str(n + 77) in msg and str(n) in msg
    assert "out[i] = a[idx[i]]" in msg


@pytest.mark.gpu
def test_gpu_warp_sum_gives_every_lane_the_same_total(rng):
    n = 32 * 9 + 5
    a = rng.normal(size=n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    gpu = _gpu_run(lane_sum, [a, out])[1]
    sim = _sim_run(lane_sum, [a, out])[1]
    np.testing.assert_array_equal(gpu, sim)               # same butterfly order on both
    padded = np.concatenate([a, np.zeros(32 - n % 32, np.float32)]).reshape(-1, 32)
    expected = np.repeat(padded.astype(np.float64).sum(axis=1), 32)[:n]
    np.testing.assert_allclose(gpu, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_transcendentals_have_cuda_accuracy(rng):
    n = 3001
    x = rng.uniform(-10, 10, n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    gpu = _gpu_run(transcendental, [x, out])[1]
    xd = x.astype(np.float64)
    ref = np.exp(xd) + np.sin(xd) + np.sqrt(np.abs(xd)) + np.tanh(xd)
    np.testing.assert_allclose(gpu, ref, rtol=4e-7 * 8, atol=1e-5)
