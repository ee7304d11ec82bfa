"""PTX operand type names of the tensor-core input dtypes, shared by the mma.sync and wgmma loops."""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir.types import BF16, F8E4M3, F8E5M2, F16, F32, ScalarType

_NAMES = {BF16: "bf16", F16: "f16", F32: "tf32", F8E4M3: "e4m3", F8E5M2: "e5m2"}


def mma_type(t: ScalarType) -> str:
    """"bf16", "f16", "tf32" (f32 operands run as tf32), "e4m3" or "e5m2"."""
    return _NAMES[t]


def operand_type(name: str) -> ScalarType:
    """The IR type of a PTX operand type name (mma_type's inverse; "tf32" is F32)."""
    return next(t for t, n in _NAMES.items() if n == name)


@dataclass(frozen=True)
class WgmmaOp:
    """One warpgroup MMA form: N, the operand type names, B MN-major (imm-trans-b 1, 16-bit types
    only) and A from registers (4 a thread, mma.sync's A fragment per warp) instead of a descriptor,
    or A from a descriptor MN-major (imm-trans-a 1, 16-bit types only: a transposed operand).
    `slice`: which m64 slice of the warpgroup's rows the accumulators are (the simulator's wait adds
    each product to its slice's registers; not part of the PTX text)."""
    n: int
    a_type: str
    b_type: str
    trans_b: bool
    a_regs: bool = False
    slice: int = 0
    trans_a: bool = False
