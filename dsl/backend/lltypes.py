"""IR types -> llvmlite.ir types (plus the `bfloat` type llvmlite 0.50 lacks)."""
from __future__ import annotations

import struct

import llvmlite.ir as ir

from dsl.ir.types import ArrayType, ScalarType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
VOID = ir.VoidType()
GENERIC_PTR = ir.PointerType()              # addrspace(0): kernel params, fault record
SHARED_PTR = ir.PointerType(addrspace=3)
SHARED_AS = 3


class BFloatType(ir.Type):
    """LLVM's `bfloat` (llvmlite.ir has no class for it); constants print as 0xR<16 bits>."""
    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def __eq__(self, other) -> bool:
        return isinstance(other, BFloatType)

    def __hash__(self) -> int:
        return hash("bfloat")

    def format_constant(self, value) -> str:
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        # round to nearest even into the top 16 bits (frontend constants are representable anyway)
        if (bits & 0x7F800000) != 0x7F800000:
            bits += 0x7FFF + ((bits >> 16) & 1)
        return f"0xR{(bits >> 16) & 0xFFFF:04X}"


BFLOAT = BFloatType()


def scalar(t: ScalarType) -> ir.Type:
    """Register type of a scalar (bool is i1)."""
    if t.kind == "bool":
        return I1
    if t.is_f8:
        return I8        # raw fp8 bits: only loaded, stored, moved and widened (exprs.Exprs.cast)
    if t.is_float:
        return {"f16": ir.HalfType(), "bf16": BFLOAT, "f32": ir.FloatType(),
                "f64": ir.DoubleType()}[t.name]
    return ir.IntType(t.bits)


def memory(t: ScalarType) -> ir.Type:
    """In-memory type of a scalar (bool occupies one byte, like NumPy's bool_)."""
    return I8 if t.kind == "bool" else scalar(t)


def pointer(a: ArrayType) -> ir.PointerType:
    return SHARED_PTR if a.space == "shared" else GENERIC_PTR
