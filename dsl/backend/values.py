"""Code-generator values that are not one LLVM scalar: arrays, tuples, get_mut slots.

Every such value flattens to a list of LLVM scalars ("leaves") and is rebuilt from them, so a local
variable of any IR type is a set of allocas (mem2reg turns them back into SSA values).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

import llvmlite.ir as ir

from dsl.ir.types import ArrayType


@dataclass
class ArrayVal:
    """An array: data pointer, per-axis extents and strides (i64, strides in elements).

    key identifies the underlying allocation (a Param or SharedAlloc) for "known in range" facts.
    invariant: loads may be marked `!invariant.load` (read-only and not in an in-place pair).
    """
    type: ArrayType
    name: str
    ptr: ir.Value
    extents: list[ir.Value]
    strides: list[ir.Value]
    key: Any
    invariant: bool = False


@dataclass
class TupleVal:
    elems: list[Any]


@dataclass
class SlotVal:
    """Result of get_mut: where to store, and whether the index was in range."""
    array: ArrayVal
    indices: list[ir.Value]
    ok: ir.Value


def leaves(val: Any) -> list[ir.Value]:
    if isinstance(val, ArrayVal):
        return [val.ptr, *val.extents, *val.strides]
    if isinstance(val, TupleVal):
        return [leaf for e in val.elems for leaf in leaves(e)]
    if isinstance(val, SlotVal):
        return [*leaves(val.array), *val.indices, val.ok]
    return [val]


def rebuild(template: Any, it: Iterator[ir.Value]) -> Any:
    """Inverse of `leaves`, using `template` (a value of the same IR type) for the shape."""
    if isinstance(template, ArrayVal):
        n = len(template.extents)
        ptr = next(it)
        ext = [next(it) for _ in range(n)]
        strides = [next(it) for _ in range(n)]
        return replace(template, ptr=ptr, extents=ext, strides=strides)
    if isinstance(template, TupleVal):
        return TupleVal([rebuild(e, it) for e in template.elems])
    if isinstance(template, SlotVal):
        arr = rebuild(template.array, it)
        idx = [next(it) for _ in template.indices]
        return SlotVal(arr, idx, next(it))
    return next(it)
