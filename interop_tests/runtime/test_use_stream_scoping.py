"""use_stream: nesting, restoration on errors, per-thread isolation, and CuPy/torch current streams."""
from __future__ import annotations

import sys
import threading
import types

import pytest

import bridge
from bridge import _native


def test_default_is_the_legacy_default_stream():
    assert bridge.current_stream().handle == 0
    assert _native.current_stream_handle() == 0


def test_nesting_restores_each_level():
    a, b = bridge.Stream(0x1000), bridge.Stream(0x2000)
    with bridge.use_stream(a) as got_a:
        assert got_a is a and bridge.current_stream() is a
        with bridge.use_stream(b):
            assert bridge.current_stream() is b
            assert _native.current_stream_handle() == 0x2000
        assert bridge.current_stream() is a
        assert _native.current_stream_handle() == 0x1000
    assert bridge.current_stream().handle == 0


def test_exception_inside_restores_previous_stream():
    with pytest.raises(RuntimeError, match="boom"):
        with bridge.use_stream(0x3000):
            assert bridge.current_stream().handle == 0x3000
            raise RuntimeError("boom")
    assert bridge.current_stream().handle == 0


def test_current_stream_is_per_thread():
    seen: dict[str, int] = {}
    inside = threading.Event()
    release = threading.Event()

    def worker(name: str, handle: int) -> None:
        with bridge.use_stream(handle):
            inside.set() if name == "w1" else None
            release.wait(5)
            seen[name] = _native.current_stream_handle()
        seen[name + "_after"] = _native.current_stream_handle()

    t1 = threading.Thread(target=worker, args=("w1", 0x1111))
    t2 = threading.Thread(target=worker, args=("w2", 0x2222))
    with bridge.use_stream(0x9999):
        t1.start(), t2.start()
        inside.wait(5)
        release.set()
        t1.join(5), t2.join(5)
        assert _native.current_stream_handle() == 0x9999    # threads never touched this thread's stream
    assert seen == {"w1": 0x1111, "w2": 0x2222, "w1_after": 0, "w2_after": 0}


def _fake_cupy(log: list) -> types.ModuleType:
    cupy = types.ModuleType("cupy")

    class FakeStream:
        def __init__(self, ptr, device_id=0):
            self.ptr, self.device_id = ptr, device_id

        def use(self):
            log.append(("cupy.use", self.ptr))
            cupy._current = self

    class ExternalStream(FakeStream):
        pass

    FakeStream.null = FakeStream(0)
    cupy._current = FakeStream.null
    cupy.cuda = types.SimpleNamespace(Stream=FakeStream, ExternalStream=ExternalStream,
                                      get_current_stream=lambda: cupy._current)
    return cupy


def _fake_torch(log: list) -> types.ModuleType:
    torch = types.ModuleType("torch")

    class ExternalStream:
        def __init__(self, handle, device=None):
            self.cuda_stream, self.device_name = handle, device

    default = ExternalStream(0, "cuda:0")
    state = {"current": default}

    def set_stream(s):
        log.append(("torch.set_stream", s.cuda_stream))
        state["current"] = s

    torch.cuda = types.SimpleNamespace(
        is_available=lambda: True, ExternalStream=ExternalStream, set_stream=set_stream,
        current_stream=lambda device=None: state["current"], default_stream=lambda device=None: default)
    torch._state = state
    return torch


def test_use_stream_drives_imported_cupy_and_torch_and_restores_them(monkeypatch):
    log: list = []
    cupy, torch = _fake_cupy(log), _fake_torch(log)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "torch", torch)
    outer, inner = bridge.Stream(0xA000, device=0), bridge.Stream(0xB000, device=0)
    with bridge.use_stream(outer):
        assert cupy._current.ptr == 0xA000 and torch._state["current"].cuda_stream == 0xA000
        with bridge.use_stream(inner):
            assert cupy._current.ptr == 0xB000 and torch._state["current"].cuda_stream == 0xB000
        assert cupy._current.ptr == 0xA000 and torch._state["current"].cuda_stream == 0xA000
    assert cupy._current.ptr == 0 and torch._state["current"].cuda_stream == 0
    assert log == [("cupy.use", 0xA000), ("torch.set_stream", 0xA000), ("cupy.use", 0xB000),
                   ("torch.set_stream", 0xB000), ("torch.set_stream", 0xA000), ("cupy.use", 0xA000),
                   ("torch.set_stream", 0), ("cupy.use", 0)]


def test_use_stream_never_imports_cupy_or_torch(monkeypatch):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    with bridge.use_stream(0x4000):
        pass
    assert "cupy" not in sys.modules and "torch" not in sys.modules
