"""`simt.Array[T, ndim]` and `simt.DisjointSlice[T, ndim]`: parameter annotations of SIMT kernels.

They are annotations only: a kernel receives NumPy/CuPy/torch/bridge arrays, and the annotation says
what the kernel may do with them (read anything; write only its own element of a DisjointSlice).
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.types import ScalarDType, is_typevar


@dataclass(frozen=True)
class ArraySpec:
    """What `Array[...]` / `DisjointSlice[...]` evaluates to: dtype (ScalarDType or TypeVar), ndim."""
    dtype: object
    ndim: int
    writable: bool

    def __repr__(self) -> str:
        kind = "DisjointSlice" if self.writable else "Array"
        return f"simt.{kind}[{self.dtype!r}, {self.ndim}]"


def _spec(item: object, writable: bool, kind: str) -> ArraySpec:
    parts = item if isinstance(item, tuple) else (item,)
    if len(parts) not in (1, 2):
        raise TypeError(f"simt.{kind}[dtype] or simt.{kind}[dtype, ndim] expected, got {item!r}")
    dtype, ndim = parts[0], (parts[1] if len(parts) == 2 else 1)
    if not (isinstance(dtype, ScalarDType) or is_typevar(dtype)):
        raise TypeError(f"simt.{kind}[...]: dtype must be a dsl scalar type (f32, i32, ...) or a "
                        f"dsl.TypeVar, got {dtype!r}")
    if not isinstance(ndim, int) or isinstance(ndim, bool) or not 1 <= ndim <= 3:
        raise TypeError(f"simt.{kind}[...]: ndim must be 1, 2 or 3, got {ndim!r}")
    return ArraySpec(dtype, ndim, writable)


class Array:
    """Read-only kernel array of any strides: `simt.Array[f32]`, `simt.Array[T, 2]`."""

    def __class_getitem__(cls, item: object) -> ArraySpec:
        return _spec(item, False, "Array")

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("simt.Array is an annotation (simt.Array[f32, 1]); pass NumPy/CuPy/torch "
                        "or bridge arrays to the kernel")


class DisjointSlice:
    """Writable kernel array; each thread may write only the element(s) it owns."""

    def __class_getitem__(cls, item: object) -> ArraySpec:
        return _spec(item, True, "DisjointSlice")

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("simt.DisjointSlice is an annotation (simt.DisjointSlice[f32, 1]); pass "
                        "NumPy/CuPy/torch or bridge arrays to the kernel")
