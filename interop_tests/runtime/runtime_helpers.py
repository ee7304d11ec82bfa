"""Shared helpers of the runtime tests: the hand-made test kernels (kernels/rt_kernels.ptx) and contracts."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any



KERNELS = Path(__file__).parent / "kernels"


def rt_ptx() -> str:
    return (KERNELS / "rt_kernels.ptx").read_text()


def arr(name: str, dtype: str = "f32", ndim: int = 1, layout: str = "any", access: str = "read",
        abi: str = "pointer", align: int = 0) -> dict[str, Any]:
    return {"name": name, "kind": "array", "dtype": dtype, "ndim": ndim, "layout": layout, "align": align,
            "access": access, "abi": abi}


def scalar(name: str, dtype: str) -> dict[str, Any]:
    return {"name": name, "kind": "scalar", "dtype": dtype}


def vecadd_contract(kernel: str = "vecadd", **over: Any) -> str:
    """The strict vecadd contract of the bad-launch matrix; `over` replaces top-level keys."""
    c: dict[str, Any] = {
        "version": 1, "kernel": kernel, "domain": 1, "block": {"max_threads": 512}, "min_cc": 70,
        "args": [arr("a", layout="C", align=16), arr("b"), arr("out", layout="C", access="write", align=16),
                 scalar("n", "i32")],
        "requires": ["len(a) == len(out)", "len(b) == len(out)", "n == len(out)"],
        "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    }
    c.update(over)
    return json.dumps(c)




def checked_get_contract() -> str:
    """Contract of checked_get: a run-time bounds check with one fault site (as the DSL emits it)."""
    return json.dumps({
        "version": 1, "kernel": "checked_get", "domain": 1, "block": {"exact": [1, 1, 1]},
        "args": [arr("data", abi="view"), arr("out", access="write", abi="view"), scalar("idx", "i64")],
        "fault_sites": [{"id": 7, "array": "data", "file": "k.py", "line": 12, "text": "x = data[idx]"}],
    })


def spin_contract() -> str:
    return json.dumps({
        "version": 1, "kernel": "spin_fill", "domain": 1, "block": {"max_threads": 1024},
        "args": [arr("out", access="write"), scalar("n", "i32"), scalar("v", "f32"), scalar("cycles", "i64")],
        "requires": ["n == len(out)"], "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    })


def spin_copy_contract() -> str:
    return json.dumps({
        "version": 1, "kernel": "spin_copy", "domain": 1, "block": {"max_threads": 1024},
        "args": [arr("a"), arr("out", access="write"), scalar("n", "i32"), scalar("cycles", "i64")],
        "requires": ["len(a) == len(out)", "n == len(out)"], "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    })


def scale2d_contract() -> str:
    return json.dumps({
        "version": 1, "kernel": "scale2d", "domain": 2, "block": {"max_threads": 1024},
        "args": [arr("a", ndim=2, abi="view"), arr("out", ndim=2, layout="C", access="write", abi="view"),
                 scalar("s", "f32"), scalar("c", "f64")],
        "requires": ["a.shape == out.shape"], "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    })


def smem_contract() -> str:
    return json.dumps({
        "version": 1, "kernel": "smem_copy", "domain": 1, "block": {"max_threads": 1024},
        "dynamic_smem": {"max": 200 * 1024},
        "args": [arr("a"), arr("out", access="write"), scalar("n", "i32")],
        "requires": ["len(a) == len(out)", "n == len(out)"], "grid_from": {"arg": "out", "per_thread": [1, 1, 1]},
    })


def all_contracts() -> dict[str, str]:
    return {"vecadd": vecadd_contract(), "spin_fill": spin_contract(), "spin_copy": spin_copy_contract(),
            "scale2d": scale2d_contract(),
            "smem_copy": smem_contract(), "checked_get": checked_get_contract(),
            "vecadd_lb256": vecadd_contract("vecadd_lb256", block={"max_threads": 1024})}


SPIN_CYCLES = 200_000      # ~0.1 ms on an H200: long enough that a missing dependency shows


def under_compute_sanitizer() -> bool:
    """True inside `compute-sanitizer` (2025.3 sets NV_SANITIZER_INJECTION_* in the programs it runs;
    seen on the H200 image). Some of its tools (initcheck) finish each piece of GPU work before the
    host call returns, so a test cannot arrange for a kernel to be still running when the next call is
    queued."""
    import os
    return any(k.startswith("NV_SANITIZER_INJECTION") for k in os.environ)
