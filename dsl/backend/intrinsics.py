"""ONE declarative table of what the code generator maps to NVPTX intrinsics, libdevice or LLVM ops.

The builder looks names up here; nothing else in the backend spells an intrinsic name. Each entry says
why it is implemented that way (accuracy matches CUDA: libdevice is what nvcc links).
"""
from __future__ import annotations

from dataclasses import dataclass

# ---------------------------------------------------------------------------- special registers
# IR Special.name -> NVVM intrinsic returning i32 (widened to INDEX by the builder).
SPECIAL_REGS: dict[str, str] = {
    **{f"{reg}.{ax}": f"llvm.nvvm.read.ptx.sreg.{reg}.{ax}"
       for reg in ("tid", "ntid", "ctaid", "nctaid") for ax in ("x", "y", "z")},
    "laneid": "llvm.nvvm.read.ptx.sreg.laneid",
    "dynamic_smem_size": "llvm.nvvm.read.ptx.sreg.dynamic_smem_size",
}
WARP_SIZE = 32                       # "warpsize": a constant on every NVIDIA GPU we target

BARRIER = "llvm.nvvm.barrier0"       # bar.sync 0 (LLVM 22 still accepts and lowers it)
EXIT = "llvm.nvvm.exit"              # PTX `exit`: a failed bounds check ends the thread, never `trap`

# ---------------------------------------------------------------------------- math
@dataclass(frozen=True)
class MathImpl:
    """How one IR Math.fn is computed.

    kind: "llvm" (an exact LLVM intrinsic: `llvm.<name>.<type>`), "libdevice" (`__nv_<name>` for f64,
    `__nv_<name>f` for f32), "fcmp" (a predicate built from comparisons). f16/bf16 operands are widened
    to f32, computed, and rounded back (as CUDA's scalar half math does).
    fast: the libdevice function used instead under options.fastmath (f32 only), if any.
    """
    kind: str
    name: str
    nargs: int = 1
    fast: str | None = None


MATH: dict[str, MathImpl] = {
    "sqrt": MathImpl("llvm", "sqrt"),          # sqrt.rn: correctly rounded like CUDA's sqrtf
    "fabs": MathImpl("llvm", "fabs"),
    "floor": MathImpl("llvm", "floor"),
    "ceil": MathImpl("llvm", "ceil"),
    "trunc": MathImpl("llvm", "trunc"),
    "fma": MathImpl("llvm", "fma", 3),         # fma.rn
    "copysign": MathImpl("llvm", "copysign", 2),
    "fmin": MathImpl("llvm", "minnum", 2),     # IEEE minNum like fminf: a NaN operand is ignored
    "fmax": MathImpl("llvm", "maxnum", 2),
    "rsqrt": MathImpl("libdevice", "rsqrt"),
    "exp": MathImpl("libdevice", "exp", fast="__nv_fast_expf"),
    "exp2": MathImpl("libdevice", "exp2"),
    "log": MathImpl("libdevice", "log", fast="__nv_fast_logf"),
    "log2": MathImpl("libdevice", "log2", fast="__nv_fast_log2f"),
    "log1p": MathImpl("libdevice", "log1p"),
    "sin": MathImpl("libdevice", "sin", fast="__nv_fast_sinf"),
    "cos": MathImpl("libdevice", "cos", fast="__nv_fast_cosf"),
    "tan": MathImpl("libdevice", "tan", fast="__nv_fast_tanf"),
    "tanh": MathImpl("libdevice", "tanh"),
    "erf": MathImpl("libdevice", "erf"),
    "pow": MathImpl("libdevice", "pow", 2, fast="__nv_fast_powf"),
    "fmod": MathImpl("libdevice", "fmod", 2),  # float `%` (C semantics: sign of the dividend)
    "isnan": MathImpl("fcmp", "isnan"),
    "isinf": MathImpl("fcmp", "isinf"),
}
# pow with an integer exponent on a float base: libdevice's exact repeated-multiplication variants.
POW_INT = {"f32": "__nv_powif", "f64": "__nv_powi"}


def libdevice_name(impl: MathImpl, bits: int, fastmath: bool) -> str:
    if bits == 32 and fastmath and impl.fast:
        return impl.fast
    return f"__nv_{impl.name}" + ("f" if bits == 32 else "")


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
ATOMIC_ORDERING = "monotonic"        # relaxed, like CUDA's atomicAdd; LLVM's default scope -> .gpu

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
