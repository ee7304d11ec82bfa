"""The pybind11 entry-point example (bridge._native.cpp_example_saxpy): arrays through the runtime's
intake, contract from the fatbin checked by kernelbridge/contract.hpp, launch on the current stream."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _native


def test_entry_point_is_registered():
    assert callable(_native.cpp_example_saxpy)
    assert "contract.hpp" in _native.cpp_example_saxpy.__doc__


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_cpp_entry_saxpy_matches_numpy(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    a = float(rng.uniform(-3, 3))
    dx, dy = bridge.from_host(x), bridge.from_host(y)
    _native.cpp_example_saxpy(a, dx, dy)
    np.testing.assert_allclose(dy.to_host(), a * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_cpp_entry_runs_on_the_current_stream(rng):
    n = 4097
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    s = bridge.Stream()
    with bridge.use_stream(s):
        dx, dy = bridge.from_host(x), bridge.from_host(y)
        _native.cpp_example_saxpy(2.0, dx, dy)
        _native.cpp_example_saxpy(2.0, dx, dy)
    s.synchronize()
    np.testing.assert_allclose(dy.to_host(), 4.0 * x.astype(np.float64) + y, rtol=1e-6, atol=2e-6)


@pytest.mark.gpu
def test_cpp_entry_refuses_mismatched_lengths_output_untouched(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    poison = (rng.standard_normal(1001) * 1e6 + 12345.0).astype(np.float32)
    dx, dy = bridge.from_host(x), bridge.from_host(poison)
    with pytest.raises(bridge.errors.ShapeRelationError) as info:
        _native.cpp_example_saxpy(2.0, dx, dy)
    assert "saxpy" in str(info.value) and "len(x)" in str(info.value)
    bridge.synchronize()
    np.testing.assert_array_equal(dy.to_host(), poison)


@pytest.mark.gpu
def test_cpp_entry_refuses_wrong_dtype_naming_argument(rng):
    x = rng.standard_normal(100)                 # float64
    poison = (rng.standard_normal(100) * 1e6).astype(np.float32)
    dx, dy = bridge.from_host(x), bridge.from_host(poison)
    with pytest.raises(bridge.errors.DTypeError) as info:
        _native.cpp_example_saxpy(2.0, dx, dy)
    assert info.value.arg_name == "x"
    np.testing.assert_array_equal(dy.to_host(), poison)


@pytest.mark.gpu
def test_cpp_entry_refuses_a_non_array(rng):
    poison = (rng.standard_normal(10) * 1e6).astype(np.float32)
    dy = bridge.from_host(poison)
    with pytest.raises(bridge.errors.ArgumentKindError) as info:
        _native.cpp_example_saxpy(2.0, 3.0, dy)
    assert info.value.arg_name == "x"
    np.testing.assert_array_equal(dy.to_host(), poison)
