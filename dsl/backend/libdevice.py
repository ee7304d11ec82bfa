"""Locate libdevice and link only the `__nv_*` functions a module uses.

libdevice is the bitcode library nvcc links for CUDA's math functions, so linking it gives CUDA's
accuracy. It is parsed only for modules that call `__nv_*` (about 50 ms); after `link_in` every function
that is neither a kernel nor exported is made internal, so -O3 inlines the used ones and drops the rest.

The file is input like any other: the locator takes only a regular file of at most MAX_LIBDEVICE_BYTES
(never a directory, nor a device such as /dev/zero, whose read never ends); it is read with that bound
and must be LLVM bitcode before LLVM parses it. When a `KB_*` setting is what is wrong (`KB_LIBDEVICE`
naming something else, `KB_CUDA_HOME` not a directory) the error is a ConfigurationError naming it;
a libdevice the locator found elsewhere that is missing or unusable is LibdeviceNotFound.
"""
from __future__ import annotations

import functools
from pathlib import Path

from bridge.errors import ConfigurationError
from bridge.toolkit import MAX_LIBDEVICE_BYTES
from dsl.backend.toolkit import locate
from dsl.errors import DslTargetError

BITCODE_MAGICS = (b"BC\xc0\xde", b"\xde\xc0\x17\x0b")   # raw bitcode, the bitcode wrapper
_EXPECTED = f"a libdevice.10.bc file: a regular file of LLVM bitcode of at most {MAX_LIBDEVICE_BYTES} bytes"


class LibdeviceNotFound(DslTargetError, FileNotFoundError):
    """No usable libdevice.10.bc was found; the message lists where we looked and how to point at one."""


def _refusal(by: str, why: str) -> Exception:
    """The error for an unusable libdevice: a ConfigurationError when the KB_* setting `by` chose it (the
    setting is what to change), else LibdeviceNotFound."""
    if by.startswith("KB_"):
        expected = _EXPECTED if by == "KB_LIBDEVICE" else "a CUDA toolkit root (or 'none')"
        return ConfigurationError(f"libdevice.10.bc: {why}; {by} must name {expected}, or be left unset",
                                  variable=by)
    return LibdeviceNotFound(f"libdevice.10.bc is unusable: {why} (found by {by}); set KB_LIBDEVICE to "
                             f"{_EXPECTED}")


def _file_refusal(by: str, path: str, what: str) -> Exception:
    """_refusal for the file at `path` that `by` found, which `what` ("is not LLVM bitcode")."""
    return _refusal(by, f"{by}={path} {what}" if by == "KB_LIBDEVICE" else f"{path} {what}")


@functools.lru_cache(maxsize=1)      # explicit cache: the location does not change within a process
def find_libdevice() -> Path:
    """libdevice.10.bc as the one toolkit locator finds it (bridge.toolkit: KB_LIBDEVICE, toolkit
    roots, NVIDIA wheels)."""
    return Path(_located()[0])


def _located() -> tuple[str, str]:
    """(path, found_by) of libdevice now (about 0.2 ms), or the refusal."""
    found = locate("libdevice")
    if found.path is None:
        if found.variable:
            raise _refusal(found.variable, found.problem)
        raise LibdeviceNotFound(f"libdevice.10.bc {found.describe()}")
    return found.path, found.found_by


@functools.lru_cache(maxsize=2)
def _bitcode(path: str, found_by: str) -> bytes:
    """The bytes of libdevice at `path`: read with a bound, and LLVM bitcode."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_LIBDEVICE_BYTES + 1)
    except OSError as exc:
        raise _file_refusal(found_by, path, f"cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_LIBDEVICE_BYTES:
        raise _file_refusal(found_by, path, f"has more than {MAX_LIBDEVICE_BYTES} bytes")
    if not data.startswith(BITCODE_MAGICS):
        raise _file_refusal(found_by, path, f"is not LLVM bitcode (it starts with {data[:4]!r})")
    return data


def uses_libdevice(module) -> bool:
    """True when the llvmlite binding module declares any `__nv_*` function."""
    return any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions)


def link_libdevice(module, keep: set[str]) -> None:
    """Link libdevice into `module` (llvmlite binding ModuleRef) and internalise all functions not in
    `keep` (kernels and exported device functions), so unused ones are removed by -O3."""
    import llvmlite.binding as llvm
    if not uses_libdevice(module):
        return
    path, found_by = _located()          # located now: a setting changed since is honoured
    try:
        lib = llvm.parse_bitcode(_bitcode(path, found_by))
    except RuntimeError as exc:          # LLVM refused the bytes: damaged bitcode
        first = str(exc).strip().splitlines()[:1] or ["LLVM refused it"]
        raise _file_refusal(found_by, path, f"is damaged LLVM bitcode ({first[0]})") from None
    lib.triple = module.triple
    lib.data_layout = module.data_layout
    module.link_in(lib)
    for fn in module.functions:
        if not fn.is_declaration and fn.name not in keep:
            fn.linkage = "internal"
