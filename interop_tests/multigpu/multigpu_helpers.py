"""Shared helpers of the multi-GPU tests: made-up device arrays of any device (never dereferenced),
driver-less Launchers of a given device, and the contracts they use."""
from __future__ import annotations

import json
from typing import Any

import bridge
from bridge import _native


def fake_array(device: int, n: int = 37, ptr: int = 1 << 20, dtype: str = "float32") -> bridge.Array:
    """A device array view on cuda:`device` at a made-up address (only ever validated, never launched)."""
    return bridge.Array(ptr=ptr, shape=[n], strides=[4 if dtype == "float32" else 8], dtype=dtype, device_type=2,
                        device_id=device, readonly=False, owner=None)


def arrays_on(device: int, n: int = 37, *, out_device: int | None = None) -> tuple[bridge.Array, ...]:
    """(a, b, out) of the vecadd contract on `device` (out on `out_device` when given), disjoint."""
    return (fake_array(device, n, 1 << 20), fake_array(device, n, 1 << 22),
            fake_array(device if out_device is None else out_device, n, 1 << 24))


def vecadd_contract(kernel: str = "vecadd") -> str:
    def arr(name: str, access: str = "read") -> dict[str, Any]:
        return {"name": name, "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 4,
                "access": access, "abi": "pointer"}
    return json.dumps({
        "version": 1, "kernel": kernel, "domain": 1, "block": {"max_threads": 512},
        "args": [arr("a"), arr("b"), arr("out", "write"), {"name": "n", "kind": "scalar", "dtype": "i32"}],
        "requires": ["len(a) == len(out)", "len(b) == len(out)", "n == len(out)"],
        "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    })


def scalar_contract(kernel: str = "tick") -> str:
    """A kernel without arrays: its device comes from the stream, else the current device."""
    return json.dumps({"version": 1, "kernel": kernel, "domain": 1, "block": {"max_threads": 256},
                       "args": [{"name": "n", "kind": "scalar", "dtype": "i32"}]})


def limits_of(device: int) -> Any:
    lim = _native.DeviceLimits()
    lim.device_id = device
    lim.cc = 90
    return lim


def launcher_on(device: int, contract_json: str | None = None) -> Any:
    """A native Launcher of cuda:`device` with a null function (every launch here stops before the
    driver: a validation error, or the missing driver on machines without one)."""
    return _native.Launcher(0, _native.Contract(contract_json or vecadd_contract()), limits_of(device),
                            _native.FuncAttrs(), device)
