"""The native Launcher/Dispatcher validate before touching the driver: testable without a GPU.

Device arrays are stood in for by CUDA-Array-Interface objects (never dereferenced: every launch here
is refused, or stops at the missing driver after validation).
"""
from __future__ import annotations

import ctypes
import json

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import (ArgumentCountError, ArgumentKindError, CudaError, DTypeError, LaunchContractError,
                           NoDeviceError, ShapeRelationError)

from runtime_helpers import vecadd_contract

needs_no_gpu = pytest.mark.skipif(bridge.gpu_available(), reason="checks the behaviour without a GPU")


class FakeDeviceArray:
    """A CAI v3 producer (data pointer never dereferenced)."""

    def __init__(self, n: int, ptr: int, typestr: str = "<f4"):
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": typestr, "data": (ptr, False),
                                         "strides": None}


def make_launcher(contract_json: str | None = None):
    limits = _native.DeviceLimits()
    limits.device_id = -1      # CAI views report device -1 without a driver: make them "this" device
    limits.cc = 90
    return _native.Launcher(0, _native.Contract(contract_json or vecadd_contract()), limits, _native.FuncAttrs(), 0)


def args3(n: int = 37):
    return FakeDeviceArray(n, 1 << 20), FakeDeviceArray(n, 1 << 22), FakeDeviceArray(n, 1 << 24)


def test_argument_count_is_checked_first():
    launcher = make_launcher()
    with pytest.raises(ArgumentCountError, match=r"vecadd: expected 4 arguments \(a, b, out, n\), got 2"):
        launcher(*args3()[:2])


def test_dtype_error_names_the_argument():
    a, b, _ = args3()
    with pytest.raises(DTypeError, match=r"vecadd: argument 'out'.*float32.*float64"):
        make_launcher()(a, b, FakeDeviceArray(37, 1 << 24, "<f8"), 37)


def test_relation_error_names_the_relation():
    with pytest.raises(ShapeRelationError, match=r"n == len\(out\)"):
        make_launcher()(*args3(), 36)


def test_plan_cache_does_not_confuse_scalars_and_arrays():
    launcher = make_launcher()
    a, b, out = args3()
    for _ in range(3):
        with pytest.raises(ArgumentKindError, match=r"argument 'n'"):
            launcher(a, b, out, out)
        with pytest.raises(ArgumentKindError, match=r"argument 'a'"):
            launcher(1.5, b, out, 37)
    with pytest.raises(ArgumentKindError, match=r"argument 'a'"):
        launcher(None, b, out, 37)


@needs_no_gpu
def test_valid_launch_stops_at_the_missing_driver_after_validation():
    launcher = make_launcher()
    with pytest.raises(NoDeviceError, match="no usable CUDA device"):
        launcher(*args3(), 37)
    with pytest.raises(NoDeviceError):
        launcher[1, 64](*args3(), 37)
    with pytest.raises(NoDeviceError):
        launcher.launch(args3() + (37,), None, 128, None, None)


@pytest.mark.parametrize("grid,block,message", [
    ("x", 32, "grid must be an int or a tuple"), (1, 32.0, "block must be an int or a tuple"),
    ((1, 1, 1, 1), 32, "grid must have 1 to 3 dimensions"), (1, (), "block must have 1 to 3 dimensions")])
def test_bad_configuration_types(grid, block, message):
    with pytest.raises(TypeError, match=message):
        make_launcher()(*args3(), 37, grid=grid, block=block)


def test_bad_subscript_is_a_type_error():
    with pytest.raises(TypeError, match=r"kernel\[grid, block\]"):
        make_launcher()[1]
    with pytest.raises(ValueError, match="shared_mem must be >= 0"):
        make_launcher()(*args3(), 37, shared_mem=-1)


def test_block_size_checked_against_contract():
    with pytest.raises(LaunchContractError, match="512"):
        make_launcher()(*args3(), 37, block=1024)


def test_dispatcher_specialises_once_per_signature():
    calls = []

    def miss(args):
        calls.append(tuple(type(a).__name__ for a in args))
        return make_launcher()

    d = _native.Dispatcher(miss)
    f32 = args3()
    f64 = (FakeDeviceArray(37, 1 << 20, "<f8"),) + f32[1:]
    for args in (f32, f32, f64, f32, f64):
        with pytest.raises((NoDeviceError, DTypeError, CudaError)):   # no driver / f64 refused / fake handle 0
            d(*args, 37)
    assert len(calls) == 2 and len(d) == 2
    d.clear()
    assert len(d) == 0


def test_unsafe_launch_refuses_ambiguous_python_scalars():
    k = object.__new__(bridge.Kernel)
    k.name = "raw"
    with pytest.raises(TypeError, match=r"argument #2 is a Python int.*np.int32\(3\)"):
        bridge.unsafe_launch(k, 1, 32, FakeDeviceArray(3, 1 << 20), 3)
    with pytest.raises(TypeError, match=r"argument #1 is a Python float"):
        bridge.unsafe_launch(k, 1, 32, 2.5)
    with pytest.raises(TypeError, match="expected a bridge.Kernel"):
        bridge.unsafe_launch("vecadd", 1, 32)


def test_unsafe_launch_scalar_specs_follow_numpy_and_ctypes_types():
    from bridge.kernel import _loose_arg
    assert _loose_arg(0, np.int32(5))[0]["dtype"] == "i32"
    assert _loose_arg(0, np.float16(5))[0]["dtype"] == "f16"
    spec, value = _loose_arg(0, ctypes.c_uint64(7))
    assert spec["dtype"] == "u64" and value == 7 and isinstance(value, np.uint64)
    assert _loose_arg(1, FakeDeviceArray(3, 64))[0] == {
        "name": "arg1", "kind": "array", "dtype": "any", "ndim": -1, "layout": "any", "align": 1,
        "access": "read", "abi": "pointer"}
    # the loose contract parses with the one validator
    _native.Contract(json.dumps({"version": 1, "kernel": "raw", "domain": 3, "dynamic_smem": {"max": 1 << 30},
                                 "args": [_loose_arg(0, FakeDeviceArray(3, 64))[0],
                                          _loose_arg(1, np.int32(1))[0]]}))


def test_temporary_refcount_is_calibrated():
    o = object()
    assert _native.refcount_probe(object())[0] < _native.refcount_probe(o)[0]
    assert _native.pending_keepalive_count() == 0
