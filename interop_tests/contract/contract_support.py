"""Helpers shared by the contract tests: contracts as dicts, fake device arrays, a generous device."""
from __future__ import annotations

import json
from typing import Any

from bridge import _native

BASE = 0x7F00_0000_0000  # fake device addresses: the validator never dereferences them

# A contract using every field of the schema (the schema tests and the contract fuzz target start from it)
GOOD_CONTRACT: dict[str, Any] = {
    "version": 1, "kernel": "vecadd", "domain": 1, "block": {"exact": [256, 1, 1]}, "dynamic_smem": {"exact": 0},
    "min_cc": 80,
    "args": [
        {"name": "a", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "any", "align": 4, "access": "read",
         "abi": "view"},
        {"name": "out", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 16, "access": "write",
         "abi": "view"},
        {"name": "s", "kind": "scalar", "dtype": "f32"},
    ],
    "requires": ["len(a) == len(out)", "a.shape == out.shape"],
    "inplace": [["a", "out"]],
    "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    "fault_sites": [{"id": 1, "array": "a", "file": "k.py", "line": 12, "text": "x = a[j]"}],
}


def contract(args: list[dict[str, Any]], kernel: str = "k", **extra: Any) -> Any:
    """A native Contract from args and top-level keys."""
    return _native.Contract(json.dumps({"kernel": kernel, "args": args, **extra}))


def arr(name: str, dtype: str = "f32", ndim: int = 1, **kw: Any) -> dict[str, Any]:
    return {"name": name, "kind": "array", "dtype": dtype, "ndim": ndim, **kw}


def sca(name: str, dtype: str = "i32") -> dict[str, Any]:
    return {"name": name, "kind": "scalar", "dtype": dtype}


def desc(shape: tuple[int, ...], dtype: str = "f32", ptr: int = BASE, strides: tuple[int, ...] | None = None,
         device_type: int = 2, device_id: int = 0, readonly: bool = False) -> Any:
    """A described device array (C-contiguous unless strides, in bytes, are given)."""
    return _native.ArrayDesc(ptr, list(shape), None if strides is None else list(strides), dtype, device_type,
                             device_id, readonly)


def limits(**kw: Any) -> Any:
    """H200-like device limits (cc 9.0), overridable."""
    d = _native.DeviceLimits()
    d.device_id, d.cc, d.max_threads_per_block = 0, 90, 1024
    d.max_block, d.max_grid = (1024, 1024, 64), (2147483647, 65535, 65535)
    d.smem_per_block, d.smem_per_block_optin, d.sm_count = 49152, 232448, 132
    for k, v in kw.items():
        setattr(d, k, v)
    return d


def attrs(**kw: Any) -> Any:
    a = _native.FuncAttrs()
    a.max_threads_per_block, a.static_smem, a.num_regs, a.max_dynamic_smem = 1024, 0, 32, 49152
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def run(c: Any, args: list[Any], grid: Any = None, block: Any = None, smem: Any = None, lim: Any = None,
        fn: Any = None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return _native.validate(c, args, grid=grid, block=block, smem=smem, limits=lim or limits(), attrs=fn or attrs())
