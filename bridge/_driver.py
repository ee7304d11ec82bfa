"""The one Python module that touches the CUDA driver (through cuda.bindings).

Importing it never fails: on a machine without a driver, `available()` is False and `reason()` says why,
and every call raises `NoDeviceError`. Contexts are the devices' *primary* contexts — the ones CuPy and
PyTorch use — so device pointers are shared with them.
"""
from __future__ import annotations

import threading
from typing import Any

from bridge.errors import CudaError, NoDeviceError

try:  # cuda.bindings imports without a driver; its first call then raises.
    from cuda.bindings import driver as _drv
    _import_error: str | None = None
except Exception as exc:  # pragma: no cover - depends on the installation
    _drv = None
    _import_error = f"cuda.bindings is not importable: {exc}"

_lock = threading.Lock()
_init_state: bool | None = None      # None: not tried; True: ok; False: failed (see _init_reason)
_init_reason = ""
_primary: dict[int, int] = {}        # documented cache: device ordinal -> retained primary context handle


def _init() -> bool:
    global _init_state, _init_reason
    if _init_state is not None:
        return _init_state
    with _lock:
        if _init_state is not None:
            return _init_state
        if _drv is None:
            _init_state, _init_reason = False, _import_error or "cuda.bindings missing"
            return False
        try:
            (err,) = _drv.cuInit(0)
        except Exception as exc:  # DynamicLibNotFoundError when libcuda.so is absent
            _init_state, _init_reason = False, f"no CUDA driver on this machine ({type(exc).__name__}: {exc})"
            return False
        if int(err) != 0:
            _init_state, _init_reason = False, f"cuInit failed: {_error_name(err)}"
            return False
        err, n = _drv.cuDeviceGetCount()
        if int(err) != 0 or n == 0:
            _init_state, _init_reason = False, "the CUDA driver reports no device"
            return False
        _init_state = True
        return True


def available() -> bool:
    """True when a driver and at least one CUDA device are present."""
    return _init()


def reason() -> str:
    """Why `available()` is False ('' when it is True)."""
    _init()
    return _init_reason


def require() -> None:
    if not _init():
        raise NoDeviceError(f"no usable CUDA device: {_init_reason}")


def _error_name(err: Any) -> str:
    try:
        e2, name = _drv.cuGetErrorName(err)
        return name.decode() if int(e2) == 0 else str(int(err))
    except Exception:
        return str(err)


def call(name: str, *args: Any) -> Any:
    """Call driver function `name`, raise CudaError on failure, return its results.

    Returns None for no result, the value for one, a tuple for several.
    """
    require()
    res = getattr(_drv, name)(*args)
    err = res[0]
    if int(err) != 0:
        e2, text = _drv.cuGetErrorString(err)
        raise CudaError(name, int(err), _error_name(err), text.decode() if int(e2) == 0 else "")
    if len(res) == 1:
        return None
    return res[1] if len(res) == 2 else tuple(res[1:])


def device_count() -> int:
    return call("cuDeviceGetCount") if _init() else 0


def primary_context(ordinal: int) -> int:
    """Retain (once, cached for the process) and return the primary context of device `ordinal`."""
    require()
    ctx = _primary.get(ordinal)
    if ctx is None:
        with _lock:
            ctx = _primary.get(ordinal)
            if ctx is None:
                n = call("cuDeviceGetCount")
                if not 0 <= ordinal < n:
                    raise NoDeviceError(f"device {ordinal} does not exist ({n} device(s) present)")
                dev = call("cuDeviceGet", ordinal)
                ctx = int(call("cuDevicePrimaryCtxRetain", dev))
                _primary[ordinal] = ctx
    return ctx


def ensure_current(ordinal: int = 0) -> None:
    """Make the primary context of `ordinal` current on this thread (cheap when it already is)."""
    ctx = primary_context(ordinal)
    if int(call("cuCtxGetCurrent")) != ctx:
        call("cuCtxSetCurrent", _drv.CUcontext(ctx))


def current_context() -> int:
    """Handle of the context current on this thread (0 when none is, or without a driver)."""
    return int(call("cuCtxGetCurrent")) if _init() else 0


def restore_context(saved: int) -> None:
    """Make the saved context `saved` current again. When none was current (0), device 0's primary
    context may stay (what CUDA's lazy initialisation makes current anyway); any other is removed, so
    the current device reads as before (the native ScopedDevice follows the same rule)."""
    cur = int(call("cuCtxGetCurrent"))
    if cur == saved or (saved == 0 and cur == _primary.get(0)):
        return
    call("cuCtxSetCurrent", _drv.CUcontext(saved))


def current_ordinal() -> int:
    """Device ordinal of the context current on this thread (0 when none is current yet).

    Asked of the driver every time: launches and other per-device calls switch contexts natively
    for their duration, so no Python-side record of "the current device" could be trusted."""
    if not _init():
        return 0
    cur = int(call("cuCtxGetCurrent"))
    if cur == 0:
        return 0
    for ordinal, ctx in list(_primary.items()):
        if ctx == cur:
            return ordinal
    return int(call("cuCtxGetDevice"))


def raw() -> Any:
    """The cuda.bindings.driver module, for enums and handle types (None without cuda.bindings)."""
    return _drv
