"""CUDA devices: identity, live limits for launch contracts, the current device, peer access.

Why cached per ordinal: a device's attributes never change in a process, and every contract check
needs its limits; they are read once through `bridge._driver` into a `_native.DeviceLimits`.
Only primary contexts are used (the ones CuPy and PyTorch use), so pointers are shared with them.

The current device changes only when asked (`Device.make_current()`, `with bridge.Device(n):`): a
launch, allocation, copy or synchronisation for device n makes n's context current for its own
duration and restores the caller's (docs/architecture.md "Devices").
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from bridge import _current_stream, _driver, _native
from bridge.errors import NoDeviceError, PeerAccessError, raise_faults

# Attribute name in cuda.bindings -> what we call it.
_ATTRS = {
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": "cc_major",
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": "cc_minor",
    "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": "sm_count",
    "CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK": "max_threads_per_block",
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X": "block_x",
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y": "block_y",
    "CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z": "block_z",
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X": "grid_x",
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y": "grid_y",
    "CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z": "grid_z",
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK": "smem_per_block",
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": "smem_per_block_optin",
    "CU_DEVICE_ATTRIBUTE_WARP_SIZE": "warp_size",
}

_cache: dict[int, Device] = {}    # documented cache: ordinal -> Device (attributes never change)
_cache_lock = threading.Lock()
_tls = threading.local()          # per thread: stack of _Scope objects of open `with Device(n):` blocks


def device_count() -> int:
    """Number of CUDA devices (0 on a machine without driver or GPU)."""
    return _driver.device_count() if _driver.available() else 0


def current_device() -> Device:
    """The device whose primary context is current on this thread (device 0 when none is yet)."""
    _driver.require()
    return Device(_driver.current_ordinal())


class Device:
    """One CUDA device: `bridge.Device(i)` returns the same object for the same ordinal."""

    ordinal: int
    name: str
    cc: tuple[int, int]
    sm_count: int
    total_memory: int

    def __new__(cls, ordinal: int = 0) -> Device:
        if isinstance(ordinal, Device):
            return ordinal
        if not isinstance(ordinal, int) or isinstance(ordinal, bool):
            raise TypeError(f"device ordinal must be an int, got {type(ordinal).__name__}")
        dev = _cache.get(ordinal)
        if dev is not None:
            return dev
        _driver.require()
        n = _driver.device_count()
        if not 0 <= ordinal < n:
            raise NoDeviceError(f"device {ordinal} does not exist ({n} device(s) present)")
        with _cache_lock:
            dev = _cache.get(ordinal)
            if dev is None:
                dev = super().__new__(cls)
                dev._load(ordinal)
                _cache[ordinal] = dev
        return dev

    def _load(self, ordinal: int) -> None:
        drv = _driver.raw()
        handle = _driver.call("cuDeviceGet", ordinal)
        attrs: dict[str, int] = {}
        for cu_name, key in _ATTRS.items():
            attrs[key] = int(_driver.call("cuDeviceGetAttribute", getattr(drv.CUdevice_attribute, cu_name),
                                          handle))
        raw_name = _driver.call("cuDeviceGetName", 256, handle)
        self.ordinal = ordinal
        self.name = bytes(raw_name).split(b"\0", 1)[0].decode(errors="replace")
        self.cc = (attrs["cc_major"], attrs["cc_minor"])
        self.sm_count = attrs["sm_count"]
        self.total_memory = int(_driver.call("cuDeviceTotalMem", handle))
        self.warp_size = attrs["warp_size"]
        self.limits = _make_limits(ordinal, attrs)

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.cc

    @property
    def arch(self) -> str:
        """The `sm_XY` name of this device's architecture."""
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def make_current(self) -> None:
        """Make this device's primary context current on the calling thread."""
        _driver.ensure_current(self.ordinal)

    def synchronize(self) -> None:
        """Wait for all work on this device, then report device-side faults (bridge.KernelFault)."""
        synchronize(self)

    def __enter__(self) -> Device:
        """`with bridge.Device(n):` device n is current inside for bridge, PyTorch and CuPy (those two
        when already imported; never imports them); a bridge current stream of another device gives
        way to n's legacy default stream. Everything is restored on exit; blocks nest."""
        scope = _Scope(self.ordinal)
        scope.enter()
        _tls.__dict__.setdefault("stack", []).append(scope)
        return self

    def __exit__(self, *exc: Any) -> None:
        stack = getattr(_tls, "stack", None)
        if stack:
            stack.pop().exit()

    def can_access_peer(self, peer: Device | int) -> bool:
        """True when kernels on this device can access memory of `peer` (cuDeviceCanAccessPeer)."""
        _driver.require()
        return bool(_native.can_access_peer(self.ordinal, Device(peer).ordinal))

    def enable_peer_access(self, peer: Device | int) -> None:
        """Let kernels on this device access memory of `peer` (once per pair; launches with
        `peer_access=True` do this for the devices they name). PeerAccessError when impossible."""
        other = Device(peer)
        if not _native.enable_peer_access(self.ordinal, other.ordinal):
            raise PeerAccessError(f"device {self.ordinal} cannot access memory of device {other.ordinal} "
                                  f"(cuDeviceCanAccessPeer says no); copy with bridge.copy_peer instead")

    def __int__(self) -> int:
        return self.ordinal

    def __index__(self) -> int:
        return self.ordinal

    def __repr__(self) -> str:
        return (f"<bridge.Device {self.ordinal}: {self.name}, cc {self.cc[0]}.{self.cc[1]}, "
                f"{self.sm_count} SMs, {self.total_memory / 2**30:.1f} GiB>")


def _make_limits(ordinal: int, a: dict[str, int]) -> Any:
    """The launch-relevant limits as the native validator reads them."""
    lim = _native.DeviceLimits()
    values = {
        "device_id": ordinal,
        "cc": a["cc_major"] * 10 + a["cc_minor"],
        "max_threads_per_block": a["max_threads_per_block"],
        "max_block": (a["block_x"], a["block_y"], a["block_z"]),
        "max_grid": (a["grid_x"], a["grid_y"], a["grid_z"]),
        "smem_per_block": a["smem_per_block"],
        "smem_per_block_optin": max(a["smem_per_block_optin"], a["smem_per_block"]),
        "sm_count": a["sm_count"],
    }
    for key, value in values.items():
        setattr(lim, key, value)
    return lim


def synchronize(device: Device | int | None = None) -> None:
    """Wait for all work on `device` (current by default), then raise KernelFault for recorded faults."""
    dev = resolve_device(device)
    _native.device_synchronize(dev)
    raise_faults(_native.take_faults(None, dev))


def resolve_device(device: Device | int | None) -> int:
    """Ordinal of `device` (None: the current device; works without a GPU, then 0)."""
    if device is None:
        return _driver.current_ordinal()
    if isinstance(device, Device):
        return device.ordinal
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError(f"device ordinal must be >= 0, got {device}")
        return device
    # torch.device / cupy.cuda.Device
    index = getattr(device, "index", None)
    if index is None:
        index = getattr(device, "id", None)
    if isinstance(index, int):
        return index
    raise TypeError(f"device must be a bridge.Device, an int ordinal or None, got {type(device).__name__}")


class _Scope:
    """What `with Device(n):` changed on this thread, to undo it on exit (innermost first)."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self.ctx: int | None = None        # the driver context current before
        self.stream: int | None = None     # the bridge current stream handle, when it was replaced
        self.torch: int | None = None      # torch's current device before
        self.cupy: Any = None              # the cupy.cuda.Device entered

    def enter(self) -> None:
        handle, device = _current_stream.device_of_current()   # (its device as known before the switch)
        self.ctx = _driver.current_context()
        try:
            _driver.ensure_current(self.ordinal)
            if handle > 2 and device != self.ordinal:
                self.stream = int(_native.set_current_stream_handle(0))
            torch = sys.modules.get("torch")
            cuda = getattr(torch, "cuda", None)
            if cuda is not None and cuda.is_available():
                self.torch = int(cuda.current_device())
                cuda.set_device(self.ordinal)
            cupy = sys.modules.get("cupy")
            if cupy is not None:
                dev = cupy.cuda.Device(self.ordinal)
                dev.__enter__()
                self.cupy = dev
        except BaseException:
            self.exit()
            raise

    def exit(self) -> None:
        try:
            if self.cupy is not None:
                self.cupy.__exit__(None, None, None)
            if self.torch is not None:
                sys.modules["torch"].cuda.set_device(self.torch)
            if self.stream is not None:
                _native.set_current_stream_handle(self.stream)
        finally:
            if self.ctx is not None:
                _driver.restore_context(self.ctx)
            self.ctx = self.stream = self.torch = self.cupy = None
