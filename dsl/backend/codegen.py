"""The LLVM half of the pipeline: typed IR -> LLVM IR text -> optimised module -> PTX text.

Each step is a plain function so dsl/compiler.py can run, dump, or start from any of them.
"""
from __future__ import annotations

import re

from dsl.backend.builder import BuildOptions, ModuleBuilder
from dsl.backend.libdevice import link_libdevice
from dsl.backend.target import initialise_llvm, target_machine
from dsl.ir import nodes as N


class LlvmIR(str):
    """LLVM IR text plus the symbols that must stay external (kernel, exported functions) and the
    slow paths the code generator took (dsl.perf.SlowPath records: the compile collects them)."""
    keep: frozenset[str]
    slow_paths: tuple

    def __new__(cls, text: str, keep: frozenset[str], slow_paths: tuple = ()):
        obj = super().__new__(cls, text)
        obj.keep = keep
        obj.slow_paths = tuple(slow_paths)
        return obj


# An atomic instruction's ordering, to which the device scope is added (see _device_scope).
_ATOMIC_ORDERING = re.compile(r"(\b(?:atomicrmw|cmpxchg)\b[^\n]*?) (monotonic(?: monotonic)?)\b")


def _device_scope(text: str) -> str:
    """Every atomicrmw / cmpxchg at the device scope, as CUDA's atomicAdd / atomicCAS are (`.gpu`).
    llvmlite's builder cannot name a scope, and LLVM's default is the system: NVPTX emitted
    `atom.relaxed.sys.global.cas` for a cmpxchg (and for the compare-and-swap loop a float atomic
    max expands into), a stronger scope than the CUDA C++ it stands for."""
    return _ATOMIC_ORDERING.sub(r'\1 syncscope("device") \2', text)


def to_llvm_ir(fn: N.Function, options: BuildOptions) -> LlvmIR:
    mb = ModuleBuilder(fn, options)
    module = mb.build()
    return LlvmIR(_device_scope(str(module)), frozenset(mb.keep), tuple(mb.slow_paths))


def optimize(llvm_ir: LlvmIR, arch: str | int):
    """Parse + verify, link libdevice if used, run the -O3 new-pass-manager pipeline for `arch`."""
    import llvmlite.binding as llvm
    initialise_llvm()
    tm = target_machine(arch)
    mod = llvm.parse_assembly(str(llvm_ir))
    mod.verify()
    mod.data_layout = str(tm.target_data)
    link_libdevice(mod, set(getattr(llvm_ir, "keep", ())))
    pto = llvm.PipelineTuningOptions(speed_level=3)
    pb = llvm.PassBuilder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    mod.verify()
    return mod


# A bf16 comparison carrying the f32 flush-to-zero modifier, which PTX has no form of.
_BF16_SETP_FTZ = re.compile(r"\b(setp\.\w+)\.ftz(\.bf16(?:x2)?)\b")


def emit_ptx(module, arch: str | int) -> str:
    """PTX of `module`. Under an f32 flush-to-zero denormal mode (the ftz options) LLVM 22's NVPTX
    back end selects `setp.<cmp>.ftz.bf16` for sm_90's native bf16 compares, which ptxas refuses
    ("Illegal modifier '.ftz'"): the modifier is dropped there (a bf16 compare keeps denormals)."""
    return _BF16_SETP_FTZ.sub(r"\1\2", target_machine(arch).emit_assembly(module))
