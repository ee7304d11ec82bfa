"""Public scalar types (`from dsl import f32`) and `dsl.TypeVar` for generic kernels.

Inside a kernel a type object is a cast: `f32(x)`. On the host it converts a Python/NumPy value to the
matching NumPy scalar, so the same expression means the same thing in both places.
"""
from __future__ import annotations

import typing

import numpy as np

from dsl.ir import types as irt


class ScalarDType:
    """A DSL scalar type: annotation (`x: f32`), cast (`f32(v)`) and key into the typed IR."""

    def __init__(self, ir: irt.ScalarType, numpy_name: str) -> None:
        self.ir = ir
        self.name = ir.name
        self._numpy_name = numpy_name

    @property
    def numpy_dtype(self) -> np.dtype:
        """The host dtype (bf16 uses ml_dtypes.bfloat16)."""
        if self.name == "bf16":
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self._numpy_name)

    def __call__(self, value: object) -> object:
        return self.numpy_dtype.type(value)

    def __repr__(self) -> str:
        return f"dsl.{self.name}"

    def __reduce__(self) -> str:
        return self.name


f16 = ScalarDType(irt.F16, "float16")
bf16 = ScalarDType(irt.BF16, "bfloat16")
f32 = ScalarDType(irt.F32, "float32")
f64 = ScalarDType(irt.F64, "float64")
i8 = ScalarDType(irt.I8, "int8")
i16 = ScalarDType(irt.I16, "int16")
i32 = ScalarDType(irt.I32, "int32")
i64 = ScalarDType(irt.I64, "int64")
u8 = ScalarDType(irt.U8, "uint8")
u16 = ScalarDType(irt.U16, "uint16")
u32 = ScalarDType(irt.U32, "uint32")
u64 = ScalarDType(irt.U64, "uint64")
boolean = ScalarDType(irt.BOOL, "bool")

ALL: tuple[ScalarDType, ...] = (f16, bf16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, boolean)
BY_IR: dict[irt.ScalarType, ScalarDType] = {t.ir: t for t in ALL}
_NUMPY_NAMES = {"float16": irt.F16, "float32": irt.F32, "float64": irt.F64, "int8": irt.I8,
                "int16": irt.I16, "int32": irt.I32, "int64": irt.I64, "uint8": irt.U8,
                "uint16": irt.U16, "uint32": irt.U32, "uint64": irt.U64, "bool": irt.BOOL,
                "bfloat16": irt.BF16}


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
    return _NUMPY_NAMES.get(name)
