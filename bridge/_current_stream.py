"""The calling thread's current stream, as both bridge.stream and bridge.device read it.

The handle lives in the extension's thread-local storage (the C++ launch path reads it without Python);
the bridge Stream objects that `use_stream` made current are kept here, innermost last, because only
they know the device of a foreign stream the runtime never saw (`Stream(handle, device=n)`, a torch or
CuPy stream). bridge.stream makes streams current and hands these objects back from
`current_stream()`; a `with Device(n):` block (bridge.device) asks which device the current stream
belongs to. Neither module imports the other for it.
"""
from __future__ import annotations

import threading
from typing import Any

from bridge import _driver, _native

_tls = threading.local()     # per thread: stack of Streams made current by use_stream


def entered() -> list[Any]:
    """This thread's stack of streams made current by `use_stream` (innermost last; mutable)."""
    return _tls.__dict__.setdefault("stack", [])


def entered_for(handle: int) -> Any | None:
    """The stream object `use_stream` made current, when it is still the current `handle`; else None."""
    stack = getattr(_tls, "stack", None)
    return stack[-1] if stack and stack[-1].handle == handle else None


def device_of_current() -> tuple[int, int]:
    """(handle, device) of this thread's current stream: the device of the Stream that `use_stream`
    made current, else the one the runtime knows for the handle, else the current device (as
    `Stream(handle)` resolves it)."""
    handle = int(_native.current_stream_handle())
    obj = entered_for(handle)
    if obj is not None:
        return handle, int(obj.device)
    found = int(_native.stream_device(handle)) if handle > 2 else -1
    return handle, (found if found >= 0 else _driver.current_ordinal())
