"""The NVPTX target: one LLVM target machine per arch (cached), the PTX ISA version per arch.

PTX versions are picked conservatively: the lowest ISA that supports the arch and everything the code
generator emits (native bf16 add needs 7.8; 8.0 covers sm_80..sm_87; the f8 mma.sync of sm_89 and
sm_90 needs 8.4), so the PTX is accepted by the CUDA 13.0 driver's JIT and by ptxas 13.0 (which reads
PTX up to 9.0).
"""
from __future__ import annotations

import functools
import re
import threading

from dsl.errors import DslTargetError

TRIPLE = "nvptx64-nvidia-cuda"

# arch (compute capability) -> PTX ISA version (major*10+minor) used for it.
PTX_VERSION: dict[int, int] = {
    75: 80, 80: 80, 86: 80, 87: 80, 89: 84, 90: 84,
    100: 86, 101: 86, 103: 88, 110: 90, 120: 87, 121: 88,
}
SUPPORTED_ARCHS = tuple(f"sm_{cc}" for cc in PTX_VERSION)

_init_lock = threading.Lock()
_initialised = False


class TargetError(DslTargetError, ValueError):
    """An unknown or unsupported GPU architecture was requested."""


def parse_arch(arch: str | int) -> int:
    """'sm_90' / 'sm_90a' / 'compute_90' / 90 -> 90. Raises TargetError naming what is accepted."""
    if isinstance(arch, int):
        cc = arch
    else:
        m = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})a?", str(arch).strip())
        if not m:
            raise TargetError(f"arch: expected 'sm_XY' such as 'sm_90', got {arch!r}")
        cc = int(m.group(1))
    if cc not in PTX_VERSION:
        raise TargetError(f"arch: unsupported compute capability sm_{cc}; "
                          f"supported: {', '.join(SUPPORTED_ARCHS)}")
    return cc


def ptx_version(arch: str | int) -> int:
    return PTX_VERSION[parse_arch(arch)]


def canonical_arch(arch: str | int, specific: bool = False) -> str:
    """'sm_XY', or 'sm_XYa' (the arch-specific target: instructions such as wgmma that only that
    chip family runs) when `arch` says so or `specific` is set."""
    cc = parse_arch(arch)
    return f"sm_{cc}a" if specific or str(arch).strip().endswith("a") else f"sm_{cc}"


def initialise_llvm() -> None:
    """Register the LLVM targets and asm printers once per process (llvmlite 0.50 needs both)."""
    global _initialised
    with _init_lock:
        if not _initialised:
            import llvmlite.binding as llvm
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            _initialised = True


def target_machine(arch: str | int):
    """The llvmlite TargetMachine for `arch` ('sm_90', or 'sm_90a' for the arch-specific target) at
    -O3. Fast-math is expressed per instruction (`fast` flags, `__nv_fast_*`), not on the machine,
    so one machine serves both."""
    return _target_machine(canonical_arch(arch))


@functools.lru_cache(maxsize=None)   # explicit, documented cache: target machines are immutable
def _target_machine(arch: str):
    import llvmlite.binding as llvm
    initialise_llvm()
    cc = parse_arch(arch)
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=f"+ptx{PTX_VERSION[cc]}", opt=3,
                                        reloc="default", codemodel="default")


def llvm_version() -> str:
    """'llvmlite X / LLVM a.b.c' — part of every cache key."""
    import llvmlite
    import llvmlite.binding as llvm
    return f"llvmlite {llvmlite.__version__} / LLVM {'.'.join(map(str, llvm.llvm_version_info))}"
