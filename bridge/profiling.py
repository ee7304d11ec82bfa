"""Profiler hooks: opt-in NVTX ranges around every validated launch, named after the kernel, so Nsight
Systems shows which kernel each launch is (`KB_NVTX=1` at start-up, or `bridge.set_nvtx(True)`)."""
from __future__ import annotations

from bridge import _native
from bridge.settings import env_switch


def set_nvtx(on: bool = True) -> None:
    """Turn the per-launch NVTX ranges on or off (ValueError when the extension was built without the
    NVTX3 headers: see `nvtx_status()`)."""
    _native.set_nvtx(bool(on))


def nvtx_status() -> dict:
    """{"compiled": NVTX headers were found at build time, "on": ranges are pushed, "ranges": how many}."""
    compiled, on, ranges = _native.nvtx_status()
    return {"compiled": bool(compiled), "on": bool(on), "ranges": int(ranges)}


def _apply_environment() -> None:
    """`KB_NVTX` (an on/off switch, bridge/settings.py), read once when bridge is imported: on turns the
    ranges on from the first launch when the build has the NVTX headers (without them it changes nothing,
    as ranges cannot be pushed)."""
    if env_switch("KB_NVTX", False) and _native.nvtx_status()[0]:
        _native.set_nvtx(True)


_apply_environment()
