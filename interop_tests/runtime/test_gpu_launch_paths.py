"""Real launches of hand-written PTX through every launch spelling and array kind, vs NumPy."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import MissingContractError

from runtime_helpers import SPIN_CYCLES, all_contracts, rt_ptx

pytestmark = pytest.mark.gpu
N = 1000 + 37     # not a multiple of any block size used


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels")


def host(n, rng, dtype=np.float32):
    return (rng.standard_normal(n) * 10).astype(dtype)


def test_device_facts():
    d = bridge.Device(0)
    assert d is bridge.Device(0) and bridge.device_count() >= 1
    assert d.cc >= (7, 0) and d.sm_count > 0 and d.total_memory > 2**30 and d.name
    assert d.limits.max_threads_per_block == 1024 and d.limits.cc == d.cc[0] * 10 + d.cc[1]
    assert bridge.current_device().ordinal >= 0


def test_bridge_arrays_every_spelling(mod, rng):
    a_np, b_np = host(N, rng), host(N, rng)
    a, b = bridge.from_host(a_np), bridge.from_host(b_np)
    for launch in (lambda o: mod.vecadd(a, b, o, N),
                   lambda o: mod.vecadd(a, b, o, N, grid=(N + 127) // 128, block=128),
                   lambda o: mod.vecadd[(N + 255) // 256, 256](a, b, o, N),
                   lambda o: mod.vecadd[(N + 63) // 64, 64, bridge.current_stream()](a, b, o, N),
                   lambda o: mod.vecadd[(N + 63) // 64, 64, 0, 0](a, b, o, N),
                   lambda o: mod.vecadd.launch(a, b, o, N, grid=(N + 31) // 32, block=32, stream=None)):
        out = bridge.full((N,), -7.0, "float32")
        launch(out)
        bridge.synchronize()
        np.testing.assert_allclose(out.to_host(), a_np + b_np, rtol=1e-6)


def test_cupy_arrays(mod, rng):
    cp = pytest.importorskip("cupy")
    a_np, b_np = host(N, rng), host(N, rng)
    a, b, out = cp.asarray(a_np), cp.asarray(b_np), cp.full(N, -7, cp.float32)
    mod.vecadd(a, b, out, N)
    bridge.synchronize()
    np.testing.assert_allclose(cp.asnumpy(out), a_np + b_np, rtol=1e-6)


def test_torch_tensors(mod, rng):
    torch = pytest.importorskip("torch")
    a_np, b_np = host(N, rng), host(N, rng)
    a, b = torch.from_numpy(a_np).cuda(), torch.from_numpy(b_np).cuda()
    out = torch.full((N,), -7.0, device="cuda")
    mod.vecadd(a, b, out, N)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), a_np + b_np, rtol=1e-6)


def test_view_abi_with_transposed_input(mod, rng):
    cp = pytest.importorskip("cupy")
    src = host(53 * 71, rng).reshape(53, 71)
    a = cp.asarray(src).T          # (71, 53), strides (4, 284): non-contiguous, element strides packed
    out = cp.full((71, 53), -7, cp.float32)
    mod.scale2d(a, out, np.float32(1.5), 0.25, block=(16, 8))
    bridge.synchronize()
    expect = src.T.astype(np.float64) * 1.5 + 0.25
    np.testing.assert_allclose(cp.asnumpy(out), expect, rtol=1e-6, atol=1e-6)


def test_function_attributes(mod):
    k = mod.vecadd
    assert k.attributes.num_regs > 0 and k.attributes.max_threads_per_block == 1024
    assert mod.vecadd_lb256.attributes.max_threads_per_block == 256
    assert k.ptx_version == 80 and k.binary_version >= 80
    assert mod.get_kernel("vecadd") is k
    with pytest.raises(AttributeError, match=r"module 'rt_kernels' has no kernel named 'nope'.*vecadd"):
        mod.nope


def test_dynamic_shared_memory_including_opt_in(mod, rng):
    a_np = host(N, rng)
    a, out = bridge.from_host(a_np), bridge.full((N,), -7.0, "float32")
    mod.smem_copy(a, out, N, block=256, shared_mem=256 * 4)
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), a_np)
    out2 = bridge.full((N,), -7.0, "float32")
    mod.smem_copy(a, out2, N, block=256, shared_mem=100 * 1024)    # > 48 KiB: needs the opt-in attribute
    bridge.synchronize()
    np.testing.assert_array_equal(out2.to_host(), a_np)


def test_empty_output_launches_nothing(mod):
    e = bridge.empty((0,), "float32")
    mod.vecadd(e, e, bridge.empty((0,), "float32"), 0)
    bridge.synchronize()


def test_kernel_from_ptx_is_cached_and_launchable(rng):
    from runtime_helpers import vecadd_contract
    k1 = bridge.kernel_from_ptx(rt_ptx(), "vecadd", vecadd_contract())
    assert bridge.kernel_from_ptx(rt_ptx(), "vecadd", vecadd_contract()) is k1
    a_np, b_np = host(N, rng), host(N, rng)
    out = bridge.full((N,), -7.0, "float32")
    k1(bridge.from_host(a_np), bridge.from_host(b_np), out, N)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), a_np + b_np, rtol=1e-6)


def test_missing_contract_and_unsafe_launch(rng):
    raw = bridge.load_module(rt_ptx(), name="raw")
    a_np, b_np = host(N, rng), host(N, rng)
    a, b, out = bridge.from_host(a_np), bridge.from_host(b_np), bridge.full((N,), -7.0, "float32")
    with pytest.raises(MissingContractError, match="vecadd: kernel has no launch contract"):
        raw.vecadd(a, b, out, N)
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), np.full(N, -7, np.float32))
    bridge.unsafe_launch(raw.vecadd, (N + 127) // 128, 128, a, b, out, np.int32(N))
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), a_np + b_np, rtol=1e-6)


def test_events_and_stream_wait(mod, rng):
    s1, s2 = bridge.Stream(), bridge.Stream()
    x = bridge.full((N,), -7.0, "float32")
    start = s1.record()
    mod.spin_fill(x, N, np.float32(2.0), SPIN_CYCLES, stream=s1)
    end = s1.record()
    s2.wait(end)
    y = bridge.full((N,), -7.0, "float32")
    mod.vecadd(x, x, y, N, stream=s2)
    s2.synchronize()
    assert end.query() and s1.query()
    assert start.elapsed_time(end) > 0.0
    np.testing.assert_allclose(y.to_host(), 4.0 * np.arange(1, N + 1, dtype=np.float32), rtol=1e-6)


def _temporary(refs: list, values: np.ndarray, stream) -> bridge.Array:
    """A bridge array only the caller's expression holds; `refs` gets a weak reference to it."""
    t = bridge.from_host(values, stream=stream)
    refs.append(weakref.ref(t))
    return t


@pytest.mark.nosanitize     # reads stream idleness as "kernel not done"; sanitizers add their own stream work
def test_temporaries_live_until_the_launch_completes(mod, rng):
    s = bridge.Stream()
    gate = bridge.empty((N,), "float32")
    a_np, b_np = host(N, rng), host(N, rng)
    out = bridge.full((N,), -7.0, "float32")
    refs: list = []
    s.synchronize()
    mod.spin_fill(gate, N, np.float32(1.0), SPIN_CYCLES * 50, stream=s)   # keeps the next launch pending
    mod.vecadd(_temporary(refs, a_np, s), _temporary(refs, b_np, s), out, N, stream=s)
    gc.collect()
    if not s.query():                          # still running: the launcher must hold both temporaries
        assert all(r() is not None for r in refs)
    junk = [bridge.from_host(np.full(N, 1e30, np.float32)) for _ in range(8)]   # would reuse freed memory
    s.synchronize()
    np.testing.assert_allclose(out.to_host(), a_np + b_np, rtol=1e-6)
    gc.collect()
    assert all(r() is None for r in refs) and _native.pending_keepalive_count() == 0
    del junk


@pytest.mark.nosanitize     # reads stream idleness as "kernel not done"; sanitizers add their own stream work
@pytest.mark.parametrize("path", ["kernel_call", "fast_call", "configured_call", "launch_method"])
def test_only_temporaries_are_kept_alive(mod, rng, path):
    s = bridge.Stream()
    a, b = bridge.from_host(host(N, rng)), bridge.from_host(host(N, rng))
    out, gate = bridge.full((N,), -7.0, "float32"), bridge.empty((N,), "float32")
    cfg = mod.vecadd[(N + 255) // 256, 256, s]
    refs: list = []
    s.synchronize()
    mod.spin_fill(gate, N, np.float32(1.0), SPIN_CYCLES * 50, stream=s)
    if path == "kernel_call":
        mod.vecadd(a, b, out, N, stream=s)                                   # named arrays: nothing kept
        assert _native.pending_keepalive_count() == 0
        mod.vecadd(a, _temporary(refs, host(N, rng), s), out, N, stream=s)   # one temporary
    elif path == "fast_call":          # no keyword: Kernel.__call__ goes through the launcher's fastcall
        with bridge.use_stream(s):
            mod.vecadd(a, b, out, N)
            assert _native.pending_keepalive_count() == 0
            mod.vecadd(a, _temporary(refs, host(N, rng), s), out, N)
    elif path == "configured_call":
        cfg(a, b, out, N)
        assert _native.pending_keepalive_count() == 0
        cfg(a, _temporary(refs, host(N, rng), s), out, N)
    else:
        mod.vecadd.launch(a, b, out, N, stream=s)
        assert _native.pending_keepalive_count() == 0
        mod.vecadd.launch(a, _temporary(refs, host(N, rng), s), out, N, stream=s)
    gc.collect()
    if not s.query():
        assert refs[0]() is not None
    s.synchronize()
    gc.collect()
    assert refs[0]() is None and _native.pending_keepalive_count() == 0
