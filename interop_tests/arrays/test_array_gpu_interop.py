"""On a CUDA device, bridge.Array shares memory both ways with PyTorch, CuPy and Numba (pointer equality,
no copies), allocates stream-ordered, copies host<->device exactly, and orders cross-stream hand-overs
with events (a producer still running on a side stream is waited for)."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import bridge

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 200_000_000  # ~0.1 s of GPU time: long enough that an unordered reader sees stale data


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed: torch interop is not tested")


def _cupy():
    return pytest.importorskip("cupy", reason="CuPy is not installed: CuPy interop is not tested")


# ---- PyTorch --------------------------------------------------------------------------------------------

def test_torch_to_bridge_and_back_is_zero_copy(rng):
    torch = _torch()
    t = torch.from_numpy(rng.standard_normal((1031, 3)).astype(np.float32)).cuda()
    x = bridge.asarray(t)
    assert x.ptr == t.data_ptr() and x.shape == (1031, 3) and x.strides == (12, 4)
    assert x.device == t.device.index and x.dtype == np.float32
    np.testing.assert_array_equal(x.to_host(), t.cpu().numpy())
    y = torch.from_dlpack(x)
    assert y.data_ptr() == x.ptr and y.shape == t.shape
    y[5, 1] = 77.25
    torch.cuda.synchronize()
    assert t[5, 1].item() == 77.25  # same memory


def test_torch_strided_views(rng):
    torch = _torch()
    base = torch.from_numpy(rng.standard_normal((37, 41))).cuda()
    for view in (base[3:30:4], base.t(), base[:, 7], base[2:5, 1:40:3]):
        x = bridge.asarray(view)
        assert x.ptr == view.data_ptr()
        assert x.strides == tuple(s * 8 for s in view.stride())
        np.testing.assert_array_equal(x.to_host(), view.cpu().numpy())
        back = torch.from_dlpack(x)
        assert back.data_ptr() == view.data_ptr() and back.stride() == view.stride()


def test_bfloat16_through_torch(rng):
    torch = _torch()
    ref = rng.uniform(-8, 8, size=517).astype(np.float32)
    t = torch.from_numpy(ref).to(torch.bfloat16).cuda()
    x = bridge.asarray(t)
    assert x.dtype_name == "bfloat16" and x.dtype == np.dtype(ml_dtypes.bfloat16) and x.ptr == t.data_ptr()
    np.testing.assert_array_equal(x.to_host().astype(np.float32), t.float().cpu().numpy())
    back = torch.from_dlpack(x)
    assert back.dtype == torch.bfloat16 and back.data_ptr() == x.ptr
    with pytest.raises(TypeError, match="DLPack"):
        x.__cuda_array_interface__
    host = ref.astype(ml_dtypes.bfloat16)
    d = bridge.from_host(host)
    assert torch.equal(torch.from_dlpack(d).cpu(), torch.from_numpy(host.view(np.uint16)).view(torch.bfloat16))


def test_torch_producer_on_side_stream_is_waited_for(rng):
    """bridge.asarray inside a torch stream context records that stream; to_host orders after it."""
    torch = _torch()
    src = torch.from_numpy(rng.standard_normal(1 << 20).astype(np.float32)).cuda()
    t = torch.full_like(src, -1.0)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        t.copy_(src)
        x = bridge.asarray(t)
    assert x._stream == side.cuda_stream
    other = torch.cuda.Stream()  # a reader on an unrelated non-blocking stream must wait (event)
    np.testing.assert_array_equal(x.to_host(stream=other.cuda_stream), src.cpu().numpy())
    np.testing.assert_array_equal(x.to_host(), src.cpu().numpy())


def test_torch_consumer_waits_for_bridge_producer_stream(rng):
    """torch.from_dlpack(bridge_array) on torch's default stream waits (event) for the side stream."""
    torch = _torch()
    src = torch.from_numpy(rng.standard_normal(1 << 20).astype(np.float32)).cuda()
    t = torch.full_like(src, -1.0)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        t.copy_(src)
        x = bridge.asarray(t)
    y = torch.from_dlpack(x)          # consumer: torch's current (default) stream
    result = y.clone()                # queued on the default stream, must run after the copy
    torch.cuda.synchronize()
    assert torch.equal(result, src)


def test_torch_cpu_tensor_is_a_host_view(rng):
    torch = _torch()
    t = torch.from_numpy(rng.standard_normal(19))
    x = bridge.asarray(t)
    assert x.device == "cpu" and x.ptr == t.data_ptr()
    with pytest.raises(AttributeError, match="host bridge.Array has no __cuda_array_interface__"):
        x.__cuda_array_interface__


def test_generic_cuda_dlpack_producer_gets_the_bridge_stream(rng):
    """A CUDA producer outside the fast paths is asked for a capsule ordered on the current stream."""
    torch = _torch()
    from bridge.stream import current_stream
    t = torch.from_numpy(rng.standard_normal(101).astype(np.float32)).cuda()
    seen = []

    class Producer:
        def __dlpack_device__(self):
            return t.__dlpack_device__()

        def __dlpack__(self, **kw):
            seen.append(kw)
            return t.__dlpack__(**kw)

    x = bridge.asarray(Producer())
    expect = current_stream().handle or 1
    assert seen[0]["stream"] == expect and x.ptr == t.data_ptr() and x.device == t.device.index
    np.testing.assert_array_equal(x.to_host(), t.cpu().numpy())


# ---- CuPy -----------------------------------------------------------------------------------------------

def test_cupy_both_ways_is_zero_copy(rng):
    cp = _cupy()
    c = cp.asarray(rng.standard_normal((257, 5)).astype(np.float64))[::2, 1:]
    x = bridge.asarray(c)
    assert x.ptr == c.data.ptr and x.strides == c.strides and x.shape == c.shape
    assert x._stream == cp.cuda.get_current_stream().ptr
    np.testing.assert_array_equal(x.to_host(), cp.asnumpy(c))
    via_dlpack = cp.from_dlpack(x)
    via_cai = cp.asarray(x)
    assert via_dlpack.data.ptr == x.ptr and via_cai.data.ptr == x.ptr
    assert via_cai.strides == c.strides
    np.testing.assert_array_equal(cp.asnumpy(via_cai), cp.asnumpy(c))


def test_cuda_array_interface_only_producer_gets_its_device(rng):
    cp = _cupy()
    c = cp.asarray(rng.integers(0, 1 << 30, size=333, dtype=np.int32))

    class OnlyCAI:
        __cuda_array_interface__ = c.__cuda_array_interface__

    x = bridge.asarray(OnlyCAI())
    assert x.ptr == c.data.ptr and x.device == c.device.id and x.dtype == np.int32
    np.testing.assert_array_equal(x.to_host(), cp.asnumpy(c))


def test_bridge_cai_export_fields(rng):
    cp = _cupy()
    x = bridge.from_host(rng.standard_normal((9, 4)).astype(np.float32))
    cai = x.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f4" and cai["strides"] is None
    assert cai["data"] == (x.ptr, False) and cai["stream"] != 0
    assert x.T.__cuda_array_interface__["strides"] == (4, 16)
    np.testing.assert_array_equal(cp.asnumpy(cp.asarray(x.T)), x.to_host().T)


def test_numba_sees_the_same_memory(rng):
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed: numba interop is not tested")
    from numba import cuda
    x = bridge.from_host(rng.standard_normal(77).astype(np.float32))
    d = cuda.as_cuda_array(x)
    assert d.device_ctypes_pointer.value == x.ptr
    np.testing.assert_array_equal(d.copy_to_host(), x.to_host())


# ---- allocation and copies ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint16", "int64", "complex64", "bool",
                                   "float16", "bfloat16", "float8_e4m3fn"])
def test_from_host_to_host_round_trip(dtype, rng):
    shape = (int(rng.integers(1, 300)), 3, 7)
    data = (rng.standard_normal(shape) * 4).astype(dtypes_np(dtype))
    x = bridge.from_host(data)
    assert x.shape == shape and x.dtype == data.dtype
    back = x.to_host()
    np.testing.assert_array_equal(back.view(np.uint8), data.view(np.uint8))
    sl = x[1::2, ::-1, 3]
    np.testing.assert_array_equal(sl.to_host().view(np.uint8), np.ascontiguousarray(data[1::2, ::-1, 3]).view(np.uint8))


def dtypes_np(name):
    return bridge.dtypes.to_numpy(name)


def test_from_host_of_strided_numpy(rng):
    a = rng.standard_normal((63, 17))[::-3, 1::2]
    np.testing.assert_array_equal(bridge.from_host(a).to_host(), a)


def test_empty_zeros_full(rng):
    n = int(rng.integers(1000, 5000)) * 2 + 1
    e = bridge.empty((n,), "float32")
    assert e.shape == (n,) and e.nbytes == 4 * n and e.ptr != 0 and e.ptr % 256 == 0
    z = bridge.zeros((3, n), "int16")
    assert not z.to_host().any()
    value = float(rng.uniform(-100, 100))
    for dtype in ("float32", "float16", "bfloat16", "int8", "float64", "complex128"):
        f = bridge.full((5, 7), value, dtype)
        expect = np.full((5, 7), value, dtype=dtypes_np(dtype))
        np.testing.assert_array_equal(f.to_host().view(np.uint8), expect.view(np.uint8))
    like = bridge.zeros_like(e)
    assert like.shape == e.shape and like.dtype == e.dtype and like.ptr != e.ptr
    assert bridge.empty_like(np.empty((4, 2), np.int32)).dtype == np.int32


@pytest.mark.parametrize("shape", [(0,), (4, 0), (0, 0, 3)])
def test_zero_byte_arrays_allocate_nothing(shape):
    x = bridge.empty(shape, "float64")
    assert x.ptr == 0 and x.nbytes == 0
    assert x.to_host().shape == shape
    assert bridge.from_host(np.empty(shape)).ptr == 0


def test_allocations_are_freed_in_stream_order():
    """150 GiB allocated one GiB at a time on a 141 GB device only fits if each is freed when dropped."""
    for _ in range(150):
        x = bridge.empty(1 << 28, "float32")
        del x
    gc.collect()


def test_device_array_dlpack_arguments(rng):
    x = bridge.from_host(rng.standard_normal(10))
    with pytest.raises(ValueError, match="stream=0 is ambiguous"):
        x.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="never copies"):
        x.__dlpack__(stream=1, copy=True)
    with pytest.raises(BufferError, match="dl_device"):
        x.__dlpack__(stream=1, dl_device=(1, 0))
    assert x.__dlpack_device__() == (2, x.device)
    assert "dltensor_versioned" in repr(x.__dlpack__(stream=-1, max_version=(1, 1)))


def test_allocation_on_foreign_and_bridge_streams(rng):
    torch = _torch()
    side = torch.cuda.Stream()
    x = bridge.empty(1001, "float32", stream=side)
    assert x.owner.stream == side.cuda_stream and x.device == side.device.index
    lo, hi = x.extent       # the bytes came into being on `side`: the memory log says so, by address
    assert (lo, hi, side.cuda_stream, []) in bridge._native.memory_log_spans()
    from bridge.stream import Stream
    s = Stream()
    data = rng.standard_normal(999).astype(np.float32)
    y = bridge.from_host(data, stream=s)
    assert y.owner.stream == s.handle and y._stream is None   # no per-object producer stream
    np.testing.assert_array_equal(y.to_host(stream=s), data)
    with pytest.raises(ValueError, match=f"belongs to device {s.device}"):
        bridge.empty(3, stream=s, device=s.device + 1)


def test_from_pinned_host_memory(rng):
    torch = _torch()
    pinned = torch.empty(4099, dtype=torch.float64).pin_memory()
    data = rng.standard_normal(4099)
    pinned.numpy()[:] = data
    x = bridge.from_host(pinned.numpy())
    del pinned
    np.testing.assert_array_equal(x.to_host(), data)
