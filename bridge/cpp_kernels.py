"""The package's own CUDA C++ kernels (cpp/kernels/*.cu), built into fatbins by `pip install`.

Each `cpp/kernels/<name>.cu` is installed as `bridge/kernels/<name>.fatbin` with its launch contracts
embedded (see docs/cpp.md), so `load(name)` gives a module whose kernels launch validated:

    mod = bridge.cpp_kernels.load("saxpy")
    mod.saxpy(2.0, x, y, len(y))

The GPT-2 training-step kernels of `cpp/kernels/llm/<family>.cu` are installed the same way, as
`llm_<family>.fatbin` (`LLM_KERNELS`; `llm_kernel("layernorm_forward")` gives one kernel).

Without nvcc at install time the kernels are not built; `build_info()` / `status()` say so (pip shows
the CMake warning only with -v; an install from a terminal also prints one line there) and `path()` / `load()` raise `CppKernelsMissing` naming what is missing and how to
get it.

`cmake_dir()` is where `kernelbridge.cmake` / `kernelbridgeConfig.cmake` live, for a user's own CMake
project (`-Dkernelbridge_DIR=$(python -c "import bridge; print(bridge.cmake_dir())")`).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bridge import _native
from bridge.module import load_module

__all__ = ["KERNELS", "LLM_KERNELS", "CppKernelsMissing", "path", "load", "llm_kernel", "available",
           "kernels_dirs", "build_info", "status", "cmake_dir", "include_dir"]

# The modules cpp/kernels/ provides; each holds one kernel of the same name.
KERNELS: tuple[str, ...] = ("saxpy", "transpose", "block_reduce_sum", "legacy_softmax")

# The GPT-2 training-step kernels of cpp/kernels/llm/<family>.cu: module llm_<family> -> its kernels.
LLM_KERNELS: dict[str, tuple[str, ...]] = {
    "llm_layernorm": ("layernorm_forward", "layernorm_backward"),
    "llm_gelu": ("gelu_forward_bf16", "gelu_backward_bf16", "gelu_forward_f32", "gelu_backward_f32"),
    "llm_residual": ("residual_forward",),
    "llm_encoder": ("encoder_forward", "encoder_backward"),
    "llm_crossentropy": ("crossentropy_forward", "crossentropy_backward"),
    "llm_adamw": ("adamw_update",),
    "llm_global_norm": ("global_norm_squared",),
}

_SOURCE_TREE = Path(__file__).resolve().parent.parent  # a checkout: <repo>/bridge/cpp_kernels.py


def _package_dirs() -> list[Path]:
    """Every directory the `bridge` package spans: where the build installed its parts (next to the
    extension: kernels/, cmake/, include/, _build_info.json), then where its Python sources are (the
    same directory, except in an editable install)."""
    return list(dict.fromkeys(Path(os.path.dirname(f)) for f in (_native.__file__, __file__)))


def kernels_dirs() -> list[Path]:
    """Directories searched for `<name>.fatbin`, in order."""
    return [d / "kernels" for d in _package_dirs()]


def available() -> list[str]:
    """Names of the installed kernel modules (empty when the package was built without nvcc)."""
    found = {p.stem for d in kernels_dirs() if d.is_dir() for p in d.glob("*.fatbin")}
    return sorted(found)


class CppKernelsMissing(FileNotFoundError):
    """A C++ kernel module is not installed; the message says why (e.g. no nvcc at build time) and how
    to get it."""


def build_info() -> dict | None:
    """What the package build found and built (`bridge/_build_info.json`, written by CMake), or None
    for a checkout that was never built or an unreadable record."""
    for d in _package_dirs():
        candidate = d / "_build_info.json"
        if candidate.is_file():
            try:
                info = json.loads(candidate.read_text())
            except (OSError, ValueError, UnicodeDecodeError):
                return None
            return info if isinstance(info, dict) else None
    return None


def status() -> str:
    """One plain sentence: which C++ kernel modules are installed, or why none are and how to get them."""
    have = available()
    info = build_info() or {}
    kernels = info.get("cpp_kernels") if isinstance(info.get("cpp_kernels"), dict) else {}
    nvcc = info.get("nvcc") if isinstance(info.get("nvcc"), dict) else {}
    if have:
        built_with = (f" (built with nvcc {nvcc.get('version') or '?'} found by {nvcc.get('found_by')}, "
                      f"sm {'/'.join(map(str, kernels.get('archs') or []))})" if nvcc.get("path") else "")
        return f"C++ kernels installed: {', '.join(have)}{built_with}"
    if kernels and not kernels.get("built", True):
        return (f"C++ kernels NOT built: {kernels.get('reason') or 'nvcc was missing at build time'}. "
                f"To get them: {kernels.get('hint') or 'install the CUDA toolkit'}, then reinstall "
                "kernelbridge (pip install .)")
    if not info:
        return ("C++ kernels NOT installed: no build record (bridge/_build_info.json); install kernelbridge "
                "with pip (pip install .) to build them")
    return "C++ kernels NOT installed although the build recorded them: reinstall kernelbridge"


def path(name: str) -> Path:
    """Installed fatbin of kernel module `name`; CppKernelsMissing says where it looked and why."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name: expected a kernel module name such as {KERNELS[0]!r}, got {name!r}")
    searched = kernels_dirs()
    for d in searched:
        candidate = d / f"{name}.fatbin"
        if candidate.is_file():
            return candidate
    have = available()
    if have:
        raise CppKernelsMissing(f"no C++ kernel module {name!r} in {', '.join(map(str, searched))}; "
                                f"installed modules: {', '.join(have)}")
    raise CppKernelsMissing(f"C++ kernel module {name!r} is not available: {status()}")


def load(name: str, **kwargs: Any) -> Any:
    """`bridge.load_module(path(name), **kwargs)`: the module with the contracts embedded in it."""
    return load_module(str(path(name)), **kwargs)


def llm_kernel(kernel: str, **kwargs: Any) -> Any:
    """One kernel of cpp/kernels/llm/ by its name (e.g. "layernorm_forward"), from its family's module."""
    for module, kernels in LLM_KERNELS.items():
        if kernel in kernels:
            return getattr(load(module, **kwargs), kernel)
    known = ", ".join(k for ks in LLM_KERNELS.values() for k in ks)
    raise ValueError(f"kernel: expected one of the cpp/kernels/llm kernels ({known}), got {kernel!r}")


def _find_in_package(sub: str, marker: str, source: Path) -> Path:
    """A source checkout's copy first (an editable install's installed copy can be stale), then the
    copy installed under bridge/<sub>."""
    if (source / marker).is_file():
        return source
    for d in _package_dirs():
        if (d / sub / marker).is_file():
            return d / sub
    raise FileNotFoundError(f"{marker} is neither in a source checkout ({source}) nor installed under "
                            f"bridge/{sub}; reinstall kernelbridge")


def cmake_dir() -> Path:
    """Directory holding kernelbridgeConfig.cmake and kernelbridge.cmake (for find_package / include)."""
    return _find_in_package("cmake", "kernelbridgeConfig.cmake", _SOURCE_TREE / "cpp" / "cmake")


def include_dir() -> Path:
    """Include directory holding kernelbridge/kernel_contract.cuh (and the validator headers)."""
    return _find_in_package("include", "kernelbridge/kernel_contract.cuh", _SOURCE_TREE / "cpp" / "include")
