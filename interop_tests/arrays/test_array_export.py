"""bridge.Array exports itself through DLPack without copying (NumPy shares the memory), with the
versioned/legacy capsule chosen by max_version, read-only and copy rules enforced, and the array kept
alive by the capsule until the consumer's deleter runs."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import bridge


def test_numpy_round_trip_shares_memory(rng):
    a = rng.standard_normal((12, 7)).astype(np.float32)
    b = np.from_dlpack(bridge.asarray(a))
    assert b.ctypes.data == a.ctypes.data and b.strides == a.strides
    a[3, 4] = 123.5
    assert b[3, 4] == np.float32(123.5)


def test_strided_view_round_trip(rng):
    a = rng.standard_normal((9, 10))
    view = bridge.asarray(a)[7:1:-2, ::3]
    b = np.from_dlpack(view)
    np.testing.assert_array_equal(b, a[7:1:-2, ::3])
    assert b.ctypes.data == a[7:1:-2, ::3].ctypes.data


def test_capsule_kind_follows_max_version(rng):
    x = bridge.asarray(rng.standard_normal(5))
    assert "dltensor_versioned" in repr(x.__dlpack__(max_version=(1, 0)))
    legacy = repr(x.__dlpack__())
    assert "dltensor" in legacy and "versioned" not in legacy
    assert "versioned" not in repr(x.__dlpack__(max_version=(0, 8)))
    assert x.__dlpack_device__() == (1, 0)


def test_readonly_needs_versioned_consumer(rng):
    a = rng.standard_normal(6)
    a.flags.writeable = False
    x = bridge.asarray(a)
    assert x.readonly
    with pytest.raises(BufferError, match="read-only"):
        x.__dlpack__()
    b = np.from_dlpack(x)
    assert not b.flags.writeable and b.ctypes.data == a.ctypes.data


def test_copy_and_foreign_device_are_refused(rng):
    x = bridge.asarray(rng.standard_normal(4))
    with pytest.raises(BufferError, match="never copies"):
        x.__dlpack__(max_version=(1, 1), copy=True)
    with pytest.raises(BufferError, match="dl_device"):
        x.__dlpack__(max_version=(1, 1), dl_device=(2, 0))
    with pytest.raises(BufferError, match="stream must be None"):
        x.__dlpack__(stream=1)
    x.__dlpack__(max_version=(1, 1), copy=False, dl_device=(1, 0))


def test_host_array_has_no_cuda_array_interface(rng):
    x = bridge.asarray(rng.standard_normal(4))
    assert not hasattr(x, "__cuda_array_interface__")


def test_capsule_keeps_array_alive_until_consumer_deleter(rng):
    a = rng.standard_normal(31)
    expect = a.copy()
    x = bridge.asarray(a)
    alive = weakref.ref(x)
    b = np.from_dlpack(x)
    del x, a
    gc.collect()
    assert alive() is not None, "the exported array died while NumPy still used it"
    np.testing.assert_array_equal(b, expect)
    del b
    gc.collect()
    assert alive() is None, "the consumer's deleter did not release the exported array"


def test_unconsumed_capsule_releases_array(rng):
    x = bridge.asarray(rng.standard_normal(3))
    alive = weakref.ref(x)
    cap = x.__dlpack__(max_version=(1, 1))
    del x
    gc.collect()
    assert alive() is not None
    del cap
    gc.collect()
    assert alive() is None, "an unconsumed capsule leaked its array"
