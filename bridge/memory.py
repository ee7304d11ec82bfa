"""Stream-ordered device memory: cuMemAllocAsync / cuMemFreeAsync on each device's default pool.

Why stream-ordered: an array allocated on a stream may be used by work queued on that stream at once,
and freeing it when the last Python reference dies never blocks the host — the free is queued behind
whatever the stream still has to do with the memory.
"""
from __future__ import annotations

import contextlib
import sys
import weakref
from typing import Any, Iterator

from bridge import _driver, _native
from bridge.errors import CudaError, DeviceMismatchError
from bridge.stream import Stream, current_stream

CU_STREAM_LEGACY = 0x1       # raw handle of the legacy default stream


@contextlib.contextmanager
def on_device(ordinal: int) -> Iterator[None]:
    """Make `ordinal`'s primary context current for a block, restoring the caller's context after."""
    ctx = _driver.primary_context(ordinal)
    if int(_driver.call("cuCtxGetCurrent")) == ctx:
        yield
        return
    _driver.call("cuCtxPushCurrent", _driver.raw().CUcontext(ctx))
    try:
        yield
    finally:
        _driver.call("cuCtxPopCurrent")


def stream_handle(stream: Any) -> int:
    """Raw CUstream handle of a bridge stream object (`.handle`) or of an int."""
    handle = getattr(stream, "handle", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise TypeError(f"stream: expected a bridge stream or a raw stream handle (int >= 0), got {stream!r}")
    return handle


def resolve(stream: Any, device: int | None) -> tuple[int, int, Any]:
    """(raw handle, device ordinal, object to keep alive) for the `stream=` / `device=` of a call.

    stream None means the calling thread's current bridge stream; when `device` names another device
    than that stream's, the legacy default stream of `device` is used.
    """
    if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
        raise TypeError(f"device: expected a device ordinal (int >= 0) or None, got {device!r}")
    if stream is None:
        cur = current_stream()
        if device is None or int(cur.device) == device:
            return int(cur.handle), int(cur.device), cur
        return CU_STREAM_LEGACY, device, None
    if not isinstance(stream, int) and not hasattr(stream, "handle"):
        stream = Stream(stream)   # torch / CuPy streams and __cuda_stream__ objects
    handle = stream_handle(stream)
    stream_device = getattr(stream, "device", None)
    if stream_device is not None:
        if device is not None and int(stream_device) != device:
            raise DeviceMismatchError(f"stream: the stream belongs to device {stream_device}, but "
                                      f"device={device} was requested", arg_name="stream")
        return handle, int(stream_device), stream
    return handle, (device if device is not None else _driver.current_ordinal()), stream


def wait(producer: int, consumer: int, device: int, generation: int | None = None, *,
         consumer_device: int = -1) -> None:
    """Make `consumer` wait for the work queued so far on `producer` (event; the host never blocks).
    `device` is the producer's device, `consumer_device` the consumer's (-1: the same; its context must
    be current when the consumer is a default stream 0-2). `generation` names which bridge stream of
    that handle (`_native.stream_generation` when the handle was taken; None: the stream living now): a
    destroyed one is waited for through the event it recorded when it was destroyed, never through
    whatever stream got its handle since."""
    _native.order_after(producer, consumer, device, generation, consumer_device)


def order_use(lo: int, hi: int, stream: int, device: int, write: bool) -> None:
    """Order work about to run on `stream` after bridge work on other streams that wrote the bytes
    [lo, hi) (and, for a write, that read them): ordering follows memory, not Python objects."""
    if hi > lo:
        _native.order_use(lo, hi, stream, device, write)


def note_use(lo: int, hi: int, stream: int, device: int, write: bool) -> None:
    """Record that work just queued on `stream` wrote (or read) the bytes [lo, hi)."""
    if hi > lo:
        _native.note_use(lo, hi, stream, device, write)


class DeviceAllocation:
    """`nbytes` of device memory allocated on a stream; freed on that stream when unreferenced.

    Build with `allocate()`. Holds the stream object so the stream outlives the queued free.
    """

    __slots__ = ("ptr", "nbytes", "device", "stream", "_finalizer", "__weakref__")

    def __init__(self) -> None:
        raise TypeError("DeviceAllocation objects come from bridge.memory.allocate()")

    def __repr__(self) -> str:
        return (f"DeviceAllocation(ptr=0x{self.ptr:x}, nbytes={self.nbytes}, device={self.device}, "
                f"stream=0x{self.stream:x})")

    def free(self) -> None:
        """Queue the free now (normally left to garbage collection)."""
        self._finalizer()


def _free(ptr: int, nbytes: int, device: int, stream: int, generation: int, _keep: Any) -> None:
    """Queue the free after every bridge use of the bytes on any stream (writes and reads), on the
    allocation stream, or on the legacy default stream when the allocation stream was destroyed."""
    if sys.is_finalizing():  # the driver may already be torn down; the context teardown frees it
        return
    if not _native.stream_alive(stream, generation):
        stream = CU_STREAM_LEGACY
    drv = _driver.raw()
    with on_device(device):
        order_use(ptr, ptr + nbytes, stream, device, True)
        _native.forget_range(ptr, ptr + nbytes)
        try:
            _driver.call("cuMemFreeAsync", drv.CUdeviceptr(ptr), drv.CUstream(stream))
        except CudaError:
            # The allocation stream was destroyed by its foreign owner: free synchronously instead.
            _driver.call("cuMemFree", drv.CUdeviceptr(ptr))


def allocate(nbytes: int, *, device: int, stream: int, keep: Any = None) -> DeviceAllocation:
    """Allocate `nbytes` on `device`, ordered on raw stream `stream`; zero bytes allocate nothing."""
    if nbytes < 0:
        raise ValueError(f"nbytes: expected >= 0, got {nbytes}")
    alloc = object.__new__(DeviceAllocation)
    alloc.nbytes, alloc.device, alloc.stream = nbytes, device, stream
    if nbytes == 0:
        alloc.ptr = 0
        alloc._finalizer = lambda: None
        return alloc
    drv = _driver.raw()
    with on_device(device):
        alloc.ptr = int(_driver.call("cuMemAllocAsync", nbytes, drv.CUstream(stream)))
        # the bytes come into being on `stream`: other streams' first use orders after it
        note_use(alloc.ptr, alloc.ptr + nbytes, stream, device, True)
    generation = _native.stream_generation(stream)
    fin = weakref.finalize(alloc, _free, alloc.ptr, nbytes, device, stream, generation, keep)
    fin.atexit = False  # the context's teardown releases what is left at exit
    alloc._finalizer = fin
    return alloc
