"""Types of the typed kernel IR. Immutable and hashable: they key caches and specialisations.

This module imports nothing else from `dsl` (see docs/dsl.md, "stages"); its scalar types are the DSL
rows of the one dtype table, bridge/dtypes.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bridge import dtypes as _dtypes


class Type:
    """Base of all IR types."""


@dataclass(frozen=True)
class ScalarType(Type):
    name: str          # "f32", "i64", "bool", ...
    kind: str          # "float" | "int" | "uint" | "bool"
    bits: int

    @property
    def itemsize(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_f8(self) -> bool:
        """f8e4m3fn or f8e5m2: storage formats; arithmetic on them happens in f32 (promote)."""
        return self.kind == "float" and self.bits == 8

    @property
    def is_half(self) -> bool:
        """f16 or bf16: the 2-byte floats whose arithmetic is done in f32 and rounded back."""
        return self.name in ("f16", "bf16")

    def __repr__(self) -> str:
        return self.name


# One ScalarType per DSL element type of the one dtype table (bridge/dtypes.py: rows with a C type).
SCALARS: dict[str, ScalarType] = {row.name: ScalarType(row.name, row.kind, row.ir_bits)
                                  for row in _dtypes.kernel_rows()}
BOOL, I8, I16, I32, I64 = (SCALARS[n] for n in ("bool", "i8", "i16", "i32", "i64"))
U8, U16, U32, U64 = (SCALARS[n] for n in ("u8", "u16", "u32", "u64"))
F16, BF16, F32, F64 = (SCALARS[n] for n in ("f16", "bf16", "f32", "f64"))
F8E4M3, F8E5M2 = SCALARS["f8e4m3fn"], SCALARS["f8e5m2"]


@dataclass(frozen=True)
class F8Format:
    """What a conversion to an fp8 type needs: mantissa bits, exponent bias, largest finite value
    (what .satfinite saturates to; e4m3fn has no infinities, so its top is not the IEEE pattern)."""
    mantissa: int
    bias: int
    max: float


F8_FORMATS = {"f8e4m3fn": F8Format(3, 7, 448.0), "f8e5m2": F8Format(2, 15, 57344.0)}
INDEX = I64            # type of indices, lengths, ThreadIndex components


@dataclass(frozen=True)
class ArrayType(Type):
    """A kernel array parameter or a shared-memory array.

    writable: a DisjointSlice (global) or shared memory. layout: "any" (strided) or "C" (contiguous,
    specialised at launch). aligned16: the data pointer is 16-byte aligned (specialised at launch; lets
    chunked accesses use vector loads/stores). space: "global" | "shared". shape: static shape for shared
    arrays (None for global; -1 in a shape entry = dynamic shared memory, length from the launch).
    optional: the parameter may be None (`simt.Array[f32] | None`); absent: this specialisation was
    given None (a null pointer and zero extents reach the kernel; `x is not None` is False).
    """
    dtype: ScalarType
    ndim: int
    writable: bool = False
    layout: str = "any"
    aligned16: bool = False
    space: str = "global"
    shape: tuple[int, ...] | None = None
    optional: bool = False
    absent: bool = False

    def __repr__(self) -> str:
        kind = "Shared" if self.space == "shared" else ("DisjointSlice" if self.writable else "Array")
        extra = f", {self.layout}" + (", a16" if self.aligned16 else "") + \
            (", None" if self.absent else ", optional" if self.optional else "")
        return f"{kind}[{self.dtype}, {self.ndim}{extra}]"


@dataclass(frozen=True)
class TensorMapType(Type):
    """A kernel parameter holding the TMA tensor map (CUtensorMap, 128 bytes) of array parameter
    `array`, built by the launcher from the validated view (contract "tensor_maps": `box` in the
    array's axis order, `swizzle` bytes). Lowered kernels append these after their other parameters;
    reading one gives its 64-bit generic address (a __grid_constant__ parameter)."""
    array: str
    box: tuple[int, ...]
    swizzle: int

    def __repr__(self) -> str:
        return f"TensorMap[{self.array}, box={self.box}, swizzle={self.swizzle}]"


@dataclass(frozen=True)
class ThreadIndexType(Type):
    """The value of simt.thread.index_Nd(): unforgeable; a tuple of `ndim` INDEX components
    ordered like array indices (row-major: the last component varies fastest across threads)."""
    ndim: int


@dataclass(frozen=True)
class ChunkType(Type):
    """simt.thread.chunk_1d(n): this thread owns elements [start, start + n) of every 1-D slice;
    chunk_2d / chunk_3d (ndim 2, 3): that run along the last axis of the row its other ThreadIndex
    components name."""
    n: int
    ndim: int = 1


@dataclass(frozen=True)
class SlotType(Type):
    """Result of `out.get_mut(i)`: an optional handle that must be tested before `.set(v)`."""
    array: ArrayType


@dataclass(frozen=True)
class TupleType(Type):
    elems: tuple[Type, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class VoidType(Type):
    def __repr__(self) -> str:
        return "void"


VOID = VoidType()


def compute_type(t: ScalarType) -> ScalarType:
    """The type a value of `t` computes in: f8 values are storage only, so f32; any other, itself."""
    return F32 if t.is_f8 else t


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """Result type of a binary arithmetic op on two *typed* operands (NumPy-like, no weak literals).

    float beats int; wider beats narrower; f16 with bf16 gives f32; an f8 operand counts as f32 (f8
    values are only stored, never computed in); signed with unsigned of the same width gives the signed
    type of twice the width (capped at i64 — as NumPy, minus the f64 surprise).
    """
    if a.is_f8 or b.is_f8:
        return promote(compute_type(a), compute_type(b))
    if a == b:
        return a
    if a.is_float or b.is_float:
        if a.is_float and b.is_float:
            if {a.name, b.name} == {"f16", "bf16"}:
                return F32
            return a if a.bits >= b.bits else b
        return a if a.is_float else b
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.is_signed else (b, a)
    if s.bits > u.bits:
        return s
    return SCALARS[f"i{min(64, 2 * max(s.bits, u.bits))}"]
