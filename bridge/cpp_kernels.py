"""The package's own CUDA C++ kernels (cpp/kernels/*.cu), built into fatbins by `pip install`.

Each `cpp/kernels/<name>.cu` is installed as `bridge/kernels/<name>.fatbin` with its launch contracts
embedded (see docs/cpp.md), so `load(name)` gives a module whose kernels launch validated:

    mod = bridge.cpp_kernels.load("saxpy")
    mod.saxpy(2.0, x, y, len(y))

`cmake_dir()` is where `kernelbridge.cmake` / `kernelbridgeConfig.cmake` live, for a user's own CMake
project (`-Dkernelbridge_DIR=$(python -c "import bridge; print(bridge.cmake_dir())")`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["KERNELS", "path", "load", "available", "kernels_dirs", "cmake_dir", "include_dir"]

# The modules cpp/kernels/ provides; each holds one kernel of the same name.
KERNELS: tuple[str, ...] = ("saxpy", "transpose", "block_reduce_sum", "legacy_softmax")

_SOURCE_TREE = Path(__file__).resolve().parent.parent  # a checkout: <repo>/bridge/cpp_kernels.py


def _package_dirs() -> list[Path]:
    """Every directory the `bridge` package spans (an editable install spans two)."""
    import bridge

    return [Path(p) for p in getattr(bridge, "__path__", [os.path.dirname(__file__)])]


def kernels_dirs() -> list[Path]:
    """Directories searched for `<name>.fatbin`, in order."""
    return [d / "kernels" for d in _package_dirs()]


def available() -> list[str]:
    """Names of the installed kernel modules (empty when the package was built without nvcc)."""
    found = {p.stem for d in kernels_dirs() if d.is_dir() for p in d.glob("*.fatbin")}
    return sorted(found)


def path(name: str) -> Path:
    """Installed fatbin of kernel module `name`; FileNotFoundError says where it looked and why."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name: expected a kernel module name such as {KERNELS[0]!r}, got {name!r}")
    searched = kernels_dirs()
    for d in searched:
        candidate = d / f"{name}.fatbin"
        if candidate.is_file():
            return candidate
    have = available()
    hint = (f"installed modules: {', '.join(have)}" if have else
            "no C++ kernel module is installed: the package was built without nvcc (reinstall with the "
            "CUDA toolkit's bin/ on PATH; the build prints a 'nvcc NOT FOUND' warning)")
    raise FileNotFoundError(f"name: no C++ kernel module {name!r} in {', '.join(map(str, searched))}; {hint}")


def load(name: str, **kwargs: Any) -> Any:
    """`bridge.load_module(path(name), **kwargs)`: the module with the contracts embedded in it."""
    import bridge

    return bridge.load_module(str(path(name)), **kwargs)


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
