"""Public scalar types (`from dsl import f32`) and `dsl.TypeVar` for generic kernels.

Inside a kernel a type object is a cast: `f32(x)`. On the host it converts a Python/NumPy value to the
matching NumPy scalar, so the same expression means the same thing in both places.
"""
from __future__ import annotations

import typing

import numpy as np

from bridge import dtypes as _dtypes
from dsl.ir import types as irt


class ScalarDType:
    """A DSL scalar type: annotation (`x: f32`), cast (`f32(v)`) and key into the typed IR."""

    def __init__(self, ir: irt.ScalarType) -> None:
        self.ir = ir
        self.name = ir.name

    @property
    def numpy_dtype(self) -> np.dtype:
        """The host dtype, from the one dtype table (bf16 uses ml_dtypes.bfloat16)."""
        return _dtypes.to_numpy(self.name)

    def __call__(self, value: object) -> object:
        return self.numpy_dtype.type(value)

    def __repr__(self) -> str:
        return f"dsl.{self.name}"

    def __reduce__(self) -> str:
        return PUBLIC_NAME.get(self.name, self.name)


# One public type per DSL row of bridge/dtypes.py, named like the row (bool is `boolean`: `bool` is
# Python's). The names below are spelled out so that `from dsl import f32` is visible to readers and
# tools; interop_tests/vocab/test_dtype_table_derivations.py checks they are exactly the table's rows.
PUBLIC_NAME = {"bool": "boolean"}
ALL: tuple[ScalarDType, ...] = tuple(ScalarDType(t) for t in irt.SCALARS.values())
BY_NAME: dict[str, ScalarDType] = {PUBLIC_NAME.get(t.name, t.name): t for t in ALL}
BY_IR: dict[irt.ScalarType, ScalarDType] = {t.ir: t for t in ALL}
_BY_NUMPY_NAME = {row.long_name: irt.SCALARS[row.name] for row in _dtypes.kernel_rows()}

f16, bf16, f32, f64 = BY_NAME["f16"], BY_NAME["bf16"], BY_NAME["f32"], BY_NAME["f64"]
i8, i16, i32, i64 = BY_NAME["i8"], BY_NAME["i16"], BY_NAME["i32"], BY_NAME["i64"]
u8, u16, u32, u64 = BY_NAME["u8"], BY_NAME["u16"], BY_NAME["u32"], BY_NAME["u64"]
boolean = BY_NAME["boolean"]
f8e4m3fn, f8e5m2 = BY_NAME["f8e4m3fn"], BY_NAME["f8e5m2"]


class TypeVar:
    """A dtype variable for generic kernels: `T = dsl.TypeVar("T")`, then `simt.Array[T]`.

    Each distinct binding (from the arguments of a launch) compiles a separate specialisation.
    `typing.TypeVar` objects are accepted too.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"TypeVar({self.name!r})"


def is_typevar(obj: object) -> bool:
    return isinstance(obj, (TypeVar, typing.TypeVar))


def ir_scalar_from_dtype(dtype: object) -> irt.ScalarType | None:
    """Map a NumPy dtype, a dtype name (`"float32"`, `"f32"`) or a ScalarDType to the IR type."""
    if isinstance(dtype, ScalarDType):
        return dtype.ir
    if isinstance(dtype, irt.ScalarType):
        return dtype
    if isinstance(dtype, str) and dtype in irt.SCALARS:
        return irt.SCALARS[dtype]
    try:
        name = np.dtype(dtype).name  # type: ignore[arg-type]
    except TypeError:
        return None
    return _BY_NUMPY_NAME.get(name)
