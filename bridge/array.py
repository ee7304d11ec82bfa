"""bridge.Array: a zero-copy view of device (or host) memory that CuPy, PyTorch and NumPy can share.

The view itself (pointer, shape, byte strides, dtype, device, read-only flag, owner) lives in the native
base class `_native.ArrayBase`, so launches read it without Python. This module adds the public API:
slicing views, DLPack / CUDA Array Interface export with stream ordering, and explicit allocation and
host<->device copies. Nothing here copies silently: `asarray` is always zero-copy.
"""
from __future__ import annotations

import ctypes
import math
import operator
from typing import Any, Sequence

import numpy as np

from bridge import _driver, _native, dtypes, memory
from bridge.settings import env_switch
from bridge.stream import current_stream

_HOST_TYPES = (1, 3)          # kDLCPU, kDLCUDAHost
_CUDA = 2

# KB_FAST_INTAKE (an on/off switch, bridge/settings.py), read once when bridge is imported, before any
# intake: off keeps torch tensors and CuPy arrays on their attribute paths (cpp/native/intake_fast.cpp).
_native.set_fast_intake_setting(env_switch("KB_FAST_INTAKE", True))


def _c_strides(shape: Sequence[int], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _shape_tuple(shape: Any, arg: str = "shape") -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        shape = (shape,)
    try:
        out = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise TypeError(f"{arg}: expected an int or a sequence of ints, got {shape!r}") from None
    if any(n < 0 for n in out):
        raise ValueError(f"{arg}: extents must be >= 0, got {out}")
    return out


def _consumer_stream_for_intake() -> int:
    """Stream a DLPack producer must order its work before: the current bridge stream (-1 without GPU)."""
    if not _driver.available():
        return -1
    return int(current_stream().handle)


class Array(_native.ArrayBase):
    """A view of memory owned by someone else (a bridge allocation, a torch tensor, a CuPy array, ...).

    `Array(obj)` views any array the intake path accepts (same as `asarray`); the allocation functions
    of this module build the others. Strides are in bytes, as in NumPy and CuPy.
    """

    # ---- description ---------------------------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype | str:
        """NumPy dtype (bfloat16/float8 through ml_dtypes; the name when ml_dtypes is missing)."""
        return dtypes.numpy_or_name(self.dtype_tag)

    @property
    def device(self) -> int | str:
        """Device ordinal, or 'cpu' for host memory."""
        return "cpu" if self.device_type in _HOST_TYPES else self.device_id

    @property
    def is_host(self) -> bool:
        return self.device_type in _HOST_TYPES

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d bridge.Array")
        return self.shape[0]

    def __repr__(self) -> str:
        ro = ", readonly" if self.readonly else ""
        return (f"bridge.Array(shape={self.shape}, dtype={self.dtype_name}, device={self.device!r}, "
                f"ptr=0x{self.ptr:x}{ro})")

    # ---- views ---------------------------------------------------------------------------------------
    def _view(self, ptr: int, shape: Sequence[int], strides: Sequence[int]) -> "Array":
        return Array(ptr=ptr, shape=list(shape), strides=list(strides), dtype=self.dtype_tag,
                     device_type=self.device_type, device_id=self.device_id, readonly=self.readonly,
                     owner=self, stream=self._stream, stream_generation=self._stream_generation)

    def __getitem__(self, index: Any) -> "Array":
        """Basic indexing (ints, slices, Ellipsis): always a view that keeps this array alive."""
        items = index if isinstance(index, tuple) else (index,)
        if sum(i is Ellipsis for i in items) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        if Ellipsis in items:
            at = next(k for k, i in enumerate(items) if i is Ellipsis)
            fill = self.ndim - (len(items) - 1)
            items = items[:at] + (slice(None),) * fill + items[at + 1:]
        if len(items) > self.ndim:
            raise IndexError(f"too many indices: array is {self.ndim}-dimensional, {len(items)} given")
        ptr, shape, strides = self.ptr, [], []
        for axis, (n, st) in enumerate(zip(self.shape, self.strides)):
            idx = items[axis] if axis < len(items) else slice(None)
            if isinstance(idx, slice):
                start, stop, step = idx.indices(n)
                length = len(range(start, stop, step))
                if length:
                    ptr += start * st
                shape.append(length)
                strides.append(st * step)
                continue
            try:
                i = operator.index(idx)
            except TypeError:
                raise TypeError(f"bridge.Array supports basic indexing only (ints, slices, ...), got "
                                f"{type(idx).__name__}") from None
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            ptr += (i % n) * st
        return self._view(ptr, shape, strides)

    def reshape(self, *shape: Any) -> "Array":
        """A view with a new shape; needs a C-contiguous array (one -1 extent is inferred)."""
        new = list(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else list(shape)
        new = [operator.index(n) for n in new]
        if new.count(-1) > 1:
            raise ValueError("reshape: only one extent may be -1")
        known = math.prod(n for n in new if n != -1)
        if -1 in new:
            if known == 0 or self.size % known:
                raise ValueError(f"reshape: cannot reshape an array of size {self.size} into {tuple(new)}")
            new[new.index(-1)] = self.size // known
        if math.prod(new) != self.size or any(n < 0 for n in new):
            raise ValueError(f"reshape: cannot reshape an array of size {self.size} into {tuple(new)}")
        if not self.is_c_contiguous:
            raise ValueError(f"reshape: needs a C-contiguous array, got strides {self.strides} for shape "
                             f"{self.shape} (no copy is made)")
        return self._view(self.ptr, new, _c_strides(new, self.itemsize))

    def transpose(self, *axes: Any) -> "Array":
        """A view with permuted axes (reversed when none are given)."""
        order = list(axes[0]) if len(axes) == 1 and not isinstance(axes[0], int) else list(axes)
        if not order:
            order = list(range(self.ndim))[::-1]
        order = [operator.index(a) % self.ndim if self.ndim else a for a in order]
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of {self.ndim} axes")
        return self._view(self.ptr, [self.shape[a] for a in order], [self.strides[a] for a in order])

    @property
    def T(self) -> "Array":
        return self.transpose()

    # ---- export --------------------------------------------------------------------------------------
    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0 if self.is_host else self.device_id)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:
        """DLPack capsule of this array (versioned when max_version >= (1, 0)); never copies.

        For device arrays the consumer's `stream` is made to wait (event, no host block) for the stream
        this array was last produced on: None = legacy default stream, 1 legacy, 2 per-thread default,
        > 2 a stream handle, -1 no synchronisation; 0 is invalid.
        """
        if copy:
            raise BufferError("bridge.Array.__dlpack__: copy=True was requested, but bridge never copies "
                              "on export; copy explicitly (to_host(), from_host())")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"bridge.Array.__dlpack__: dl_device={tuple(dl_device)} differs from the "
                              f"array's device {self.__dlpack_device__()} and bridge never copies")
        if self.is_host:
            if stream not in (None, -1):
                raise BufferError(f"bridge.Array.__dlpack__: stream must be None for host memory, got {stream!r}")
        else:
            self._order_for_consumer(stream)
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return _native.make_dlpack_capsule(self, versioned, self.readonly)

    def _order_for_consumer(self, stream: Any) -> None:
        if stream is None:
            consumer = memory.CU_STREAM_LEGACY
        elif isinstance(stream, bool) or not isinstance(stream, int):
            raise TypeError(f"__dlpack__: stream must be None or an int, got {stream!r}")
        elif stream == -1:
            return
        elif stream == 0:
            raise ValueError("__dlpack__: stream=0 is ambiguous and disallowed by the DLPack spec; pass 1 "
                             "(legacy default stream), 2 (per-thread default stream) or a stream handle")
        elif stream < -1:
            raise ValueError(f"__dlpack__: invalid stream {stream}")
        else:
            consumer = stream
        self._order_before(consumer)

    def _order_before(self, consumer: int) -> None:
        """Make `consumer` wait for the bridge work on other streams that wrote these bytes (through
        any object naming them) and for a foreign producer's own stream."""
        lo, hi = self.extent
        memory.order_use(lo, hi, consumer, self.device_id, False)
        if self._stream is not None:
            memory.wait(self._stream, consumer, self.device_id, self._stream_generation)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        """CUDA Array Interface v3 (device memory only); stream = where the data was last produced."""
        if self.is_host:
            raise AttributeError("a host bridge.Array has no __cuda_array_interface__ (use DLPack)")
        typestr = _native.dtype_typestr(self.dtype_tag)
        if typestr is None:
            raise TypeError(f"{self.dtype_name} has no CUDA Array Interface typestr: exchange this array "
                            f"through DLPack instead (e.g. torch.from_dlpack(arr), cupy.from_dlpack(arr))")
        stream = int(current_stream().handle)   # ordered after every writer: the consumer syncs on it
        self._order_before(stream)
        return {
            "shape": self.shape,
            "typestr": typestr,
            "descr": [("", typestr)],
            "data": (self.ptr, self.readonly),
            "strides": None if self.is_c_contiguous else self.strides,
            "version": 3,
            "stream": stream if stream != 0 else memory.CU_STREAM_LEGACY,
        }

    # ---- copies --------------------------------------------------------------------------------------
    def to_host(self, stream: Any = None) -> np.ndarray:
        """A new C-contiguous NumPy array with this array's values (device: waits for the copy)."""
        npdt = dtypes.to_numpy(self.dtype_tag)
        lo, hi = self.extent
        if hi == lo:
            return np.empty(self.shape, dtype=npdt)
        raw = np.empty(hi - lo, dtype=np.uint8)
        if self.is_host:
            raw[:] = np.frombuffer((ctypes.c_ubyte * (hi - lo)).from_address(lo), dtype=np.uint8)
        else:
            self._copy_to_host(raw, lo, stream)
        view = np.ndarray(self.shape, dtype=npdt, buffer=raw, offset=self.ptr - lo, strides=self.strides)
        return np.array(view, order="C")

    def _copy_to_host(self, raw: np.ndarray, lo: int, stream: Any) -> None:
        handle, device, _keep = memory.resolve(stream, self.device_id)
        _refuse_capture(handle, "to_host")
        self._order_before(handle)
        drv = _driver.raw()
        with memory.on_device(device):
            _driver.call("cuMemcpyDtoHAsync", raw.ctypes.data, drv.CUdeviceptr(lo), raw.nbytes,
                         drv.CUstream(handle))
            _driver.call("cuStreamSynchronize", drv.CUstream(handle))


# ---- construction -----------------------------------------------------------------------------------

def _from_numpy_pointer(arr: np.ndarray) -> Array:
    """Host view of a NumPy array NumPy cannot export through DLPack (ml_dtypes types)."""
    name = dtypes.normalize(arr.dtype, arg="obj")
    ptr, readonly = arr.__array_interface__["data"]
    return Array(ptr=ptr, shape=list(arr.shape), strides=list(arr.strides), dtype=name, device_type=1,
                 device_id=0, readonly=bool(readonly), owner=arr)


def _is_ml_dtypes(dt: np.dtype) -> bool:
    return type(dt).__module__.startswith("ml_dtypes") or dt.type.__module__.startswith("ml_dtypes")


def asarray(obj: Any) -> Array:
    """A zero-copy bridge.Array view of `obj` (bridge.Array, CuPy, torch, DLPack or CAI producers).

    Host producers (NumPy, CPU tensors) give a host view (device 'cpu'): usable for DLPack exchange and
    the CPU simulator; launches refuse it. Nothing is ever copied.
    """
    if isinstance(obj, Array):
        return obj
    if isinstance(obj, np.ndarray) and _is_ml_dtypes(obj.dtype):
        return _from_numpy_pointer(obj)
    consumer = _consumer_stream_for_intake()
    arr = Array(obj, consumer_stream=consumer)
    if arr.device_type == _CUDA and arr.device_id == -1:  # CAI carries no device: ask the driver
        arr = _with_device(arr, _pointer_device(arr.ptr))
    if arr._stream is None and consumer != -1 and not arr.is_host:
        arr._stream = consumer  # a DLPack producer has ordered its work before `consumer`
    return arr


def _pointer_device(ptr: int) -> int:
    if ptr == 0:
        return _driver.current_ordinal()
    drv = _driver.raw()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(_driver.call("cuPointerGetAttribute", attr, drv.CUdeviceptr(ptr)))


def _with_device(arr: Array, device: int) -> Array:
    return Array(ptr=arr.ptr, shape=list(arr.shape), strides=list(arr.strides), dtype=arr.dtype_tag,
                 device_type=arr.device_type, device_id=device, readonly=arr.readonly, owner=arr.owner,
                 stream=arr._stream, stream_generation=arr._stream_generation)


def empty(shape: Any, dtype: Any = "float32", *, device: int | None = None, stream: Any = None) -> Array:
    """Uninitialised device array, allocated (and later freed) in order on `stream`.

    Other streams' first use of it orders after the allocation through the memory log (by address),
    so views, the parent and foreign arrays over the same bytes are all ordered alike."""
    shape = _shape_tuple(shape)
    name = dtypes.normalize(dtype)
    handle, dev, keep = memory.resolve(stream, device)
    item = dtypes.TABLE[name].itemsize
    alloc = memory.allocate(math.prod(shape) * item, device=dev, stream=handle, keep=keep)
    return Array(ptr=alloc.ptr, shape=list(shape), strides=list(_c_strides(shape, item)), dtype=name,
                 device_type=_CUDA, device_id=dev, readonly=False, owner=alloc)


def _home_stream(arr: Array) -> int:
    """The stream a fresh allocation's initial fill goes on: its allocation stream."""
    owner = arr.owner
    return int(owner.stream) if isinstance(owner, memory.DeviceAllocation) else 0


def _memset(arr: Array, pattern: int, itemsize: int | None = None) -> None:
    """Fill the array with the bit pattern `pattern` (unit 1, 2 or 4 bytes), ordered on its stream."""
    unit = itemsize or arr.itemsize
    n = arr.nbytes // unit
    if n == 0:
        return
    drv = _driver.raw()
    fn = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}[unit]
    stream = _home_stream(arr)
    with memory.on_device(arr.device_id):
        _driver.call(fn, drv.CUdeviceptr(arr.ptr), pattern, n, drv.CUstream(stream))
    memory.note_use(arr.ptr, arr.ptr + arr.nbytes, stream, arr.device_id, True)


def zeros(shape: Any, dtype: Any = "float32", *, device: int | None = None, stream: Any = None) -> Array:
    """Device array of zeros (a stream-ordered memset)."""
    out = empty(shape, dtype, device=device, stream=stream)
    _memset(out, 0, itemsize=1)
    return out


def full(shape: Any, fill_value: Any, dtype: Any = "float32", *, device: int | None = None,
         stream: Any = None) -> Array:
    """Device array with every element `fill_value` (converted to `dtype` as NumPy converts it)."""
    name = dtypes.normalize(dtype)
    value = np.array(fill_value, dtype=dtypes.to_numpy(name))
    out = empty(shape, name, device=device, stream=stream)
    if out.itemsize in (1, 2, 4):
        _memset(out, int(value.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[out.itemsize])))
    elif out.size:
        _copy_from_host(out, np.full(out.shape, value, dtype=value.dtype))
    return out


def _like(a: Any, dtype: Any, device: int | None) -> tuple[tuple[int, ...], str, int | None]:
    src = a if isinstance(a, _native.ArrayBase) else asarray(a)
    dev = device if device is not None else (None if src.device_type in _HOST_TYPES else src.device_id)
    return tuple(src.shape), dtypes.normalize(dtype if dtype is not None else src.dtype_tag), dev


def empty_like(a: Any, dtype: Any = None, *, device: int | None = None, stream: Any = None) -> Array:
    """Uninitialised C-contiguous device array with `a`'s shape (and dtype unless given)."""
    shape, name, dev = _like(a, dtype, device)
    return empty(shape, name, device=dev, stream=stream)


def zeros_like(a: Any, dtype: Any = None, *, device: int | None = None, stream: Any = None) -> Array:
    """C-contiguous device array of zeros with `a`'s shape (and dtype unless given)."""
    shape, name, dev = _like(a, dtype, device)
    return zeros(shape, name, device=dev, stream=stream)


def _is_pinned(ptr: int) -> bool:
    """True when `ptr` is page-locked/registered host memory (the driver knows it).

    cuPointerGetAttributes (plural) answers for pageable memory with a zero memory type instead of an
    error, so the query leaves no API error behind (compute-sanitizer reports every failed call).
    """
    drv = _driver.raw()
    attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    err, values = drv.cuPointerGetAttributes(1, [attr], drv.CUdeviceptr(ptr))
    return int(err) == 0 and int(values[0]) != 0       # 0: pageable memory the driver does not know


def _refuse_capture(handle: int, what: str) -> None:
    """A host<->device copy cannot be part of a CUDA graph: replaying it would read (or write) a host
    buffer that Python may have changed or freed, and a pageable copy is synchronous anyway."""
    if handle > 2 and _native.stream_is_capturing(handle):     # 0-2: legacy/per-thread, never captured
        raise RuntimeError(f"{what}: the stream is being captured into a CUDA graph, and a host<->device "
                           f"copy cannot be captured; copy before `bridge.capture()` (or after it) and "
                           f"pass device arrays into the captured launches")


def _copy_from_host(out: Array, src: np.ndarray) -> None:
    """H2D copy of C-contiguous `src` into `out`, ordered on out's stream.

    Pageable source: the driver stages it before returning, so `src` may go right after. Pinned source:
    the copy reads it asynchronously, so we wait for the stream before `src` can be released.
    """
    drv = _driver.raw()
    stream = _home_stream(out)
    handle = drv.CUstream(stream)
    with memory.on_device(out.device_id):
        _driver.call("cuMemcpyHtoDAsync", drv.CUdeviceptr(out.ptr), src.ctypes.data, src.nbytes, handle)
        if _is_pinned(src.ctypes.data):
            _driver.call("cuStreamSynchronize", handle)
    memory.note_use(out.ptr, out.ptr + out.nbytes, stream, out.device_id, True)


def from_host(np_array: Any, *, device: int | None = None, stream: Any = None) -> Array:
    """Explicit host -> device copy of a NumPy array (any strides) into a new C-contiguous Array."""
    src = np.ascontiguousarray(np.asarray(np_array))
    name = dtypes.normalize(src.dtype, arg="np_array")
    _refuse_capture(memory.resolve(stream, device)[0], "from_host")
    out = empty(src.shape, name, device=device, stream=stream)
    if src.nbytes:
        _copy_from_host(out, src)
    return out
