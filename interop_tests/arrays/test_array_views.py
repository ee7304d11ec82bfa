"""bridge.Array slicing, reshape and transpose are views (same memory, base kept alive) that agree with
NumPy's own views of the same data."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import bridge


@pytest.fixture
def host(rng):
    a = rng.standard_normal((11, 13, 3)).astype(np.float32)
    return a, bridge.asarray(a)


@pytest.mark.parametrize("index", [
    np.s_[2:10], np.s_[::2], np.s_[1], np.s_[-1], np.s_[::-3, 4], np.s_[..., 1], np.s_[3, ..., ::-1],
    np.s_[5:5], np.s_[1:9:4, 2:11:3, 1:], np.s_[-4:, -1, :], np.s_[()],
])
def test_basic_indexing_matches_numpy(host, index):
    a, x = host
    view, expect = x[index], a[index]
    assert view.shape == expect.shape and view.strides == expect.strides
    if expect.size:
        assert view.ptr == expect.ctypes.data
    np.testing.assert_array_equal(view.to_host(), expect)


def test_properties(host):
    a, x = host
    assert (x.shape, x.strides, x.ndim, x.size, x.nbytes, x.itemsize) == (
        a.shape, a.strides, a.ndim, a.size, a.nbytes, a.itemsize)
    assert x.dtype == np.float32 and x.device == "cpu" and not x.readonly and len(x) == 11
    assert x.ptr == a.ctypes.data and x.is_c_contiguous
    assert repr(x).startswith("bridge.Array(shape=(11, 13, 3), dtype=float32, device='cpu'")


def test_index_errors(host):
    _, x = host
    with pytest.raises(IndexError, match="out of bounds for axis 1 with size 13"):
        x[0, 13]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(TypeError, match="basic indexing only"):
        x[[0, 1]]
    with pytest.raises(TypeError, match="0-d"):
        len(x[0, 0, 0])


def test_reshape_and_transpose(host):
    a, x = host
    np.testing.assert_array_equal(x.reshape(13, -1).to_host(), a.reshape(13, -1))
    np.testing.assert_array_equal(x.reshape((429,)).to_host(), a.ravel())
    assert x.reshape(-1).ptr == x.ptr
    np.testing.assert_array_equal(x.T.to_host(), a.T)
    np.testing.assert_array_equal(x.transpose(1, 0, 2).to_host(), a.transpose(1, 0, 2))
    assert x.T.strides == a.T.strides
    with pytest.raises(ValueError, match="C-contiguous"):
        x.T.reshape(-1)
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(10, -1)
    with pytest.raises(ValueError, match="permutation"):
        x.transpose(0, 0, 1)


def test_view_keeps_base_alive(rng):
    a = rng.standard_normal(40)
    expect = a[5:30:5].copy()
    x = bridge.asarray(a)
    alive = weakref.ref(x)
    v = x[5:30:5]
    del x, a
    gc.collect()
    assert alive() is not None and v.owner is alive()
    np.testing.assert_array_equal(v.to_host(), expect)


def test_asarray_is_zero_copy_and_idempotent(rng):
    a = rng.standard_normal(8)
    x = bridge.asarray(a)
    assert bridge.asarray(x) is x
    y = bridge.Array(x)
    assert y.ptr == x.ptr and y.owner is x
    with pytest.raises(TypeError, match="expected an array"):
        bridge.asarray([1.0, 2.0])
