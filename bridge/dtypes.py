"""The one table of element types, shared by arrays, contracts, the DSL and the interop code.

Each row says how one kernelbridge dtype is spelled everywhere it crosses a boundary: the contract name
("f32"), the NumPy/torch name ("float32"), its DLPack (code, bits), its CUDA Array Interface typestr,
the NumPy type that holds it on the host (ml_dtypes for bfloat16 and the float8 family), its kind
(bool/int/uint/float/complex), and — for the types DSL kernels use — the C type AOT headers declare.
dsl reads this table (dsl/ir/types.py, dsl/types.py, the AOT header, the simulators); bridge never
imports dsl. Five C++ lists must agree with this table (docs/contributing.md, "A new dtype", names
them): interop_tests/package/test_dtype_tables.py reads them from the sources, and
interop_tests/arrays/test_dtype_table.py asks the built extension.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from bridge.errors import DTypeError

try:  # optional: host representation of bfloat16 / float8 / float6 / float4
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - depends on the installation
    _ml = None


@dataclass(frozen=True)
class DType:
    """One row of the table."""

    name: str                 # contract spelling: "f32"
    long_name: str            # NumPy/torch spelling: "float32"
    itemsize: int             # bytes per element in memory (sub-byte floats: one element per byte)
    bits: int                 # DLPack bits
    dlpack_code: int          # DLPack DLDataTypeCode
    typestr: str | None       # CUDA Array Interface / NumPy typestr (little-endian), None if it has none
    numpy: str                # attribute of numpy (native types) or of ml_dtypes (extended types)
    torch: str | None         # attribute of the torch module, None when torch has no such type
    kind: str                 # "bool" | "int" | "uint" | "float" | "complex"
    c_type: str | None = None  # C type of an element in AOT headers; None: not a DSL kernel type

    @property
    def kernel(self) -> bool:
        """True for the element types DSL kernels take (the typed IR's scalar types)."""
        return self.c_type is not None

    @property
    def ir_bits(self) -> int:
        """Width in the typed IR (bool is one bit there; eight in memory and in DLPack)."""
        return 1 if self.kind == "bool" else self.bits

    @property
    def cpp_enum(self) -> str:
        """Enumerator of kb::DType (array_view.hpp): the name, `bool_` for the C++ keyword."""
        return "bool_" if self.name == "bool" else self.name

    @property
    def extended(self) -> bool:
        """True for types NumPy lacks (held by ml_dtypes on the host)."""
        return self.numpy == "bfloat16" or self.numpy.startswith(("float8_", "float6_", "float4_"))


# DLPack codes (dlpack.h v1.1): Int=0 UInt=1 Float=2 Bfloat=4 Complex=5 Bool=6, float8 7..14, float6 15/16,
# float4 17.
_ROWS = (
    DType("bool", "bool", 1, 8, 6, "|b1", "bool_", "bool", "bool", "bool"),
    DType("i8", "int8", 1, 8, 0, "|i1", "int8", "int8", "int", "int8_t"),
    DType("i16", "int16", 2, 16, 0, "<i2", "int16", "int16", "int", "int16_t"),
    DType("i32", "int32", 4, 32, 0, "<i4", "int32", "int32", "int", "int32_t"),
    DType("i64", "int64", 8, 64, 0, "<i8", "int64", "int64", "int", "int64_t"),
    DType("u8", "uint8", 1, 8, 1, "|u1", "uint8", "uint8", "uint", "uint8_t"),
    DType("u16", "uint16", 2, 16, 1, "<u2", "uint16", "uint16", "uint", "uint16_t"),
    DType("u32", "uint32", 4, 32, 1, "<u4", "uint32", "uint32", "uint", "uint32_t"),
    DType("u64", "uint64", 8, 64, 1, "<u8", "uint64", "uint64", "uint", "uint64_t"),
    # 16-bit floats are raw 16-bit storage in AOT headers (C++ has no portable half type)
    DType("f16", "float16", 2, 16, 2, "<f2", "float16", "float16", "float", "uint16_t"),
    DType("bf16", "bfloat16", 2, 16, 4, None, "bfloat16", "bfloat16", "float", "uint16_t"),
    DType("f32", "float32", 4, 32, 2, "<f4", "float32", "float32", "float", "float"),
    DType("f64", "float64", 8, 64, 2, "<f8", "float64", "float64", "float", "double"),
    DType("c64", "complex64", 8, 64, 5, "<c8", "complex64", "complex64", "complex"),
    DType("c128", "complex128", 16, 128, 5, "<c16", "complex128", "complex128", "complex"),
    DType("f8e3m4", "float8_e3m4", 1, 8, 7, None, "float8_e3m4", None, "float"),
    DType("f8e4m3", "float8_e4m3", 1, 8, 8, None, "float8_e4m3", None, "float"),
    # the two CUDA fp8 formats are DSL element types (raw bytes in AOT headers): inputs that kernels
    # load and widen (arithmetic on them happens in f32) and tile.matmul operands
    DType("f8e4m3fn", "float8_e4m3fn", 1, 8, 10, None, "float8_e4m3fn", "float8_e4m3fn", "float", "uint8_t"),
    DType("f8e4m3fnuz", "float8_e4m3fnuz", 1, 8, 11, None, "float8_e4m3fnuz", "float8_e4m3fnuz", "float"),
    DType("f8e5m2", "float8_e5m2", 1, 8, 12, None, "float8_e5m2", "float8_e5m2", "float", "uint8_t"),
    DType("f8e5m2fnuz", "float8_e5m2fnuz", 1, 8, 13, None, "float8_e5m2fnuz", "float8_e5m2fnuz", "float"),
    DType("f8e8m0fnu", "float8_e8m0fnu", 1, 8, 14, None, "float8_e8m0fnu", "float8_e8m0fnu", "float"),
    DType("f6e2m3fn", "float6_e2m3fn", 1, 6, 15, None, "float6_e2m3fn", None, "float"),
    DType("f6e3m2fn", "float6_e3m2fn", 1, 6, 16, None, "float6_e3m2fn", None, "float"),
    DType("f4e2m1fn", "float4_e2m1fn", 1, 4, 17, None, "float4_e2m1fn", None, "float"),
)

TABLE: dict[str, DType] = {row.name: row for row in _ROWS}
NAMES: tuple[str, ...] = tuple(TABLE)
KERNEL_NAMES: tuple[str, ...] = tuple(row.name for row in _ROWS if row.kernel)   # DSL element types


def kernel_rows() -> tuple[DType, ...]:
    """The rows of the types DSL kernels take, in table order."""
    return tuple(row for row in _ROWS if row.kernel)



def _build_aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for row in _ROWS:
        for spelling in (row.name, row.long_name, row.numpy, row.torch, row.typestr):
            if spelling:
                aliases.setdefault(spelling, row.name)
    aliases.update({"boolean": "bool", "bool_": "bool", "half": "f16", "float": "f32", "double": "f64"})
    return aliases


# Every accepted spelling -> contract name (built once at import, never changed).
_ALIASES: dict[str, str] = _build_aliases()
_PYTHON_TYPES = {bool: "bool", int: "i64", float: "f64", complex: "c128"}


def normalize(dtype_like: Any, *, arg: str = "dtype") -> str:
    """Contract name ("f32", "bf16", ...) of a name, NumPy dtype/type, ml_dtypes type or torch.dtype."""
    name: str | None = None
    if isinstance(dtype_like, str):
        name = _ALIASES.get(dtype_like.removeprefix("torch."))
    elif isinstance(dtype_like, type) and dtype_like in _PYTHON_TYPES:
        name = _PYTHON_TYPES[dtype_like]
    elif type(dtype_like).__module__ == "torch":  # torch.dtype, without importing torch
        name = _ALIASES.get(str(dtype_like).removeprefix("torch."))
    if name is None and type(dtype_like).__module__ != "torch":
        try:
            dt = np.dtype(dtype_like)
        except (TypeError, ValueError):
            dt = None
        if dt is not None and dt.byteorder in "=|<":
            name = _ALIASES.get(dt.name)
    if name is not None:
        return name
    raise DTypeError(f"{arg}: expected one of {', '.join(NAMES)} (or a NumPy/ml_dtypes/torch dtype of "
                     f"one of them), got {dtype_like!r}")


def info(dtype_like: Any) -> DType:
    """The table row of `dtype_like`."""
    return TABLE[normalize(dtype_like)]


def itemsize(dtype_like: Any) -> int:
    return info(dtype_like).itemsize


def to_numpy(dtype_like: Any) -> np.dtype:
    """The NumPy dtype that holds this type on the host (extended types need ml_dtypes)."""
    row = info(dtype_like)
    if not row.extended:
        return np.dtype(getattr(np, row.numpy))
    if _ml is None or not hasattr(_ml, row.numpy):
        raise DTypeError(f"{row.long_name} has no NumPy representation here: install ml_dtypes "
                         f"(pip install ml_dtypes) to read it on the host")
    return np.dtype(getattr(_ml, row.numpy))


def numpy_or_name(dtype_like: Any) -> np.dtype | str:
    """NumPy dtype when one exists on this machine, else the long name (bf16 without ml_dtypes)."""
    try:
        return to_numpy(dtype_like)
    except DTypeError:
        return info(dtype_like).long_name


def to_torch(dtype_like: Any) -> Any:
    """The torch.dtype of this type (imports torch)."""
    row = info(dtype_like)
    if row.torch is None:
        raise DTypeError(f"{row.long_name} has no torch dtype")
    import torch
    return getattr(torch, row.torch)


def from_dlpack(code: int, bits: int, lanes: int = 1) -> str | None:
    """Contract name of a DLPack (code, bits, lanes), None when unsupported."""
    if lanes != 1:
        return None
    for row in _ROWS:
        if row.dlpack_code == code and row.bits == bits:
            return row.name
    return None


def from_typestr(typestr: str) -> str | None:
    """Contract name of a CUDA Array Interface typestr ('<f4'), None when unsupported."""
    key = typestr.replace("=", "<", 1) if typestr.startswith("=") else typestr
    row_name = _ALIASES.get(key)
    return row_name if row_name is not None and TABLE[row_name].typestr == key else None
