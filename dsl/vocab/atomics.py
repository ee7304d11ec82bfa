"""The atomic operations and the element types each takes: one table for both front ends.

Why one table: SIMT's `simt.atomic.<op>` and the tile model's `tile.atomic_<op>` / `tile.scatter_<op>`
lower to the same IR node (`Atomic`, dsl/backend/memory.py: LLVM `atomicrmw`, or `cmpxchg` for cas),
so what one front end accepts the other must accept too. An entry is what `atom`/`red` do in one
instruction or what LLVM's NVPTX back end expands into a compare-and-swap loop (float max/min; f16 and
bf16 add on older archs). The tile model offers the subset TILE_OPS.
"""
from __future__ import annotations

from dsl.ir.types import ScalarType

_INTS = ("i32", "u32", "i64", "u64")

# op -> element types (dsl/ir/types.py names). cas on floats is left out: it compares bit patterns,
# which is not what `==` means for -0.0 / NaN (write it on the integer view of the word if you mean bits).
ATOMIC_DTYPES: dict[str, tuple[str, ...]] = {
    "add": _INTS + ("f16", "bf16", "f32", "f64"),
    "sub": _INTS,
    "max": _INTS + ("f32", "f64"),
    "min": _INTS + ("f32", "f64"),
    "exch": _INTS + ("f32", "f64"),
    "cas": _INTS,
    "and_": _INTS,
    "or_": _INTS,
    "xor": _INTS,
}

TILE_OPS = ("add", "max", "min")    # tile.atomic_<op> / tile.scatter_<op>


def atomic_dtype_ok(op: str, dtype: ScalarType) -> bool:
    """Whether atomic `op` takes elements of `dtype`."""
    return dtype.name in ATOMIC_DTYPES.get(op, ())


def atomic_dtypes_text(op: str) -> str:
    """The element types of `op`, for error messages."""
    return ", ".join(ATOMIC_DTYPES[op])
