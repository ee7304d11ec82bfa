"""Two GPUs in one process: every kind of kernel runs on the device of its arrays with a specialisation
of its own, the current device never moves behind the caller's back, mismatches (arrays of two
devices, another device's stream, event or graph) are refused before anything runs, peer access is
opt-in, and copies between devices are ordered by memory with no host wait.

Skipped with "needs 2 GPUs, found N" on machines with fewer devices (reported as not run)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _driver, _native
from bridge.errors import DeviceMismatchError, PeerAccessError
from dsl import f32, simt, tile

from interop_tests.runtime.runtime_helpers import SPIN_CYCLES, all_contracts, rt_ptx, under_compute_sanitizer

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]
N = 4096 + 36
SLOW = SPIN_CYCLES * 100    # ~10 ms: still running after a sanitizer's slow host calls queue the copy


@simt.kernel(block=128)
def scale_mg(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = s * a[i]


@tile.kernel
def plus_one_mg(a: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(a, tile.bid(0), out.tile_shape) + 1.0)


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels_mg", device=0)


def data() -> np.ndarray:
    return np.arange(N, dtype=np.float32)


def ramp(v: float) -> np.ndarray:
    return v * np.arange(1, N + 1, dtype=np.float32)


def on(device: int, values: np.ndarray | None = None, fill: float = -5.0) -> bridge.Array:
    if values is not None:
        return bridge.from_host(values, device=device)
    return bridge.full((N,), fill, "float32", device=device)


def test_dsl_simt_kernel_runs_on_each_device_with_its_own_specialisation():
    torch = pytest.importorskip("torch")
    before = (_native.current_device(), torch.cuda.current_device())
    for dev in (0, 1):
        out = on(dev)
        scale_mg(on(dev, data()), out, 3.0)
        assert out.device == dev
        np.testing.assert_array_equal(out.to_host(), 3 * data())
    assert len(scale_mg.dispatcher) == 2, "one specialisation per device"
    assert (_native.current_device(), torch.cuda.current_device()) == before, "a launch moved the current device"


def test_dsl_tile_kernel_runs_on_each_device():
    for dev in (1, 0):
        out = on(dev)
        plus_one_mg(on(dev, data()), tile.partition(out, (256,)))
        np.testing.assert_array_equal(out.to_host(), data() + 1)
    assert len(plus_one_mg.dispatcher) == 2


def test_cuda_cpp_kernel_loads_its_module_on_the_device_where_it_is_launched():
    saxpy = bridge.cpp_kernels.load("saxpy", device=0).saxpy
    for dev in (0, 1):
        x, y = on(dev, data()), on(dev, np.ones(N, np.float32))
        saxpy(2.0, x, y, N)
        np.testing.assert_array_equal(y.to_host(), 2 * data() + 1)
    there = saxpy.on_device(1)
    assert there.device == 1 and there.module.device == 1 and there is not saxpy
    assert saxpy.on_device(1) is there


def test_module_kernels_and_kernels_from_ptx_per_device(mod):
    out = on(1)
    mod.spin_fill(out, N, np.float32(2), 1)
    np.testing.assert_array_equal(out.to_host(), ramp(2))
    k1 = bridge.kernel_from_ptx(rt_ptx(), "vecadd", all_contracts()["vecadd"], device=1)
    assert k1.device == 1 and k1.launcher.device_id == 1
    a, o = on(1, data()), on(1)
    k1(a, a, o, N)
    np.testing.assert_array_equal(o.to_host(), 2 * data())


def test_arrays_on_two_devices_are_refused_and_nothing_is_written():
    x1, out0 = on(1, data()), on(0)
    with pytest.raises(DeviceMismatchError) as info:
        scale_mg(x1, out0, 2.0)
    assert "argument 'out' (#1): expected device memory on cuda:1, got memory on cuda:0" in str(info.value)
    bridge.synchronize(0)
    bridge.synchronize(1)
    np.testing.assert_array_equal(out0.to_host(), np.full(N, -5.0, np.float32))


def test_a_stream_of_the_other_device_is_refused_naming_the_argument(mod):
    torch = pytest.importorskip("torch")
    x0, out0 = on(0, data()), on(0)
    for stream in (bridge.Stream(device=1), torch.cuda.Stream(device=1)):
        with pytest.raises(DeviceMismatchError, match=r"argument 'a' \(#0\): the launch runs on cuda:0 \(where "
                                                      r"this array is\), but the stream 0x[0-9a-f]+ belongs to "
                                                      r"cuda:1"):
            scale_mg(x0, out0, 2.0, stream=stream)
        with pytest.raises(DeviceMismatchError, match=r"argument 'a' \(#0\)"):
            mod.vecadd(x0, x0, out0, N, stream=stream)
    bridge.synchronize(0)
    np.testing.assert_array_equal(out0.to_host(), np.full(N, -5.0, np.float32))


def test_another_devices_event_is_refused_in_wait_unless_cross_device(mod):
    src0 = on(0)
    dst1 = on(1, fill=-2.0)
    bridge.synchronize(0)
    bridge.synchronize(1)
    p0, s1 = bridge.Stream(device=0), bridge.Stream(device=1)
    mod.spin_fill(src0, N, np.float32(4), SLOW, stream=p0)
    ev = p0.record()
    with pytest.raises(DeviceMismatchError, match=r"expected an event of cuda:1 \(this stream's device\), got an "
                                                  r"event of cuda:0"):
        s1.wait(ev)
    s1.wait(ev, cross_device=True)
    # a raw peer copy on s1 (outside the memory log): only the event wait orders it after the writer
    drv = _driver.raw()
    _driver.call("cuMemcpyPeerAsync", drv.CUdeviceptr(dst1.ptr), drv.CUcontext(_driver.primary_context(1)),
                 drv.CUdeviceptr(src0.ptr), drv.CUcontext(_driver.primary_context(0)), dst1.nbytes,
                 drv.CUstream(s1.handle))
    s1.synchronize()
    np.testing.assert_array_equal(dst1.to_host(), ramp(4))


def test_a_graph_replays_only_on_its_devices_streams():
    s0 = bridge.Stream(device=0)
    x, out = on(0, data()), on(0)
    scale_mg(x, on(0), 1.0)          # specialised before the capture (no compile or load inside it)
    bridge.synchronize(0)
    with bridge.capture(s0) as g:
        scale_mg(x, out, 5.0)
    assert g.device == 0
    with pytest.raises(DeviceMismatchError, match=r"Graph.replay: argument 'stream' \(#0\): expected a stream of "
                                                  r"cuda:0"):
        g.replay(bridge.Stream(device=1))
    np.testing.assert_array_equal(out.to_host(), np.full(N, -5.0, np.float32))   # nothing ran
    g.replay(s0)
    s0.synchronize()
    np.testing.assert_array_equal(out.to_host(), 5 * data())


def test_peer_access_is_opt_in_per_launch(mod):
    a0, b1, out0 = on(0, data()), on(1, 2 * data()), on(0)
    with pytest.raises(DeviceMismatchError, match=r"argument 'b' \(#1\): expected device memory on cuda:0, got "
                                                  r"memory on cuda:1"):
        mod.vecadd(a0, b1, out0, N)
    if not bridge.Device(0).can_access_peer(1):
        with pytest.raises(PeerAccessError, match=r"argument 'b' \(#1\): memory on cuda:1 cannot be reached from "
                                                  r"cuda:0"):
            mod.vecadd(a0, b1, out0, N, peer_access=True)
        return
    mod.vecadd(a0, b1, out0, N, peer_access=True)         # runs on cuda:0 (first array), reads cuda:1
    assert _native.peer_access_enabled(0, 1)
    np.testing.assert_array_equal(out0.to_host(), 3 * data())


def test_copy_peer_between_devices_waits_for_the_writer_without_a_host_wait(mod):
    src0, dst1 = on(0), on(1, fill=-2.0)
    bridge.synchronize(0)
    bridge.synchronize(1)
    producer, consumer = bridge.Stream(device=0), bridge.Stream(device=1)
    mod.spin_fill(src0, N, np.float32(6), SLOW, stream=producer)
    bridge.copy_peer(dst1, src0, stream=consumer)
    assert under_compute_sanitizer() or not producer.query(), \
        "the writer finished before the copy was queued: the test proves nothing"   # initcheck serialises
    np.testing.assert_array_equal(dst1.to_host(stream=consumer), ramp(6))


def test_default_streams_of_two_devices_are_ordered_by_memory(mod):
    src0, dst1 = on(0), on(1, fill=-2.0)
    bridge.synchronize(0)
    bridge.synchronize(1)
    mod.spin_fill(src0, N, np.float32(7), SLOW, stream=0)              # cuda:0's legacy default stream
    bridge.copy_peer(dst1, src0, stream=bridge.Stream(0, device=1))    # cuda:1's: another stream
    assert not bridge.Stream(0, device=0).query(), "the writer finished early: the test proves nothing"
    np.testing.assert_array_equal(dst1.to_host(stream=bridge.Stream(0, device=1)), ramp(7))


def test_a_fault_on_one_device_is_reported_by_that_devices_synchronisation(mod):
    data1, out1 = on(1, np.arange(8, dtype=np.float32)), bridge.empty((1,), "float32", device=1)
    mod.checked_get(data1, out1, 99, grid=1, block=1, stream=0)
    bridge.Stream(0, device=0).synchronize()                   # cuda:0's default stream: not its fault
    with pytest.raises(bridge.KernelFault, match="index 99 out of bounds for array 'data' with extent 8"):
        bridge.Stream(0, device=1).synchronize()
    mod.checked_get(data1, out1, 5, grid=1, block=1, stream=0)
    bridge.synchronize(1)
    assert out1.to_host()[0] == 5.0


def test_device_block_makes_device_1_current_for_bridge_and_torch():
    torch = pytest.importorskip("torch")
    before = (bridge.current_device().ordinal, torch.cuda.current_device())
    with bridge.Device(1):
        assert bridge.current_device().ordinal == 1 and torch.cuda.current_device() == 1
        x = bridge.from_host(data())
        out = bridge.empty((N,), "float32")
        assert (x.device, out.device) == (1, 1)
        scale_mg(x, out, 4.0)
        t = torch.from_dlpack(out) + 1                         # torch follows on cuda:1
        assert t.device.index == 1
        np.testing.assert_array_equal(t.cpu().numpy(), 4 * data() + 1)
    assert (bridge.current_device().ordinal, torch.cuda.current_device()) == before
