"""A malformed launch configuration is refused with the contract's classes, naming the kernel.

grid / block / shared_mem of `Launcher.__call__`, `.launch`, `.configure`, `kernel[...]`,
`.validate_only`, `Dispatcher` and `_native.validate` all go through one parser: BlockSizeError,
GridSizeError, SharedMemoryError (never TypeError/ValueError/SystemError of the C++ layer). A wrong type
or number of dimensions is also a TypeError (BlockSizeTypeError / GridSizeTypeError), as Python code
expects. Nothing is launched: these run without a GPU and never reach the driver.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import BlockSizeTypeError, GridSizeTypeError

from contract_support import arr, attrs, contract, desc, limits, run

CONTRACT = json.dumps({"kernel": "saxpy_k", "args": [
    {"name": "x", "kind": "array", "dtype": "f32", "ndim": 1},
    {"name": "y", "kind": "array", "dtype": "f32", "ndim": 1, "access": "write"}],
    "grid_from": {"arg": "y"}, "dynamic_smem": {"max": 1024}})


class RaisingIndex:
    """An int-like whose __index__ raises (used to give SystemError)."""

    def __index__(self):
        raise RuntimeError("no index today")


def host_launcher():
    lim = _native.DeviceLimits()
    lim.host_memory, lim.cc, lim.max_threads_per_block = True, 90, 1024
    lim.max_block, lim.max_grid = (1024, 1024, 64), (2147483647, 65535, 65535)
    lim.smem_per_block = lim.smem_per_block_optin = 49152
    fn = _native.FuncAttrs()
    fn.max_threads_per_block = 1024
    return _native.Launcher(0, _native.Contract(CONTRACT), lim, fn, -1)


def host_args():
    return (np.zeros(64, np.float32), np.zeros(64, np.float32))


BAD = [
    # (keyword, value, class, also a TypeError, message after "saxpy_k: ")
    ("block", (64, 1, 1, 1), BlockSizeTypeError, True, "block must have 1 to 3 dimensions, got 4"),
    ("block", (), BlockSizeTypeError, True, "block must have 1 to 3 dimensions, got 0"),
    ("block", 64.0, BlockSizeTypeError, True, "block must be an int or a tuple of 1 to 3 ints, got float 64.0"),
    ("block", (64, "1"), BlockSizeTypeError, True,
     "block must be an int or a tuple of 1 to 3 ints, got block[1] = str '1'"),
    ("block", RaisingIndex(), bridge.BlockSizeError, False,
     "block: RaisingIndex.__index__() failed (RuntimeError: no index today)"),
    ("grid", (1, 1, 1, 1), GridSizeTypeError, True, "grid must have 1 to 3 dimensions, got 4"),
    ("grid", 2.5, GridSizeTypeError, True, "grid must be an int or a tuple of 1 to 3 ints, got float 2.5"),
    ("grid", [1, RaisingIndex()], bridge.GridSizeError, False,
     "grid[1]: RaisingIndex.__index__() failed (RuntimeError: no index today)"),
    ("shared_mem", -1, bridge.SharedMemoryError, False, "shared_mem must be >= 0 bytes, got -1"),
    ("shared_mem", 1.5, bridge.SharedMemoryError, False, "shared_mem must be an int (bytes), got float 1.5"),
    ("shared_mem", "64", bridge.SharedMemoryError, False, "shared_mem must be an int (bytes), got str '64'"),
    ("shared_mem", RaisingIndex(), bridge.SharedMemoryError, False,
     "shared_mem: RaisingIndex.__index__() failed (RuntimeError: no index today)"),
]
IDS = [f"{k}={v!r}"[:40] for k, v, *_ in BAD]


def check(exc_info, cls, is_type_error, text):
    e = exc_info.value
    assert type(e) is cls
    assert isinstance(e, bridge.LaunchContractError) and isinstance(e, ValueError)
    assert isinstance(e, TypeError) == is_type_error
    assert str(e) == "saxpy_k: " + text
    assert e.kernel == "saxpy_k"
    if "__index__() failed" in text:
        assert isinstance(e.__cause__, RuntimeError)


@pytest.mark.parametrize("key,value,cls,is_type_error,text", BAD, ids=IDS)
def test_validate_only_refuses_bad_configuration_with_the_contract_class(key, value, cls, is_type_error, text):
    with pytest.raises(cls) as info:
        host_launcher().validate_only(host_args(), **{key: value})
    check(info, cls, is_type_error, text)


@pytest.mark.parametrize("key,value,cls,is_type_error,text", BAD, ids=IDS)
def test_call_launch_and_configure_refuse_before_any_argument_or_driver(key, value, cls, is_type_error, text):
    launcher = host_launcher()
    with pytest.raises(cls) as info:
        launcher(*host_args(), **{key: value})
    check(info, cls, is_type_error, text)
    kw = {"smem" if key == "shared_mem" else key: value}
    with pytest.raises(cls) as info:
        launcher.launch(host_args(), **kw)
    check(info, cls, is_type_error, text)
    cfg = {"grid": 1, "block": 32, **{key: value}}
    with pytest.raises(cls) as info:
        launcher.configure(cfg["grid"], cfg["block"], None, cfg.get("shared_mem"))
    check(info, cls, is_type_error, text)


@pytest.mark.parametrize("key,value,cls,is_type_error,text", [b for b in BAD if b[0] != "shared_mem"],
                         ids=[i for i, b in zip(IDS, BAD) if b[0] != "shared_mem"])
def test_subscript_configuration_is_parsed_the_same_way(key, value, cls, is_type_error, text):
    item = (value, 32) if key == "grid" else (1, value)
    with pytest.raises(cls) as info:
        host_launcher()[item]
    check(info, cls, is_type_error, text)


def test_subscript_shared_memory_is_parsed_the_same_way():
    with pytest.raises(bridge.SharedMemoryError, match=r"^saxpy_k: shared_mem must be >= 0 bytes, got -5$"):
        host_launcher()[1, 32, None, -5]


def test_dispatcher_names_the_kernel_of_its_miss_callback_owner():
    class DslLikeKernel:
        __name__ = "my_dsl_kernel"

        def miss(self, args):
            raise AssertionError("a bad configuration must be refused before any specialisation")

    d = _native.Dispatcher(DslLikeKernel().miss)
    with pytest.raises(BlockSizeTypeError, match=r"^my_dsl_kernel: block must have 1 to 3 dimensions, got 4$"):
        d(*host_args(), block=(1, 1, 1, 1))
    with pytest.raises(bridge.SharedMemoryError, match=r"^my_dsl_kernel: shared_mem must be >= 0 bytes, got -1$"):
        d(*host_args(), shared_mem=-1)
    with pytest.raises(GridSizeTypeError, match=r"^my_dsl_kernel: grid must be an int"):
        d[1.0, 32]


def test_values_out_of_range_reach_the_validator_which_reports_the_limit():
    launcher = host_launcher()
    with pytest.raises(bridge.BlockSizeError, match=r"at most 1024 threads \(device limit\)"):
        launcher.validate_only(host_args(), block=2**80)
    with pytest.raises(bridge.SharedMemoryError, match="at most 1024 bytes"):
        launcher.validate_only(host_args(), shared_mem=2**70)
    with pytest.raises(bridge.GridSizeError, match="every dimension >= 1"):
        launcher.validate_only(host_args(), grid=-(2**70))


def test_numpy_integers_are_accepted_everywhere():
    g, b, smem, skip = host_launcher().validate_only(host_args(), grid=np.int64(2), block=(np.int32(32),),
                                                     shared_mem=np.uint16(512))
    assert (g, b, smem, skip) == ((2, 1, 1), (32, 1, 1), 512, False)


def test_native_validate_uses_the_same_parser():
    c = contract([arr("a")], kernel="v")
    with pytest.raises(BlockSizeTypeError, match=r"^v: block must be an int or a tuple of 1 to 3 ints, got float 3.0$"):
        run(c, [desc((4,))], grid=1, block=3.0)
    with pytest.raises(bridge.GridSizeError, match=r"^v: grid\[0\]: RaisingIndex.__index__\(\) failed"):
        run(c, [desc((4,))], grid=(RaisingIndex(),), block=32)
    with pytest.raises(bridge.SharedMemoryError, match=r"^v: shared_mem must be an int \(bytes\), got str 'x'$"):
        _native.validate(c, [desc((4,))], grid=1, block=32, smem="x", limits=limits(), attrs=attrs())
