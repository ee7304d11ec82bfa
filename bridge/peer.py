"""Copies between device arrays, on one device or between two (cuMemcpyPeerAsync): `bridge.copy_peer`.

Ordered by memory like a launch (docs/architecture.md "Memory ordering"): the copy waits for bridge
work on other streams that wrote its source or used its destination, and records its own use, through
the same log (bridge/memory.py) that launches and allocations use.
"""
from __future__ import annotations

from typing import Any

from bridge import _driver, _native
from bridge.array import asarray
from bridge.errors import AliasingError, DeviceMismatchError, DTypeError, LayoutError, ReadOnlyError, ShapeRelationError
from bridge.memory import note_use, on_device, order_use, wait
from bridge.stream import Stream, current_stream


def _device_view(obj: Any, name: str, pos: int) -> Any:
    arr = asarray(obj)
    if arr.is_host or arr.device_id < 0:
        raise DeviceMismatchError(f"copy_peer: argument {name!r} (#{pos}): expected device memory, got "
                                  f"{'host memory' if arr.is_host else 'memory of an unknown device'}",
                                  kernel="copy_peer", arg=pos, arg_name=name)
    if not arr.is_c_contiguous:
        raise LayoutError(f"copy_peer: argument {name!r} (#{pos}): expected a C-contiguous array, got strides "
                          f"{arr.strides} for shape {arr.shape}", kernel="copy_peer", arg=pos, arg_name=name)
    return arr


def _copy_stream(stream: Any, dst: Any, src: Any) -> tuple[int, int]:
    """(handle, device) of the copy's stream: `stream`, else the current stream; a default stream (0-2)
    means dst's device's; any other must belong to dst's or src's device."""
    if stream is None:
        s = current_stream()
    else:
        s = stream if isinstance(stream, Stream) else Stream(stream)
    if s.handle <= 2 and stream is None:
        return int(s.handle), int(dst.device_id)
    if int(s.device) not in (dst.device_id, src.device_id):
        raise DeviceMismatchError(f"copy_peer: argument 'stream' (#2): expected a stream of cuda:{dst.device_id} "
                                  f"or cuda:{src.device_id} (the devices of dst and src), got a stream of "
                                  f"cuda:{s.device}", kernel="copy_peer", arg=2, arg_name="stream")
    return int(s.handle), int(s.device)


def copy_peer(dst: Any, src: Any, *, stream: Any = None) -> None:
    """Copy device array `src` into device array `dst` (same dtype and shape, both C-contiguous), on the
    same device or between two, with cuMemcpyPeerAsync on `stream`; the host never waits.

    Ordered by memory like a launch: the copy waits for bridge work on other streams that wrote `src`
    or used `dst` (and for a foreign producer's stream), and later users of `dst` wait for the copy.
    `stream` (default: the current stream) must belong to dst's or src's device; a default stream
    means dst's device's. Both arrays are kept alive until the copy completes."""
    d, s = _device_view(dst, "dst", 0), _device_view(src, "src", 1)
    if d.dtype_tag != s.dtype_tag:
        raise DTypeError(f"copy_peer: argument 'src' (#1): expected {d.dtype_name} (dst's dtype), got "
                         f"{s.dtype_name}", kernel="copy_peer", arg=1, arg_name="src")
    if tuple(d.shape) != tuple(s.shape):
        raise ShapeRelationError(f"copy_peer: argument 'src' (#1): expected shape {tuple(d.shape)} (dst's "
                                 f"shape), got {tuple(s.shape)}", kernel="copy_peer", arg=1, arg_name="src")
    if d.readonly:
        raise ReadOnlyError("copy_peer: argument 'dst' (#0): expected a writable array, got a read-only array",
                            kernel="copy_peer", arg=0, arg_name="dst")
    (dlo, dhi), (slo, shi) = d.extent, s.extent
    if d.nbytes and dlo < shi and slo < dhi:
        raise AliasingError(f"copy_peer: argument 'dst' (#0) overlaps argument 'src' (#1) "
                            f"([0x{dlo:x}, 0x{dhi:x}) and [0x{slo:x}, 0x{shi:x}))", kernel="copy_peer", arg=0,
                            arg_name="dst")
    handle, sdev = _copy_stream(stream, d, s)
    if d.nbytes == 0:
        return
    if handle > 2 and _native.stream_is_capturing(handle):
        raise RuntimeError("copy_peer: the stream is being captured into a CUDA graph; copy_peer orders "
                           "itself through the memory log, which a capture bypasses: copy outside the capture")
    drv = _driver.raw()
    with on_device(sdev):
        for arr in (s, d):
            if arr._stream is not None and arr._stream != handle:
                wait(arr._stream, handle, arr.device_id, arr._stream_generation, consumer_device=sdev)
        order_use(slo, shi, handle, sdev, False)
        order_use(dlo, dhi, handle, sdev, True)
        _driver.call("cuMemcpyPeerAsync", drv.CUdeviceptr(d.ptr), drv.CUcontext(_driver.primary_context(d.device_id)),
                     drv.CUdeviceptr(s.ptr), drv.CUcontext(_driver.primary_context(s.device_id)), d.nbytes,
                     drv.CUstream(handle))
        note_use(slo, shi, handle, sdev, False)
        note_use(dlo, dhi, handle, sdev, True)
    _native.keep_until_complete(handle, sdev, [dst, src, d, s])
