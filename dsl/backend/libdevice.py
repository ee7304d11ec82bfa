"""Locate libdevice and link only the `__nv_*` functions a module uses.

libdevice is the bitcode library nvcc links for CUDA's math functions, so linking it gives CUDA's
accuracy. It is parsed only for modules that call `__nv_*` (about 50 ms); after `link_in` every function
that is neither a kernel nor exported is made internal, so -O3 inlines the used ones and drops the rest.
"""
from __future__ import annotations

import functools
from pathlib import Path

from dsl.backend.toolkit import locate

REL = Path("nvvm") / "libdevice" / "libdevice.10.bc"


class LibdeviceNotFound(FileNotFoundError):
    """No libdevice.10.bc was found; the message lists where we looked and how to point at one."""


@functools.lru_cache(maxsize=1)      # explicit cache: the location does not change within a process
def find_libdevice() -> Path:
    """libdevice.10.bc as the one toolkit locator finds it (bridge.toolkit: KB_LIBDEVICE, toolkit
    roots, NVIDIA wheels)."""
    found = locate("libdevice")
    if found.path is None:
        raise LibdeviceNotFound(f"libdevice.10.bc {found.describe()}")
    return Path(found.path)


@functools.lru_cache(maxsize=1)
def _bitcode() -> bytes:
    return find_libdevice().read_bytes()


def uses_libdevice(module) -> bool:
    """True when the llvmlite binding module declares any `__nv_*` function."""
    return any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions)


def link_libdevice(module, keep: set[str]) -> None:
    """Link libdevice into `module` (llvmlite binding ModuleRef) and internalise all functions not in
    `keep` (kernels and exported device functions), so unused ones are removed by -O3."""
    import llvmlite.binding as llvm
    if not uses_libdevice(module):
        return
    lib = llvm.parse_bitcode(_bitcode())
    lib.triple = module.triple
    lib.data_layout = module.data_layout
    module.link_in(lib)
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = "internal"
