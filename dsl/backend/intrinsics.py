"""ONE declarative table of what the code generator maps to NVPTX intrinsics, libdevice or LLVM ops.

The builder looks names up here; nothing else in the backend spells an intrinsic name. Each entry says
why it is implemented that way (accuracy matches CUDA: libdevice is what nvcc links). Math functions
are the rows of the one math table, dsl/vocab/math.py; this module only reads it.
"""
from __future__ import annotations

from dsl.vocab import math as _vocab
from dsl.vocab.math import Lowering

# ---------------------------------------------------------------------------- special registers
# IR Special.name -> NVVM intrinsic returning i32 (widened to INDEX by the builder).
SPECIAL_REGS: dict[str, str] = {
    **{f"{reg}.{ax}": f"llvm.nvvm.read.ptx.sreg.{reg}.{ax}"
       for reg in ("tid", "ntid", "ctaid", "nctaid") for ax in ("x", "y", "z")},
    "laneid": "llvm.nvvm.read.ptx.sreg.laneid",
    "dynamic_smem_size": "llvm.nvvm.read.ptx.sreg.dynamic_smem_size",
    # thread-block clusters (sm_90+; dsl/vocab/launch.py): rank and size in the cluster, position in it
    "cluster_ctarank": "llvm.nvvm.read.ptx.sreg.cluster.ctarank",
    "cluster_nctarank": "llvm.nvvm.read.ptx.sreg.cluster.nctarank",
    **{f"cluster_ctaid.{ax}": f"llvm.nvvm.read.ptx.sreg.cluster.ctaid.{ax}" for ax in ("x", "y", "z")},
}
WARP_SIZE = 32                       # "warpsize": a constant on every NVIDIA GPU we target

BARRIER = "llvm.nvvm.barrier0"       # bar.sync 0 (LLVM 22 still accepts and lowers it)
EXIT = "llvm.nvvm.exit"              # PTX `exit`: a failed bounds check ends the thread, never `trap`

# ---------------------------------------------------------------------------- math
# How each IR Math.fn is computed is its row's `lowering` in the math table (dsl/vocab/math.py):
# "llvm" (an exact LLVM intrinsic `llvm.<name>.<type>`), "libdevice" (`__nv_<name>` for f64,
# `__nv_<name>f` for f32; `fast` replaces it under options.fastmath, f32 only) or "fcmp" (a predicate
# built from comparisons). f16/bf16 operands of libdevice functions are widened to f32, computed, and
# rounded back (as CUDA's scalar half math does).
def math_lowering(fn: str) -> Lowering | None:
    """The lowering of math function `fn`, None when the table has no such row."""
    row = _vocab.get(fn)
    return None if row is None else row.lowering


def libdevice_name(impl: Lowering, bits: int, fastmath: bool) -> str:
    return impl.libdevice_name(bits, fastmath)


def pow_int(work: str) -> str:
    """libdevice's float ** int (exact repeated multiplication; exponent i32): __nv_powif / __nv_powi."""
    row = _vocab.get("pow")
    assert row is not None and row.int_exponent
    return Lowering("libdevice", row.int_exponent).libdevice_name(32 if work == "f32" else 64)


# The LLVM intrinsics behind float min/max and abs operators: the fmin/fmax/fabs rows' lowerings.
def float_op_intrinsic(fn: str) -> str:
    low = math_lowering(fn)
    assert low is not None and low.kind == "llvm", fn
    return low.name


# ---------------------------------------------------------------------------- atomics
# IR Atomic.op -> LLVM atomicrmw operation, per operand kind ("int", "uint", "float").
ATOMIC_RMW: dict[str, dict[str, str]] = {
    "add": {"int": "add", "uint": "add", "float": "fadd"},
    "sub": {"int": "sub", "uint": "sub", "float": "fsub"},
    "min": {"int": "min", "uint": "umin", "float": "fmin"},
    "max": {"int": "max", "uint": "umax", "float": "fmax"},
    "exch": {"int": "xchg", "uint": "xchg", "float": "xchg"},
    "and_": {"int": "and", "uint": "and"},
    "or_": {"int": "or", "uint": "or"},
    "xor": {"int": "xor", "uint": "xor"},
}
ATOMIC_ORDERING = "monotonic"        # relaxed, like CUDA's atomicAdd; at the device scope (.gpu), which
# dsl/backend/codegen.py adds to every atomic (LLVM's default, the system, gave `atom.relaxed.sys`)

# ---------------------------------------------------------------------------- warp
FULL_MASK = 0xFFFFFFFF
# IR Warp.op -> (shfl mode, clamp operand c): c = 0x1f for idx/down/bfly, 0 for up (PTX shfl rules:
# a source lane outside the warp segment returns the thread's own value).
SHFL: dict[str, tuple[str, int]] = {
    "shfl": ("idx", 0x1F), "shfl_up": ("up", 0), "shfl_down": ("down", 0x1F), "shfl_xor": ("bfly", 0x1F),
}
VOTE: dict[str, str] = {"ballot": "ballot", "any": "any", "all": "all"}
WARP_SUM_MASKS = (16, 8, 4, 2, 1)    # butterfly: every lane computes v + shfl_xor(v, m) in this order


def shfl_intrinsic(mode: str, is_float: bool) -> str:
    return f"llvm.nvvm.shfl.sync.{mode}.{'f32' if is_float else 'i32'}"


def vote_intrinsic(op: str) -> str:
    return f"llvm.nvvm.vote.{VOTE[op]}.sync"
