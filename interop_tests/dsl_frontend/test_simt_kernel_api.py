"""The public dsl.simt kernel object: signatures from runtime arguments, ptx/inspect/ir without a GPU,
the CPU simulator (also through KB_SIMULATE=1), contracts, and — on a GPU — native launches."""
from __future__ import annotations

import linecache
import math

import numpy as np
import pytest

import bridge
import dsl
from dsl import f32, simt
from dsl.ir import types as irt

N = 1000  # not a multiple of the block
T = dsl.TypeVar("T")


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def vecadd(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@simt.kernel
def axpy(a: simt.Array[T], out: simt.DisjointSlice[T], s: T):
    i = simt.thread.index_1d()
    out[i] += a[i] * s


@simt.kernel(requires=["len(a) == len(out)"])
def shifted(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i + 1]  # FAULT-LINE


@simt.kernel(launch_bounds=256)
def chunk_scale(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k] * s


def rand(rng, n=N, dtype=np.float32):
    return (rng.random(n) + 0.5).astype(dtype)


# ---------------------------------------------------------------- signatures
def test_signature_records_dtype_layout_and_alignment(rng):
    a = rand(rng)
    strided = rand(rng, 2 * N)[::2]
    sig = vecadd.signature(a, strided, a.copy())
    assert sig[0] == irt.ArrayType(irt.F32, 1, False, "C", a.ctypes.data % 16 == 0)
    assert sig[1].layout == "any" and sig[2].writable
    assert vecadd.signature(a[1:], a[1:], a[1:])[0].aligned16 is False


def test_signature_errors_name_the_argument(rng):
    a = rand(rng)
    with pytest.raises(bridge.DTypeError, match=r"argument 'b' \(#1\): expected float32 array, "
                                                r"got float64 array of shape \(1000,\)"):
        vecadd.signature(a, a.astype(np.float64), a)
    with pytest.raises(bridge.ArgumentCountError, match="expected 3 arguments"):
        vecadd.signature(a, a)
    with pytest.raises(bridge.NdimError, match="argument 'out'"):
        vecadd.signature(a, a, a.reshape(10, 100))
    with pytest.raises(bridge.ArgumentKindError, match="argument 'a'.*expected an array"):
        vecadd.signature(1.0, a, a)
    with pytest.raises(bridge.DTypeError, match="argument 's'.*expected int32, got a float"):
        axpy.signature(a.astype(np.int32), a.astype(np.int32), 1.5)


def test_generic_scalars_bind_from_arrays_then_values(rng):
    a = rand(rng)
    assert axpy.signature(a, a, 2)[2] == irt.F32          # T bound by the arrays
    assert axpy.signature(a.astype(np.float64), a.astype(np.float64), 2)[2] == irt.F64


# ---------------------------------------------------------------- no-GPU tooling
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_ptx_from_numpy_stand_ins(rng, arch):
    a = rand(rng)
    ptx = vecadd.ptx(a, a, a, arch=arch)
    assert f".target {arch}" in ptx and "vecadd" in ptx
    assert "ld.global.nc" in ptx


def test_ptx_accepts_dsl_types_and_numpy_scalars_for_scalars(rng):
    a = rand(rng)
    assert axpy.ptx(a, a, f32, arch="sm_90") == axpy.ptx(a, a, np.float32(1), arch="sm_90")


def test_inspect_reports_resources_and_contract(rng):
    a = rand(rng)
    info = vecadd.inspect(a, a, a, arch="sm_90")
    assert info["resources"]["registers"] > 0 and info["resources"]["spill_stores"] == 0
    assert '"kernel":"vecadd"' in info["contract"]


def test_contract_from_the_ir(rng):
    a = rand(rng)
    d = axpy.contract(a, a, np.float32(2)).to_dict()
    assert d["kernel"] == "axpy"
    assert [x["access"] for x in d["args"][:2]] == ["read", "readwrite"]
    assert d["grid_from"] == {"arg": "out", "per_thread": [1, 1, 1]}
    assert d["fault_sites"][0]["array"] == "a"
    c = chunk_scale.contract(a, a, np.float32(2)).to_dict()
    assert c["grid_from"]["per_thread"] == [4, 1, 1] and c["block"] == {"max_threads": 256}
    v = vecadd.contract(a, a, a).to_dict()
    assert v["block"] == {"exact": [256, 1, 1]} and "fault_sites" not in v


# ---------------------------------------------------------------- simulator
def test_simulate_vecadd_matches_numpy(rng):
    a, b = rand(rng), rand(rng)
    out = np.full(N, np.nan, np.float32)
    vecadd.simulate(a, b, out)
    np.testing.assert_array_equal(out, a + b)


def test_simulate_generic_and_chunked(rng):
    a = rand(rng).astype(np.float64)
    out = rand(rng).astype(np.float64)
    ref = out + a * 3.0
    axpy.simulate(a, out, 3.0, block=128)
    np.testing.assert_allclose(out, ref, rtol=0, atol=0)
    x = rand(rng, 1003)
    y = np.full_like(x, -1)
    chunk_scale.simulate(x, y, np.float32(0.5))
    np.testing.assert_array_equal(y, x * np.float32(0.5))


def test_simulated_fault_names_array_index_and_line(rng):
    a = rand(rng)
    out = np.full(N, -7, np.float32)
    with pytest.raises(dsl.KernelFault) as info:
        shifted.simulate(a, out)
    e = info.value
    line = next(k for k in range(1, 300) if "FAULT-LINE" in linecache.getline(__file__, k))
    assert e.array == "a" and e.index == N and e.extent == N and e.line == line
    np.testing.assert_array_equal(out[:-1], a[1:])


def test_kb_simulate_makes_calls_simulate(rng, monkeypatch):
    monkeypatch.setenv("KB_SIMULATE", "1")
    a, b = rand(rng), rand(rng)
    out = np.zeros(N, np.float32) - 1
    vecadd(a, b, out)
    np.testing.assert_array_equal(out, a + b)
    out2 = np.zeros(N, np.float32) - 1
    vecadd[math.ceil(N / 256), 256](a, b, out2)
    np.testing.assert_array_equal(out2, a + b)
    out3 = np.zeros(N, np.float32) - 1
    vecadd.launch(a, b, out3, grid=(4, 1, 1), block=256)
    np.testing.assert_array_equal(out3, a + b)


def test_decorator_validates_its_options_at_the_def():
    def body(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = a[i]
    with pytest.raises(dsl.DslCompileError, match="domain= must be 1, 2 or 3, got int 4"):
        simt.kernel(domain=4)(body)
    with pytest.raises(dsl.DslCompileError, match="not both"):
        simt.kernel(block=128, launch_bounds=256)(body)


def test_device_function_cannot_run_on_the_host():
    @simt.device
    def d(x: f32) -> f32:
        return x
    with pytest.raises(RuntimeError, match="can only be called from a @simt.kernel"):
        d(1.0)


# ---------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_vecadd_launches_through_the_dispatcher(rng):
    a, b = rand(rng), rand(rng)
    da, db = bridge.from_host(a), bridge.from_host(b)
    dout = bridge.from_host(np.full(N, np.nan, np.float32))
    vecadd(da, db, dout)
    np.testing.assert_array_equal(dout.to_host(), a + b)
    dout2 = bridge.from_host(np.full(N, np.nan, np.float32))
    vecadd[math.ceil(N / 256), 256](da, db, dout2)
    vecadd.launch(da, db, dout2, grid=math.ceil(N / 256), block=256, stream=bridge.current_stream())
    np.testing.assert_array_equal(dout2.to_host(), a + b)
    assert len(vecadd.dispatcher) == 1


@pytest.mark.gpu
def test_gpu_generic_kernel_specialises_per_dtype(rng):
    for dtype in (np.float32, np.float64, np.int32):
        a = (rng.integers(1, 50, N)).astype(dtype)
        out0 = (rng.integers(1, 50, N)).astype(dtype)
        dout = bridge.from_host(out0)
        axpy(bridge.from_host(a), dout, dtype(3))
        np.testing.assert_array_equal(dout.to_host(), out0 + a * dtype(3))
    assert len(axpy.dispatcher) == 3


@pytest.mark.gpu
def test_gpu_bad_dtype_is_refused_and_touches_nothing(rng):
    a = rand(rng)
    poison = np.full(N, 123.0, np.float32)
    dout = bridge.from_host(poison)
    with pytest.raises(bridge.DTypeError) as info:
        vecadd(bridge.from_host(a.astype(np.float64)), bridge.from_host(a), dout)
    assert info.value.arg_name == "a"
    np.testing.assert_array_equal(dout.to_host(), poison)


@pytest.mark.gpu
def test_gpu_fault_is_reported_at_synchronize_and_the_context_survives(rng):
    a = rand(rng)
    dout = bridge.from_host(np.full(N, -1.0, np.float32))
    shifted(bridge.from_host(a), dout)
    with pytest.raises(dsl.KernelFault) as info:
        bridge.synchronize()
    assert info.value.array == "a" and info.value.index == N and info.value.extent == N
    line = next(k for k in range(1, 300) if "FAULT-LINE" in linecache.getline(__file__, k))
    assert info.value.line == line
    np.testing.assert_array_equal(dout.to_host()[:-1], a[1:])
    # the next launch works
    b = rand(rng)
    d2 = bridge.from_host(np.full(N, np.nan, np.float32))
    vecadd(bridge.from_host(a), bridge.from_host(b), d2)
    np.testing.assert_array_equal(d2.to_host(), a + b)


@pytest.mark.gpu
def test_gpu_accepts_cupy_and_torch_arrays(rng):
    a, b = rand(rng), rand(rng)
    cupy = pytest.importorskip("cupy")
    out = cupy.full(N, cupy.nan, dtype=cupy.float32)
    vecadd(cupy.asarray(a), cupy.asarray(b), out)
    np.testing.assert_array_equal(cupy.asnumpy(out), a + b)
    torch = pytest.importorskip("torch")
    tout = torch.full((N,), float("nan"), device="cuda")
    vecadd(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), tout)
    np.testing.assert_array_equal(tout.cpu().numpy(), a + b)
