"""The one intake path reads DLPack producers zero-copy: versioned and legacy capsules, offsets, strides,
dtypes, read-only flags, ownership hand-over (capsule renamed, deleter run when the view dies)."""
from __future__ import annotations

import ctypes
import gc
import weakref

import ml_dtypes
import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import DTypeError


class VersionedProducer:
    """Forwards to a NumPy array and remembers the capsule and the keywords it was asked with."""

    def __init__(self, arr, device=(1, 0)):
        self.arr, self.device, self.calls, self.capsules = arr, device, [], []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kwargs):
        self.calls.append(kwargs)
        cap = self.arr.__dlpack__(max_version=kwargs.get("max_version"))
        self.capsules.append(cap)
        return cap


class LegacyProducer(VersionedProducer):
    """A pre-1.0 producer: `max_version` is an unexpected keyword (TypeError), like old libraries."""

    def __dlpack__(self, stream=None):
        self.calls.append({"stream": stream})
        cap = self.arr.__dlpack__()
        self.capsules.append(cap)
        return cap


def host_values(view) -> np.ndarray:
    return bridge.Array(view).to_host()


def test_numpy_versioned_capsule_is_viewed_in_place_and_renamed(rng):
    a = rng.standard_normal((37, 5)).astype(np.float32)
    prod = VersionedProducer(a)
    v = _native.intake_view(prod)
    assert prod.calls == [{"max_version": (1, 1)}]  # CPU producer: no stream keyword
    assert "used_dltensor_versioned" in repr(prod.capsules[0])
    assert (v.ptr, v.shape, v.strides) == (a.ctypes.data, a.shape, a.strides)
    assert (v.dtype_name, v.device_type, v.device_id, v.readonly) == ("float32", 1, 0, False)
    np.testing.assert_array_equal(host_values(v), a)


def test_legacy_producer_is_retried_without_max_version(rng):
    a = rng.integers(-1000, 1000, size=(13, 3), dtype=np.int16)
    prod = LegacyProducer(a)
    v = _native.intake_view(prod)
    assert prod.calls == [{"stream": None}]  # only the retry reached the legacy signature
    assert "used_dltensor" in repr(prod.capsules[0]) and "versioned" not in repr(prod.capsules[0])
    assert v.ptr == a.ctypes.data and v.dtype_name == "int16"
    np.testing.assert_array_equal(host_values(v), a)


def test_numpy_arrays_directly_and_readonly_flag(rng):
    a = rng.standard_normal(11)
    assert not _native.intake_view(a).readonly
    a.flags.writeable = False
    v = _native.intake_view(a)
    assert v.readonly and v.ptr == a.ctypes.data


def test_byte_offset_of_a_slice_is_applied(rng):
    big = rng.standard_normal((19, 23)).astype(np.float64)
    part = big[3:17:2, 5:]
    v = _native.intake_view(part)
    assert v.ptr == big.ctypes.data + 3 * big.strides[0] + 5 * 8
    assert v.strides == part.strides and v.shape == part.shape
    np.testing.assert_array_equal(host_values(v), part)


def test_negative_and_zero_strides(rng):
    a = rng.standard_normal((7, 9)).astype(np.float32)
    rev = a[::-1, ::-3]
    v = _native.intake_view(rev)
    assert v.strides == rev.strides and v.strides[0] < 0 and v.ptr == rev.ctypes.data
    np.testing.assert_array_equal(host_values(v), rev)
    row = rng.standard_normal(9).astype(np.float32)
    bc = np.broadcast_to(row, (5, 9))
    w = _native.intake_view(bc)
    assert w.strides == (0, 4) and w.shape == (5, 9)
    np.testing.assert_array_equal(host_values(w), bc)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 5, 2)])
def test_zero_size_arrays(shape):
    a = np.empty(shape, dtype=np.float32)
    v = _native.intake_view(a)
    assert v.shape == shape and v.size == 0 and v.nbytes == 0
    assert bridge.Array(v).to_host().shape == shape


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "complex64", "complex128"])
def test_numpy_dtypes(dtype, rng):
    a = (rng.standard_normal(17) * 50).astype(dtype)
    v = _native.intake_view(a)
    assert v.dtype_name == np.dtype(dtype).name and v.itemsize == a.itemsize
    np.testing.assert_array_equal(host_values(v), a)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
                                  "float8_e8m0fnu", "float4_e2m1fn"])
def test_extended_float_dtypes_round_trip_through_dlpack(name, rng):
    """ml_dtypes arrays (host views by pointer) exported by bridge and taken back through DLPack."""
    a = rng.uniform(0.5, 4, size=23).astype(getattr(ml_dtypes, name))
    src = bridge.asarray(a)
    assert src.ptr == a.ctypes.data and src.dtype == a.dtype
    prod = VersionedProducer(None)
    prod.__dlpack__ = lambda **kw: src.__dlpack__(**kw)
    v = _native.intake_view(prod)
    assert v.ptr == a.ctypes.data and v.dtype_name == src.dtype_name
    np.testing.assert_array_equal(host_values(v).view(np.uint8), a.view(np.uint8))


def test_packed_subbyte_legacy_export_is_refused(rng):
    a = bridge.asarray(rng.uniform(0.5, 4, size=8).astype(ml_dtypes.float4_e2m1fn))
    with pytest.raises(BufferError, match="max_version"):
        a.__dlpack__()


def _tensor_address(capsule) -> int:
    """Address of the DLTensor inside a 'dltensor_versioned' capsule. Layout of dlpack.h v1.1:
    version 8 B, manager_ctx 8, deleter 8, flags 8, then DLTensor {data 8, device 8, ndim 4, dtype 4
    (code u8, bits u8, lanes u16), shape* 8, strides* 8, byte_offset u64}."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, b"dltensor_versioned") + 32


def _poke_dtype(capsule, lanes=None, code=None):
    """Edit the dtype of a capsule in place."""
    base = _tensor_address(capsule) + 20
    if code is not None:
        ctypes.c_uint8.from_address(base).value = code
    if lanes is not None:
        ctypes.c_uint16.from_address(base + 2).value = lanes


def _capsule_producer(cap):
    prod = VersionedProducer(None)
    prod.__dlpack__ = lambda **kw: cap
    return prod


def test_nonzero_byte_offset_field_is_applied(rng):
    """A producer that keeps `data` at the allocation start and says where the array begins."""
    a = rng.standard_normal(20)
    cap = a.__dlpack__(max_version=(1, 1))
    t = _tensor_address(cap)
    ctypes.c_uint64.from_address(t + 40).value = 5 * 8                     # byte_offset
    shape = ctypes.c_void_p.from_address(t + 24).value
    ctypes.c_int64.from_address(shape).value = 15                          # shape[0]
    v = _native.intake_view(_capsule_producer(cap))
    assert v.ptr == a.ctypes.data + 40 and v.shape == (15,)
    np.testing.assert_array_equal(host_values(v), a[5:])


def test_null_strides_mean_c_contiguous(rng):
    a = rng.standard_normal((6, 5)).astype(np.float32)
    cap = a.__dlpack__(max_version=(1, 1))
    ctypes.c_void_p.from_address(_tensor_address(cap) + 32).value = None   # strides = NULL
    v = _native.intake_view(_capsule_producer(cap))
    assert v.strides == (20, 4)
    np.testing.assert_array_equal(host_values(v), a)


@pytest.mark.parametrize("lanes,code,text", [(4, None, "code=2, bits=32, lanes=4"),
                                             (None, 9, "code=9, bits=8, lanes=1")])
def test_unsupported_dlpack_dtype_names_what_was_given(lanes, code, text, rng):
    a = rng.standard_normal(8).astype(np.float32 if code is None else np.uint8)
    cap = a.__dlpack__(max_version=(1, 1))
    _poke_dtype(cap, lanes=lanes, code=code)
    prod = VersionedProducer(None)
    prod.__dlpack__ = lambda **kw: cap
    with pytest.raises(DTypeError, match=text.replace("(", r"\(")):
        _native.intake_view(prod)
    assert "used_dltensor_versioned" in repr(cap)  # ownership was taken (and released) all the same


def test_view_keeps_producer_alive_and_deleter_runs_after(rng):
    a = rng.standard_normal(29)
    expect = a.copy()
    alive = weakref.ref(a)
    v = _native.intake_view(a)
    del a
    gc.collect()
    assert alive() is not None, "the producer died while a view of it lived"
    np.testing.assert_array_equal(host_values(v), expect)
    del v
    gc.collect()
    assert alive() is None, "the DLPack deleter did not release the producer after the view died"


def test_consumer_stream_is_passed_to_cuda_producers():
    """A CUDA producer gets stream=<consumer> (0 is sent as 1, the legacy default; -1 = no sync)."""
    host = np.arange(6, dtype=np.float32)
    for consumer, sent in [(-1, -1), (0, 1), (2, 2), (0x7F001234, 0x7F001234)]:
        prod = VersionedProducer(host, device=(2, 0))
        v = _native.intake_view(prod, consumer)
        assert prod.calls == [{"stream": sent, "max_version": (1, 1)}]
        assert v.ptr == host.ctypes.data


def test_consumed_capsule_and_non_capsule_are_refused(rng):
    a = rng.standard_normal(4)
    cap = a.__dlpack__(max_version=(1, 1))
    prod = VersionedProducer(None)
    prod.__dlpack__ = lambda **kw: cap
    _native.intake_view(prod)
    with pytest.raises(TypeError, match="used_dltensor_versioned.*already consumed"):
        _native.intake_view(prod)
    prod.__dlpack__ = lambda **kw: "not a capsule"
    with pytest.raises(TypeError, match="returned a str"):
        _native.intake_view(prod)


def test_producer_errors_propagate():
    class Refuses:
        def __dlpack__(self, **kw):
            raise BufferError("cannot export this one")
    with pytest.raises(BufferError, match="cannot export this one"):
        _native.intake_view(Refuses())


@pytest.mark.parametrize("value", [3, 2.5, True, None, 1j, "text", object()])
def test_non_arrays_are_not_array_like(value):
    with pytest.raises(TypeError, match="expected an array"):
        _native.intake_view(value)
