"""Streams and events shared with CuPy and PyTorch, and the per-thread current stream.

Why native state: the current stream lives in the extension's thread-local storage so the C++ launch
path reads it without Python. `use_stream` also makes the stream current for CuPy and PyTorch when they
are already imported (never imports them), so their ops and bridge launches stay in one order.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Iterator

from bridge import _native
from bridge.device import Device, resolve_device
from bridge.errors import KernelFault

_tls = threading.local()     # per thread: stack of Streams made current by use_stream


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
        elif _is_torch_stream(obj):
            self.handle, dev, self._torch = int(obj.cuda_stream), obj.device.index, obj
        elif _is_cupy_stream(obj):
            self.handle, dev, self._cupy = int(obj.ptr), getattr(obj, "device_id", None), obj
        elif hasattr(obj, "__cuda_stream__"):
            self.handle = _handle_from_protocol(obj)
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

    def wait(self, event_or_stream: Event | Stream | Any) -> None:
        """Make future work on this stream wait for `event_or_stream` (device side, no host block)."""
        if isinstance(event_or_stream, Event):
            _native.stream_wait_event(self.handle, event_or_stream.handle)
            return
        other = event_or_stream if isinstance(event_or_stream, Stream) else Stream(event_or_stream)
        if other.handle == self.handle:
            return
        ev = Event(device=other.device, timing=False)
        ev.record(other)
        _native.stream_wait_event(self.handle, ev.handle)

    def synchronize(self) -> None:
        """Block until this stream's work is done, then raise KernelFault for any fault it recorded."""
        _native.ensure_current(self.device)
        _native.stream_synchronize(self.handle)
        raise_faults(_native.take_faults(self.handle, self.device))

    def query(self) -> bool:
        """True when all work submitted to this stream has completed."""
        return bool(_native.stream_query(self.handle))

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
        return isinstance(other, Stream) and other.handle == self.handle

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
        s = current_stream() if stream is None else (stream if isinstance(stream, Stream) else Stream(stream))
        _native.event_record(self.handle, s.handle)
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
    stack = getattr(_tls, "stack", None)
    if stack and stack[-1].handle == handle:
        return stack[-1]
    return Stream(handle)


class use_stream:
    """`with bridge.use_stream(s):` — s is current for bridge launches and, when imported, for CuPy and
    PyTorch ops on this thread; all three are restored on exit (nesting works)."""

    def __init__(self, stream: Stream | Any) -> None:
        self.stream = stream if isinstance(stream, Stream) else Stream(stream)
        self._saved: list[tuple[str, Any]] = []

    def __enter__(self) -> Stream:
        s = self.stream
        stack = _tls.__dict__.setdefault("stack", [])
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
        stack = getattr(_tls, "stack", None)
        if stack:
            stack.pop()

    def __iter__(self) -> Iterator[Stream]:   # pragma: no cover - guards a common misuse
        raise TypeError("use `with bridge.use_stream(s):`, not iteration")


def synchronize(device: Device | int | None = None) -> None:
    """Wait for all work on `device` (current by default), then raise KernelFault for recorded faults."""
    dev = resolve_device(device)
    _native.device_synchronize(dev)
    raise_faults(_native.take_faults(None, dev))


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


# --- device-side faults -----------------------------------------------------------------------------

def raise_faults(records: list) -> None:
    """Raise KernelFault for the first of `records` (from _native.take_faults); they are cleared already."""
    if not records:
        return
    kernel, info, site, index, extent, _stream = records[0]
    array, file, line, text = "", "", 0, ""
    if info is not None:
        entry = info.get(int(site)) if hasattr(info, "get") else None
        if entry is not None:
            array, file, line, text = entry
    where = f" at {file}:{line}" if file else ""
    src = f": {text.strip()}" if text else ""
    what = f"array '{array}'" if array else f"fault site {site}"
    more = f" (and {len(records) - 1} more fault(s))" if len(records) > 1 else ""
    msg = (f"{kernel}: index {index} out of bounds for {what} with extent {extent}{where}{src}{more}; "
           f"the fault record was cleared, the next launch works")
    raise KernelFault(msg, kernel=kernel, array=array, index=int(index), extent=int(extent), file=file,
                      line=int(line))
