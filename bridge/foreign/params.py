"""Kernel parameter lists: what a contract packs, and the wrap-time comparison with what an image declares.

Why: the launcher packs one parameter buffer per contract (cpp/include/kernelbridge/detail/param_pack.hpp:
per array one 8-byte pointer, plus ndim i64 extents and ndim i64 strides for the `view` ABI; per scalar
its dtype's size at that alignment; then 128-byte tensor maps at 64; then the 8-byte fault record), at
the next aligned offset. A foreign kernel compiled by someone else must take exactly that list, or a
launch would hand it garbage. `check_params` compares the two when the kernel is wrapped and raises
ForeignKernelError naming the kernel, the parameter and both sizes; nothing is launched to find out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from bridge import dtypes
from bridge.contract import native_contract
from bridge.errors import ForeignKernelError

__all__ = ["Param", "contract_params", "check_params"]


@dataclass(frozen=True)
class Param:
    """One kernel parameter. size/align in bytes; offset when the image states it (cubins); pointer:
    True when the image marks it a pointer (PTX `.ptr`), None when it does not say; kind: the PTX type
    class ('f' float, 'i' integer, 'b' untyped bits) or '' when unknown; what: who it is, for messages."""

    size: int
    align: int
    offset: int | None = None
    pointer: bool | None = None
    kind: str = ""
    what: str = ""


def _arg_params(arg: dict[str, Any]) -> list[Param]:
    name = arg["name"]
    if arg["kind"] == "scalar":
        row = dtypes.info(arg["dtype"])
        kind = "f" if row.kind in ("float", "complex") else "i"
        return [Param(row.itemsize, row.itemsize, pointer=False, kind=kind, what=f"'{name}', {arg['dtype']} scalar")]
    out = [Param(8, 8, pointer=True, what=f"'{name}', pointer to {arg['dtype']}")]
    if arg.get("abi", "pointer") == "view":
        ndim = int(arg["ndim"])
        out += [Param(8, 8, pointer=False, kind="i", what=f"'{name}', extent {d}") for d in range(ndim)]
        out += [Param(8, 8, pointer=False, kind="i", what=f"'{name}', stride {d}") for d in range(ndim)]
    return out


def contract_params(contract: Any, kernel: str = "") -> list[Param]:
    """The parameters a launch of `contract` packs, in order, with the launcher's (naive) offsets."""
    native = native_contract(contract, kernel or getattr(contract, "kernel", "kernel"))
    d = json.loads(native.to_json())
    params: list[Param] = []
    for arg in d.get("args", []):
        params += _arg_params(arg)
    params += [Param(128, 64, pointer=False, kind="b", what=f"tensor map of '{t['arg']}'")
               for t in d.get("tensor_maps", [])]
    if d.get("fault_sites"):
        params.append(Param(8, 8, pointer=True, what="the fault record pointer (bounds-checked kernels)"))
    if len(params) != native.param_count:      # the packer's own count: this list must not drift from it
        raise AssertionError(f"{d.get('kernel')}: bridge.foreign lists {len(params)} parameters, the launcher "
                             f"packs {native.param_count} (param_pack.hpp changed: update params.py)")
    placed, end = [], 0
    for p in params:
        at = (end + p.align - 1) // p.align * p.align
        placed.append(Param(p.size, p.align, at, p.pointer, p.kind, p.what))
        end = at + p.size
    return placed


def _listing(params: Sequence[Param]) -> str:
    return "; ".join(f"#{i} {p.what or f'{p.size} bytes'}" for i, p in enumerate(params)) or "none"


def check_params(kernel: str, expected: Sequence[Param], actual: Sequence[Param], source: str, *,
                 offsets: bool = True) -> None:
    """Raise ForeignKernelError at the first difference between the contract's parameters (`expected`)
    and the image's (`actual`, read from `source`, e.g. "the PTX entry"): count, size, alignment,
    offset (when `offsets` and the image states them), a pointer where the contract has a scalar, or a
    float where the contract has an integer (and the reverse)."""
    for i, (e, a) in enumerate(zip(expected, actual)):
        def fail(why: str, exp: int | None = None, act: int | None = None) -> None:
            raise ForeignKernelError(f"{kernel}: kernel parameter #{i} ({e.what}): {why}", kernel=kernel,
                                     param=i, expected=exp, actual=act, arg_name=e.what.split("'")[1]
                                     if e.what.count("'") >= 2 else None)
        if e.size != a.size:
            fail(f"the contract packs {e.size} bytes, {source} declares {a.size} bytes", e.size, a.size)
        if a.align and e.align != a.align:
            fail(f"the contract packs it at {e.align}-byte alignment, {source} declares {a.align}", e.align, a.align)
        if offsets and a.offset is not None and e.offset != a.offset:
            fail(f"the contract packs it at byte offset {e.offset}, {source} declares offset {a.offset}",
                 e.offset, a.offset)
        if a.pointer and e.pointer is False:
            fail(f"{source} declares a pointer (.ptr), the contract a scalar")
        if e.kind in ("f", "i") and a.kind in ("f", "i") and e.kind != a.kind:
            names = {"f": "a floating-point value", "i": "an integer"}
            fail(f"the contract passes {names[e.kind]}, {source} declares {names[a.kind]}")
    if len(expected) != len(actual):
        n = min(len(expected), len(actual))
        extra = (f"the contract's parameter #{n} ({expected[n].what}) has no counterpart" if len(expected) > n
                 else f"{source}'s parameter #{n} ({actual[n].size} bytes) is not in the contract")
        raise ForeignKernelError(
            f"{kernel}: the contract packs {len(expected)} kernel parameter(s), {source} declares "
            f"{len(actual)}: {extra} (the contract packs: {_listing(expected)})", kernel=kernel, param=n,
            expected=len(expected), actual=len(actual))
