"""Streams, events, graphs, copies and `with bridge.Device(n):` are bound to their device: checked in
Python before any driver call, so testable without a GPU (stand-in objects of cuda:0 and cuda:1, the
native calls that would follow replaced by recorders that prove they were not reached)."""
from __future__ import annotations

import sys
import types

import pytest

import bridge
from bridge import _driver, _native, memory
from bridge.errors import (AliasingError, DeviceMismatchError, DTypeError, LayoutError, ReadOnlyError,
                           ShapeRelationError)
from bridge.graph import Graph
from bridge.stream import Event, Stream

from multigpu_helpers import fake_array


def fake_event(device: int, handle: int = 0xE000) -> Event:
    ev = object.__new__(Event)
    ev.device, ev.handle, ev.stream = device, 0, None     # handle 0: __del__ destroys nothing
    ev._fake_handle = handle
    return ev


@pytest.fixture
def native_calls(monkeypatch):
    """Replace the native calls the objects would make with recorders."""
    calls: list[tuple] = []
    for name in ("stream_wait_event", "event_record", "graph_launch", "event_create", "event_destroy"):
        def rec(*args, _name=name):
            calls.append((_name, *args))
            return 0xEEE0 if _name == "event_create" else None
        monkeypatch.setattr(_native, name, rec)
    return calls


def test_stream_wait_for_another_devices_event_is_refused_unless_cross_device(native_calls):
    s = Stream(0x5000, device=1)
    with pytest.raises(DeviceMismatchError) as info:
        s.wait(fake_event(0))
    assert str(info.value) == (
        "Stream.wait: argument 'event_or_stream' (#0): expected an event of cuda:1 (this stream's device), got "
        "an event of cuda:0; pass cross_device=True to order this stream after another device's work")
    assert (info.value.arg, info.value.arg_name) == (0, "event_or_stream")
    assert native_calls == []
    s.wait(fake_event(0), cross_device=True)
    assert native_calls == [("stream_wait_event", 0x5000, 0, 1)]


def test_stream_wait_for_another_devices_stream_is_refused_unless_cross_device(native_calls):
    s, other = Stream(0x5000, device=1), Stream(0x6000, device=0)
    with pytest.raises(DeviceMismatchError, match=r"expected a stream of cuda:1 \(this stream's device\), got a "
                                                  r"stream of cuda:0"):
        s.wait(other)
    assert native_calls == []
    s.wait(other, cross_device=True)
    assert [c[0] for c in native_calls][:3] == ["event_create", "event_record", "stream_wait_event"]
    assert native_calls[0][1:] == (0, False)            # the event is the waited-for stream's device's
    assert native_calls[1][2:] == (0x6000, 0)
    assert native_calls[2][1] == 0x5000 and native_calls[2][3] == 1


def test_event_records_only_on_its_own_devices_streams(native_calls):
    ev = fake_event(0)
    with pytest.raises(DeviceMismatchError) as info:
        ev.record(Stream(0x5000, device=1))
    assert str(info.value) == (
        "Event.record: argument 'stream' (#0): expected a stream of cuda:0 (the event's device), got a stream "
        "of cuda:1; create the event with Event(device=1) or use stream.record()")
    assert native_calls == []
    ev.record(Stream(0x6000, device=0))
    assert native_calls == [("event_record", 0, 0x6000, 0)]


def test_graph_replays_only_on_its_devices_streams(native_calls):
    g = Graph()
    g.graph_exec, g.device = 0x9000, 0
    try:
        with pytest.raises(DeviceMismatchError) as info:
            g.replay(Stream(0x5000, device=1))
        assert str(info.value) == (
            "Graph.replay: argument 'stream' (#0): expected a stream of cuda:0 (where the graph was captured), "
            "got a stream of cuda:1; capture the work again on a stream of cuda:1")
        assert info.value.arg_name == "stream"
        assert native_calls == []
    finally:
        g.graph_exec = 0


def test_default_streams_are_one_per_device():
    assert Stream(0, device=0) != Stream(0, device=1)
    assert Stream(0, device=1) == Stream(0, device=1)
    assert Stream(0x5000, device=0) == Stream(0x5000, device=0)
    assert repr(Stream(0, device=1)) == "<bridge.Stream legacy default on device 1>"


def test_a_stated_device_contradicting_a_bridge_streams_own_is_refused():
    _native.debug_set_stream_device(0x5100, 1)
    try:
        assert Stream(0x5100).device == 1            # the runtime knows which device it belongs to
        with pytest.raises(DeviceMismatchError, match=r"Stream\(0x5100, device=0\): the stream belongs to cuda:1"):
            Stream(0x5100, device=0)
    finally:
        _native.debug_set_stream_device(0x5100, None)


def test_allocation_stream_of_another_device_is_refused():
    with pytest.raises(DeviceMismatchError, match="the stream belongs to device 1, but device=0 was requested"):
        memory.resolve(Stream(0x5000, device=1), 0)


@pytest.fixture
def no_driver_calls(monkeypatch):
    def refuse(name, *args):
        raise AssertionError(f"driver call {name} reached: the copy should have been refused before")
    monkeypatch.setattr(_driver, "call", refuse)


def test_copy_peer_refuses_bad_arguments_before_any_driver_call(no_driver_calls):
    d0, s1 = fake_array(0, 16, 1 << 20), fake_array(1, 16, 1 << 22)
    with pytest.raises(DTypeError) as info:
        bridge.copy_peer(d0, fake_array(1, 16, 1 << 22, dtype="float64"))
    assert str(info.value) == "copy_peer: argument 'src' (#1): expected float32 (dst's dtype), got float64"
    with pytest.raises(ShapeRelationError, match=r"argument 'src' \(#1\): expected shape \(16,\) \(dst's shape\), "
                                                 r"got \(15,\)"):
        bridge.copy_peer(d0, fake_array(1, 15, 1 << 22))
    host = bridge.Array(ptr=1 << 26, shape=[16], strides=[4], dtype="float32", device_type=1, device_id=0,
                        readonly=False, owner=None)
    with pytest.raises(DeviceMismatchError, match=r"copy_peer: argument 'dst' \(#0\): expected device memory, "
                                                  r"got host memory"):
        bridge.copy_peer(host, s1)
    strided = bridge.Array(ptr=1 << 22, shape=[16], strides=[8], dtype="float32", device_type=2, device_id=1,
                           readonly=False, owner=None)
    with pytest.raises(LayoutError, match=r"argument 'src' \(#1\): expected a C-contiguous array"):
        bridge.copy_peer(d0, strided)
    with pytest.raises(AliasingError, match=r"argument 'dst' \(#0\) overlaps argument 'src' \(#1\)"):
        bridge.copy_peer(d0, fake_array(0, 16, (1 << 20) + 8))
    ro = bridge.Array(ptr=1 << 20, shape=[16], strides=[4], dtype="float32", device_type=2, device_id=0,
                      readonly=True, owner=None)
    with pytest.raises(ReadOnlyError, match=r"argument 'dst' \(#0\): expected a writable array"):
        bridge.copy_peer(ro, s1)
    with pytest.raises(DeviceMismatchError) as info:
        bridge.copy_peer(d0, s1, stream=Stream(0x5000, device=2))
    assert str(info.value) == ("copy_peer: argument 'stream' (#2): expected a stream of cuda:0 or cuda:1 (the "
                               "devices of dst and src), got a stream of cuda:2")
    assert info.value.arg_name == "stream"


def test_empty_copy_between_devices_touches_nothing(no_driver_calls):
    bridge.copy_peer(fake_array(0, 0, 1 << 20), fake_array(1, 0, 1 << 22), stream=Stream(0x5000, device=1))


# --- with bridge.Device(n): -----------------------------------------------------------------------

def _fake_torch(state: dict) -> types.ModuleType:
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace(is_available=lambda: True, current_device=lambda: state["torch"],
                                 set_device=lambda n: state.__setitem__("torch", n))
    torch.cuda = cuda
    return torch


def _fake_cupy(state: dict) -> types.ModuleType:
    class Device:
        def __init__(self, n):
            self.n = n

        def __enter__(self):
            state["cupy"].append(self.n)
            return self

        def __exit__(self, *exc):
            state["cupy"].pop()

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(Device=Device)
    return cupy


@pytest.fixture
def fake_world(monkeypatch):
    """Devices 0 and 1 without a driver: the driver context, torch's and CuPy's current devices."""
    state = {"ctx": 100, "torch": 0, "cupy": [0], "log": []}
    monkeypatch.setattr(_driver, "current_context", lambda: state["ctx"])
    monkeypatch.setattr(_driver, "ensure_current", lambda n: state.update(ctx=100 + n))
    monkeypatch.setattr(_driver, "restore_context", lambda c: state.update(ctx=c))
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(state))
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(state))
    devices = {}
    for n in (0, 1):
        dev = object.__new__(bridge.Device)
        dev.ordinal = n
        devices[n] = dev
    return state, devices


def test_device_block_makes_it_current_for_bridge_torch_and_cupy_and_restores(fake_world):
    state, dev = fake_world
    with dev[1] as inside:
        assert inside is dev[1]
        assert (state["ctx"], state["torch"], state["cupy"][-1]) == (101, 1, 1)
        with dev[0]:
            assert (state["ctx"], state["torch"], state["cupy"][-1]) == (100, 0, 0)
        assert (state["ctx"], state["torch"], state["cupy"][-1]) == (101, 1, 1)
    assert (state["ctx"], state["torch"], state["cupy"]) == (100, 0, [0])


def test_device_block_restores_after_an_exception(fake_world):
    state, dev = fake_world
    with pytest.raises(KeyError):
        with dev[1]:
            raise KeyError("inside")
    assert (state["ctx"], state["torch"], state["cupy"]) == (100, 0, [0])


def test_device_block_replaces_a_current_stream_of_another_device_by_the_default_stream(fake_world, monkeypatch):
    _, dev = fake_world
    monkeypatch.delitem(sys.modules, "torch")      # use_stream would drive them too: not the point here
    monkeypatch.delitem(sys.modules, "cupy")
    s0 = Stream(0x5000, device=0)
    with bridge.use_stream(s0):
        with dev[0]:
            assert _native.current_stream_handle() == 0x5000      # its own device's stream stays
        with dev[1]:
            assert _native.current_stream_handle() == 0           # device 1's legacy default stream
        assert bridge.current_stream() is s0
