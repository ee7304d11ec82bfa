"""Streams and events shared with CuPy and PyTorch, and the per-thread current stream.

Why native state: the current stream lives in the extension's thread-local storage so the C++ launch
path reads it without Python. `use_stream` also makes the stream current for CuPy and PyTorch when they
are already imported (never imports them), so their ops and bridge launches stay in one order.

Streams and events belong to one device: an event records only on its device's streams, and a stream
waits for another device's event or stream only when told so (`cross_device=True`); the default
streams (handles 0, 1, 2) exist on every device and mean the one of the stream's `device`.
"""
from __future__ import annotations

import sys
from typing import Any, Iterator

from bridge import _current_stream, _native
from bridge.device import Device, resolve_device
from bridge.errors import DeviceMismatchError, raise_faults


class Stream:
    """A CUDA stream: new (`Stream()`), or a wrapper of a bridge/CuPy/torch stream, an object with
    `__cuda_stream__`, or a raw handle (0 = legacy default stream). Wrapping never takes ownership."""

    def __init__(self, obj: Any = None, *, device: Device | int | None = None, non_blocking: bool = True) -> None:
        self._owned = False
        self._torch: Any = None   # the torch.cuda.Stream this wraps, if any
        self._cupy: Any = None    # the cupy.cuda.Stream this wraps, if any
        self._wrapped: Any = obj  # keeps the wrapped object (and so its handle) alive
        dev: int | None = None
        if obj is None:
            dev = resolve_device(device)
            self.handle = int(_native.stream_create(dev, bool(non_blocking)))
            self._owned = True
        elif isinstance(obj, Stream):
            self.handle, dev = obj.handle, obj.device
            self._torch, self._cupy = obj._torch, obj._cupy
        elif isinstance(obj, int) and not isinstance(obj, bool):
            if obj < 0:
                raise ValueError(f"stream handle must be >= 0, got {obj}")
            self.handle = obj
            dev = _known_device(obj, device)
        elif _is_torch_stream(obj):
            self.handle, dev, self._torch = int(obj.cuda_stream), obj.device.index, obj
        elif _is_cupy_stream(obj):
            self.handle, dev, self._cupy = int(obj.ptr), getattr(obj, "device_id", None), obj
        elif hasattr(obj, "__cuda_stream__"):
            self.handle = _handle_from_protocol(obj)
            dev = _known_device(self.handle, device)
        else:
            raise TypeError(f"Stream(obj): expected None, a bridge.Stream, a CuPy or torch stream, an object "
                            f"with __cuda_stream__ or an int handle, got {type(obj).__name__}")
        self.device = resolve_device(device) if dev is None or device is not None else int(dev)

    # --- protocol -----------------------------------------------------------------------------------
    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.handle)

    @property
    def is_default(self) -> bool:
        """True for the legacy default stream (handle 0)."""
        return self.handle == 0

    # --- operations ---------------------------------------------------------------------------------
    def record(self, event: Event | None = None) -> Event:
        """Record `event` (a new one when None) on this stream and return it."""
        ev = event if event is not None else Event(device=self.device)
        ev.record(self)
        return ev

    def wait(self, event_or_stream: Event | Stream | Any, *, cross_device: bool = False) -> None:
        """Make future work on this stream wait for `event_or_stream` (device side, no host block).

        An event or stream of another device is refused (DeviceMismatchError) unless `cross_device=True`
        says that waiting for another GPU's work is meant."""
        if isinstance(event_or_stream, Event):
            self._check_device("wait", "event_or_stream", event_or_stream.device, "an event", cross_device)
            _native.stream_wait_event(self.handle, event_or_stream.handle, self.device)
            return
        other = event_or_stream if isinstance(event_or_stream, Stream) else Stream(event_or_stream)
        self._check_device("wait", "event_or_stream", other.device, "a stream", cross_device)
        if other.handle == self.handle and other.device == self.device:
            return
        ev = Event(device=other.device, timing=False)
        ev.record(other)
        _native.stream_wait_event(self.handle, ev.handle, self.device)

    def _check_device(self, method: str, arg: str, device: int, what: str, allowed: bool = False) -> None:
        if allowed or int(device) == int(self.device):
            return
        raise DeviceMismatchError(
            f"Stream.{method}: argument {arg!r} (#0): expected {what} of cuda:{self.device} (this stream's "
            f"device), got {what} of cuda:{device}; pass cross_device=True to order this stream after "
            f"another device's work", kernel=f"Stream.{method}", arg=0, arg_name=arg)

    def synchronize(self) -> None:
        """Block until this stream's work is done, then raise KernelFault for any fault it recorded."""
        _native.stream_synchronize(self.handle, self.device)
        raise_faults(_native.take_faults(self.handle, self.device))

    def query(self) -> bool:
        """True when all work submitted to this stream has completed."""
        return bool(_native.stream_query(self.handle, self.device))

    def close(self) -> None:
        """Destroy a stream this object created (wrapped streams are never destroyed)."""
        if self._owned:
            self._owned = False
            _native.stream_destroy(self.handle)

    def __del__(self) -> None:
        if getattr(self, "_owned", False):
            try:
                _native.stream_destroy(self.handle)
            except Exception:   # interpreter shutdown or a dead context: nothing left to free
                pass

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stream) or other.handle != self.handle:
            return False
        return self.handle > 2 or other.device == self.device   # default streams: one per device

    def __hash__(self) -> int:
        return hash(self.handle)

    def __repr__(self) -> str:
        kind = "legacy default" if self.handle == 0 else hex(self.handle)
        return f"<bridge.Stream {kind} on device {self.device}>"


class Event:
    """A CUDA event (timing enabled by default) recorded on a stream."""

    def __init__(self, *, device: Device | int | None = None, timing: bool = True) -> None:
        self.device = resolve_device(device)
        self.handle = int(_native.event_create(self.device, bool(timing)))
        self.stream: int | None = None    # handle of the stream last recorded on

    def record(self, stream: Stream | Any = None) -> Event:
        """Record on `stream` (the current stream by default), which must belong to this event's device."""
        s = current_stream() if stream is None else (stream if isinstance(stream, Stream) else Stream(stream))
        if s.handle <= 2 and stream is None:
            s = Stream(s.handle, device=self.device)   # the default stream of this event's device
        if int(s.device) != int(self.device):
            raise DeviceMismatchError(
                f"Event.record: argument 'stream' (#0): expected a stream of cuda:{self.device} (the event's "
                f"device), got a stream of cuda:{s.device}; create the event with Event(device={s.device}) "
                f"or use stream.record()", kernel="Event.record", arg=0, arg_name="stream")
        _native.event_record(self.handle, s.handle, self.device)
        self.stream = s.handle
        return self

    def synchronize(self) -> None:
        """Block until the event completes, then report faults recorded on its stream."""
        _native.event_synchronize(self.handle)
        if self.stream is not None:
            raise_faults(_native.take_faults(self.stream, self.device))

    def query(self) -> bool:
        return bool(_native.event_query(self.handle))

    def elapsed_time(self, other: Event) -> float:
        """Milliseconds from this event to `other` (both recorded and completed)."""
        return float(_native.event_elapsed_ms(self.handle, other.handle))

    def __del__(self) -> None:
        h = getattr(self, "handle", None)
        if h:
            try:
                _native.event_destroy(h)
            except Exception:
                pass

    def __repr__(self) -> str:
        return f"<bridge.Event {hex(self.handle)} on device {self.device}>"


# --- current stream ---------------------------------------------------------------------------------

def current_stream() -> Stream:
    """This thread's current stream for bridge launches (the legacy default stream unless set)."""
    handle = _native.current_stream_handle()
    entered = _current_stream.entered_for(handle)
    return entered if entered is not None else Stream(handle)


class use_stream:
    """`with bridge.use_stream(s):` — s is current for bridge launches and, when imported, for CuPy and
    PyTorch ops on this thread; all three are restored on exit (nesting works)."""

    def __init__(self, stream: Stream | Any) -> None:
        self.stream = stream if isinstance(stream, Stream) else Stream(stream)
        self._saved: list[tuple[str, Any]] = []

    def __enter__(self) -> Stream:
        s = self.stream
        stack = _current_stream.entered()
        prev = _native.set_current_stream_handle(s.handle)
        self._saved = [("bridge", prev)]
        stack.append(s)
        try:
            if "cupy" in sys.modules:
                self._saved.append(("cupy", _enter_cupy(sys.modules["cupy"], s)))
            if "torch" in sys.modules:
                saved = _enter_torch(sys.modules["torch"], s)
                if saved is not None:
                    self._saved.append(("torch", saved))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return s

    def __exit__(self, *exc: Any) -> None:
        for kind, saved in reversed(self._saved):
            if kind == "bridge":
                _native.set_current_stream_handle(saved)
            elif kind == "cupy":
                saved.use()
            elif kind == "torch":
                sys.modules["torch"].cuda.set_stream(saved)
        self._saved = []
        stack = _current_stream.entered()
        if stack:
            stack.pop()

    def __iter__(self) -> Iterator[Stream]:   # pragma: no cover - guards a common misuse
        raise TypeError("use `with bridge.use_stream(s):`, not iteration")


# --- foreign streams --------------------------------------------------------------------------------

def _handle_from_protocol(obj: Any) -> int:
    res = obj.__cuda_stream__()
    if not isinstance(res, tuple) or len(res) != 2:
        raise TypeError(f"Stream(obj): {type(obj).__name__}.__cuda_stream__() must return (version, handle), "
                        f"got {res!r}")
    version, handle = res
    if version != 0:
        raise ValueError(f"Stream(obj): {type(obj).__name__}.__cuda_stream__() reports protocol version "
                         f"{version!r}; only version 0 is understood")
    if not isinstance(handle, int) or isinstance(handle, bool) or handle < 0:
        raise TypeError(f"Stream(obj): {type(obj).__name__}.__cuda_stream__() returned a bad handle {handle!r}")
    return handle


def _known_device(handle: int, device: Any) -> int | None:
    """The device a raw stream handle belongs to, when the runtime can tell (None: use `device` or the
    current device). A stated `device=` that contradicts it is refused."""
    found = int(_native.stream_device(handle)) if handle > 2 else -1
    if found < 0:
        return None
    if device is not None and resolve_device(device) != found:
        raise DeviceMismatchError(f"Stream({hex(handle)}, device={resolve_device(device)}): the stream belongs "
                                  f"to cuda:{found}", arg=1, arg_name="device")
    return found


def _is_torch_stream(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "cuda_stream") and hasattr(obj, "device")


def _is_cupy_stream(obj: Any) -> bool:
    return type(obj).__module__.startswith("cupy") and hasattr(obj, "ptr")


def _enter_cupy(cupy: Any, s: Stream) -> Any:
    prev = cupy.cuda.get_current_stream()
    if s._cupy is not None:
        target = s._cupy
    elif s.handle == 0:
        target = cupy.cuda.Stream.null
    elif hasattr(cupy.cuda.Stream, "from_external"):    # CuPy >= 14: through __cuda_stream__
        target = cupy.cuda.Stream.from_external(s)
    else:
        target = cupy.cuda.ExternalStream(s.handle, s.device)
    target.use()
    return prev


def _enter_torch(torch: Any, s: Stream) -> Any:
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available():
        return None
    dev = f"cuda:{s.device}"
    prev = cuda.current_stream(dev)
    if s._torch is not None:
        target = s._torch
    elif s.handle == 0:
        target = cuda.default_stream(dev)
    else:
        target = cuda.ExternalStream(s.handle, device=dev)
    cuda.set_stream(target)
    return prev
