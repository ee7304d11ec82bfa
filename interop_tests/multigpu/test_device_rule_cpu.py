"""Which device a launch runs on, decided in C++ before anything is launched, testable without a GPU:
made-up arrays of cuda:0 and cuda:1 (bridge.Array views never dereferenced) and driver-less Launchers
of either device. Every launch here stops at a validation error after the device was chosen (so the
tests also run on GPU machines without launching anything), except where marked driver-less.

The rule (docs/architecture.md "Devices"): the arrays' device (all must agree), else the stream's,
else the current device; peer_access=True lets arrays of other devices in, and then the stream's
device comes first.
"""
from __future__ import annotations

import pytest

import bridge
from bridge import _native
from bridge.errors import DeviceMismatchError, DTypeError, ShapeRelationError

from multigpu_helpers import arrays_on, fake_array, launcher_on, limits_of, scalar_contract, vecadd_contract

needs_no_gpu = pytest.mark.skipif(bridge.gpu_available(),
                                  reason="driver-less check (stops at the missing driver); on a GPU machine "
                                         "the multigpu tests cover it with real streams")

FAKE_STREAM = 0x7ABC000       # a made-up stream handle, reported as a stream of cuda:1 by the test hook


@pytest.fixture
def stream_of_device_1():
    _native.debug_set_stream_device(FAKE_STREAM, 1)
    yield FAKE_STREAM
    _native.debug_set_stream_device(FAKE_STREAM, None)


def device_aware_dispatcher(seen: list, contract=vecadd_contract):
    def miss(args, device):
        seen.append(device)
        return launcher_on(device, contract(f"k_on_{device}"))
    return _native.Dispatcher(miss, pass_device=True, names=["a", "b", "out", "n"], kernel="k")


def test_dispatcher_keys_on_the_arrays_device_and_hands_it_to_the_specialisation():
    seen: list[int] = []
    d = device_aware_dispatcher(seen)
    for dev in (0, 1, 0, 1):
        # n is wrong on purpose: the device (and so the specialisation) is chosen before validation
        with pytest.raises(ShapeRelationError, match=rf"^k_on_{dev}: .*n == len\(out\)"):
            d(*arrays_on(dev), 36)
    assert seen == [0, 1], "one specialisation per device, each asked for with its device"
    assert len(d) == 2


def test_arrays_on_two_devices_are_refused_naming_the_argument():
    seen: list[int] = []
    d = device_aware_dispatcher(seen)
    a, b, out = arrays_on(0, out_device=1)
    with pytest.raises(DeviceMismatchError) as info:
        d(a, b, out, 37)
    assert str(info.value) == "k_on_0: argument 'out' (#2): expected device memory on cuda:0, got memory on cuda:1"
    assert (info.value.arg, info.value.arg_name) == (2, "out")
    assert seen == [0], "the first array's device decides; the validator refuses the other"


def test_the_first_device_array_decides_even_after_host_and_managed_values():
    seen: list[int] = []
    d = device_aware_dispatcher(seen)
    a = bridge.Array(ptr=1 << 20, shape=[37], strides=[4], dtype="float32", device_type=13, device_id=0,
                     readonly=False, owner=None)      # managed memory names no device
    _, b, out = arrays_on(1)
    with pytest.raises(ShapeRelationError, match=r"^k_on_1: "):
        d(a, b, out, 36)
    assert seen == [1]


def test_a_launch_without_arrays_runs_on_the_streams_device(stream_of_device_1):
    seen: list[int] = []
    d = device_aware_dispatcher(seen, scalar_contract)
    with pytest.raises(DTypeError, match=r"^k_on_1: argument 'n' \(#0\)"):   # a float for an i32: refused
        d(1.5, grid=1, block=32, stream=stream_of_device_1)
    assert seen == [1]


def test_a_launch_without_arrays_or_stream_runs_on_the_current_device():
    seen: list[int] = []
    d = device_aware_dispatcher(seen, scalar_contract)
    with pytest.raises(DTypeError):
        d(1.5, grid=1, block=32)
    current = _native.current_device()
    assert seen == [current if current >= 0 else 0]


def test_with_peer_access_the_streams_device_comes_first(stream_of_device_1):
    seen: list[int] = []
    d = device_aware_dispatcher(seen)
    # arrays on cuda:0, stream of cuda:1: the launch runs on cuda:1 and reads cuda:0 through peer access;
    # the validator accepts cuda:0's arrays (peer mask) and stops at the wrong n
    with pytest.raises(ShapeRelationError, match=r"^k_on_1: "):
        d(*arrays_on(0), 36, stream=stream_of_device_1, peer_access=True)
    assert seen == [1]


def test_peer_access_lets_other_devices_arrays_through_the_validator():
    launcher = launcher_on(0)
    a, b, out = arrays_on(0)
    b1 = fake_array(1, 37, 1 << 22)
    with pytest.raises(DeviceMismatchError, match=r"argument 'b' \(#1\): expected device memory on cuda:0, got "
                                                  r"memory on cuda:1"):
        launcher(a, b1, out, 36)
    with pytest.raises(ShapeRelationError):        # past the device check, refused for n
        launcher(a, b1, out, 36, peer_access=True)
    with pytest.raises(ShapeRelationError):
        launcher.launch((a, b1, out, 36), None, None, None, None, peer_access=True)


def test_device_limits_peer_mask_is_what_the_validator_reads():
    lim = limits_of(0)
    assert lim.peer_mask == 0
    validator = _native.Launcher(0, _native.Contract(vecadd_contract()), lim, _native.FuncAttrs(), 0)
    a, b, out = arrays_on(0)
    b3 = fake_array(3, 37, 1 << 22)
    with pytest.raises(DeviceMismatchError, match="got memory on cuda:3"):
        validator.validate_only((a, b3, out, 37))
    lim.peer_mask = 1 << 3
    peer_ok = _native.Launcher(0, _native.Contract(vecadd_contract()), lim, _native.FuncAttrs(), 0)
    grid, block, smem, skip = peer_ok.validate_only((a, b3, out, 37))
    assert grid == (1, 1, 1) and not skip
    lim.peer_mask = 1 << 2        # another peer does not cover cuda:3
    other = _native.Launcher(0, _native.Contract(vecadd_contract()), lim, _native.FuncAttrs(), 0)
    with pytest.raises(DeviceMismatchError, match="got memory on cuda:3"):
        other.validate_only((a, b3, out, 37))


def test_router_sends_a_launch_on_another_device_to_that_devices_launcher():
    asked: list[int] = []
    on_1 = launcher_on(1, vecadd_contract("vecadd_there"))

    def router(device):
        asked.append(device)
        return on_1

    here = launcher_on(0)
    assert here.router is None
    here.router = router
    assert here.router is router
    for _ in range(2):
        with pytest.raises(ShapeRelationError, match=r"^vecadd_there: "):
            here(*arrays_on(1), 36)
    assert asked == [1], "asked once, then kept"
    with pytest.raises(ShapeRelationError, match=r"^vecadd: "):   # its own device's launches stay here
        here(*arrays_on(0), 36)
    here.router = None
    with pytest.raises(DeviceMismatchError, match=r"^vecadd: argument 'a' \(#0\): expected device memory on "
                                                  r"cuda:0, got memory on cuda:1$"):
        here(*arrays_on(1), 36)


def test_a_router_returning_the_wrong_device_or_no_launcher_is_an_error():
    here = launcher_on(0)
    here.router = lambda device: launcher_on(0)
    with pytest.raises(ValueError, match=r"router returned a Launcher of cuda:0 for a launch on cuda:1"):
        here(*arrays_on(1), 37)
    here.router = lambda device: "not a launcher"
    with pytest.raises(TypeError, match="router must return a Launcher, got str"):
        here(*arrays_on(1), 37)


def test_a_specialisation_of_the_wrong_device_is_not_kept():
    d = _native.Dispatcher(lambda args, device: launcher_on(0), pass_device=True, kernel="k")
    with pytest.raises(ValueError, match=r"k: the specialisation callback returned a Launcher of cuda:0 for a "
                                         r"launch on cuda:1"):
        d(*arrays_on(1), 37)
    assert len(d) == 0


@needs_no_gpu
def test_a_stream_of_another_device_is_refused_naming_the_argument(stream_of_device_1):
    with pytest.raises(DeviceMismatchError) as info:
        launcher_on(0)(*arrays_on(0), 37, stream=stream_of_device_1)
    assert str(info.value) == (
        "vecadd: argument 'a' (#0): the launch runs on cuda:0 (where this array is), but the stream 0x7abc000 "
        "belongs to cuda:1; pass a stream of cuda:0 (stream=..., or bridge.use_stream) or move the arrays")
    assert (info.value.kernel, info.value.arg, info.value.arg_name) == ("vecadd", 0, "a")
    with pytest.raises(DeviceMismatchError) as info:
        launcher_on(0, scalar_contract())(37, grid=1, block=32, stream=stream_of_device_1)
    assert str(info.value) == ("tick: stream: expected a stream of cuda:0 (the device this kernel is loaded on), "
                               "got a stream of cuda:1")
    assert info.value.arg_name == "stream"
    seen: list[int] = []
    d = device_aware_dispatcher(seen)
    with pytest.raises(DeviceMismatchError, match=r"^k_on_0: argument 'a' \(#0\): the launch runs on cuda:0 "):
        d(*arrays_on(0), 37, stream=stream_of_device_1)     # without peer access the arrays decide
    assert seen == [0]


@needs_no_gpu
def test_a_stream_of_the_launch_device_passes_on_to_the_driver(stream_of_device_1):
    from bridge.errors import NoDeviceError
    with pytest.raises(NoDeviceError):
        launcher_on(1)(*arrays_on(1), 37, stream=stream_of_device_1)
    with pytest.raises(NoDeviceError):      # the default streams exist on every device
        launcher_on(1)(*arrays_on(1), 37, stream=0)


def test_stream_device_knows_only_bridge_streams_unless_asked_to_ask_the_driver(stream_of_device_1):
    assert _native.stream_device(stream_of_device_1) == 1
    assert [_native.stream_device(h) for h in (0, 1, 2)] == [-1, -1, -1]   # every device has these
    assert _native.stream_device(0x5550000) == -1     # a made-up handle never reaches the driver
