"""CUDA Array Interface producers (v2 and v3) are read by the intake path: strides, read-only data,
producer streams, and the malformed cases (stream 0, masks, unknown typestr) refused by name.

The dicts point at host memory: intake only reads the description, it never dereferences."""
from __future__ import annotations

import numpy as np
import pytest

from bridge import _native
from bridge.errors import DTypeError


class CAIProducer:
    def __init__(self, iface, keep=None):
        self.__cuda_array_interface__ = iface
        self.keep = keep


def cai(a: np.ndarray, version=3, strides="auto", readonly=False, **extra):
    d = {"shape": a.shape, "typestr": a.dtype.str, "data": (a.ctypes.data, readonly), "version": version}
    if strides == "auto":
        d["strides"] = None if a.flags.c_contiguous else a.strides
    elif strides is not None:
        d["strides"] = strides
    d.update(extra)
    return CAIProducer(d, a)


@pytest.mark.parametrize("version", [2, 3])
def test_contiguous_without_strides(version, rng):
    a = rng.standard_normal((6, 7)).astype(np.float32)
    prod = cai(a, version=version, strides=None)
    v = _native.intake_view(prod)
    assert (v.ptr, v.shape, v.strides, v.dtype_name) == (a.ctypes.data, (6, 7), (28, 4), "float32")
    assert (v.device_type, v.readonly, v._stream) == (2, False, None)
    assert v.device_id == -1  # CAI names no device; bridge.asarray asks the driver
    assert v.owner is prod


def test_explicit_byte_strides_negative_and_zero(rng):
    a = rng.standard_normal((5, 8)).astype(np.float64)
    rev = a[::-1, ::2]
    v = _native.intake_view(cai(rev))
    assert v.strides == rev.strides and v.ptr == rev.ctypes.data and v.shape == (5, 4)
    v0 = _native.intake_view(cai(a, strides=(0, 8)))
    assert v0.strides == (0, 8)


def test_readonly_and_stream_are_reported(rng):
    a = rng.standard_normal(9).astype(np.float16)
    v = _native.intake_view(cai(a, readonly=True, stream=0x5AB0C0))
    assert v.readonly and v._stream == 0x5AB0C0 and v.dtype_name == "float16"
    assert _native.intake_view(cai(a, stream=1))._stream == 1
    assert _native.intake_view(cai(a, stream=None))._stream is None
    assert _native.intake_view(cai(a, version=2, stream=7))._stream is None  # v2 has no stream


def test_stream_zero_is_refused(rng):
    a = rng.standard_normal(3).astype(np.float32)
    with pytest.raises(ValueError, match=r"\['stream'\] is 0"):
        _native.intake_view(cai(a, stream=0))


def test_mask_is_refused(rng):
    a = rng.standard_normal(3).astype(np.float32)
    with pytest.raises(ValueError, match="mask"):
        _native.intake_view(cai(a, mask=cai(np.ones(3, dtype=bool))))


@pytest.mark.parametrize("typestr", ["<M8", ">f4", "<f16", "|V2"])
def test_unsupported_typestr_names_it(typestr, rng):
    a = rng.standard_normal(3).astype(np.float32)
    prod = cai(a)
    prod.__cuda_array_interface__["typestr"] = typestr
    with pytest.raises(DTypeError, match=f"typestr '{typestr}'"):
        _native.intake_view(prod)


@pytest.mark.parametrize("key", ["shape", "typestr", "data", "version"])
def test_missing_required_key_is_named(key, rng):
    prod = cai(rng.standard_normal(3).astype(np.float32))
    del prod.__cuda_array_interface__[key]
    with pytest.raises(ValueError, match=f"required key '{key}'"):
        _native.intake_view(prod)


def test_shape_and_strides_length_mismatch(rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(ValueError, match="differ in length"):
        _native.intake_view(cai(a, strides=(4,)))


@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64", "float16", "float32", "float64", "complex64",
                                   "complex128"])
def test_every_typestr(dtype):
    a = np.zeros(4, dtype=dtype)
    v = _native.intake_view(cai(a))
    assert v.dtype_name == np.dtype(dtype).name and v.itemsize == a.itemsize
