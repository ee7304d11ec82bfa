"""The one CUDA toolkit locator: where nvcc, ptxas, cuobjdump, nvdisasm, compute-sanitizer, libdevice,
the directory holding `cuda.h` and the nvJitLink library are, and HOW each was found.

The DSL compiler, the linker, the AOT tool, the doctor and CMake (through `cpp/cmake/kernelbridge.cmake`,
which runs this file as a script) all ask this module, so they can never disagree about a tool.

Search order for each item, first hit wins:
  1. its own override, `KB_<NAME>` (`KB_NVCC`, `KB_PTXAS`, `KB_CUOBJDUMP`, `KB_NVDISASM`,
     `KB_COMPUTE_SANITIZER`, `KB_LIBDEVICE`, `KB_CUDA_INCLUDE`): the file (the directory for
     `KB_CUDA_INCLUDE`) itself. An override that names nothing usable (a missing path, a directory or a
     device where a file belongs, a file larger than such a file can be) is reported as the item's
     `problem`, with the variable as its `variable`, never skipped silently;
  2. `KB_CUDA_HOME`: a toolkit root chosen for kernelbridge only (a value that is not a directory is
     reported like a bad override);
  3. `$CUDA_HOME`, then `$CUDA_PATH`;
  4. `PATH` (tools; files are looked for in the toolkit of the nvcc/ptxas on PATH);
  5. NVIDIA's wheels (`nvidia-cuda-nvcc`, `nvidia-cuda-runtime`, ...) in `sys.path`, then whatever
     `cuda.pathfinder` finds when it is importable;
  6. `/usr/local/cuda`.
`KB_CUDA_HOME=none` ignores every installed toolkit (steps 3, 4, 6): only overrides and wheels count.
nvJitLink is special: the linker reaches it through `cuda.bindings`, which loads it with
`cuda.pathfinder`, so that is what is reported for it.

This file imports nothing from `bridge` and only the standard library at module level: CMake runs it
with any Python 3 before the package is built (`python toolkit.py --cmake OUT.cmake NAME...`).
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ITEMS", "OVERRIDES", "Found", "locate", "locate_all", "find_tool", "toolkit_roots",
           "tool_version", "cuda_version_of", "system_toolkit_disabled"]

DEFAULT_ROOT = "/usr/local/cuda"
NO_TOOLKIT = "none"          # KB_CUDA_HOME=none: use no installed toolkit
MAX_LIBDEVICE_BYTES = 16 << 20   # libdevice.10.bc has ~0.5 MB: a larger "libdevice" is not read

_GET_TOOLKIT = ("install the CUDA toolkit and put its bin/ on PATH, or set CUDA_HOME or KB_CUDA_HOME "
                "to its root")
_HINTS = {
    "nvcc": f"{_GET_TOOLKIT}, or set KB_NVCC to the nvcc executable (needed to build the package's C++ "
            "kernels: reinstall kernelbridge afterwards)",
    "ptxas": f"{_GET_TOOLKIT}, set KB_PTXAS, or `pip install nvidia-cuda-nvcc` (ships ptxas)",
    "cuobjdump": f"{_GET_TOOLKIT}, set KB_CUOBJDUMP, or `pip install nvidia-cuda-cuobjdump`",
    "nvdisasm": f"{_GET_TOOLKIT}, set KB_NVDISASM, or `pip install nvidia-cuda-nvdisasm`",
    "compute-sanitizer": f"{_GET_TOOLKIT}, or set KB_COMPUTE_SANITIZER",
    "libdevice": f"{_GET_TOOLKIT} (libdevice is nvvm/libdevice/libdevice.10.bc), or set KB_LIBDEVICE",
    "cuda-include": "`pip install nvidia-cuda-runtime` (ships include/cuda.h), or "
                    f"{_GET_TOOLKIT}, or set KB_CUDA_INCLUDE to the directory holding cuda.h",
    "nvjitlink": "`pip install nvidia-nvjitlink` (the `link` extra: pip install 'kernelbridge[link]')",
}


@dataclass(frozen=True)
class _Spec:
    override: str                    # KB_ variable naming the item itself ('' = none)
    in_root: tuple[str, ...]         # relative to a toolkit root (glob patterns)
    in_wheels: tuple[str, ...]       # relative to a sys.path / site-packages directory
    tool: bool = True                # an executable (searched on PATH) rather than a file
    result_is_parent: bool = False   # report the directory holding the file (cuda.h)
    max_bytes: int = 0               # a file larger than this is not the item (0: no limit)


def _bins(name: str, *extra_wheel_dirs: str) -> _Spec:
    return _Spec(f"KB_{name.upper().replace('-', '_')}", (f"bin/{name}",),
                 tuple(f"{d}/{name}" for d in ("nvidia/cu13/bin", *extra_wheel_dirs)))


ITEMS: dict[str, _Spec] = {
    "nvcc": _bins("nvcc", "nvidia/cuda_nvcc/bin"),
    "ptxas": _bins("ptxas", "nvidia/cuda_nvcc/bin"),
    "cuobjdump": _bins("cuobjdump", "nvidia/cuda_cuobjdump/bin"),
    "nvdisasm": _bins("nvdisasm", "nvidia/cuda_nvdisasm/bin"),
    "compute-sanitizer": _Spec("KB_COMPUTE_SANITIZER",
                               ("bin/compute-sanitizer", "compute-sanitizer/compute-sanitizer"),
                               ("nvidia/cu13/bin/compute-sanitizer",)),
    "libdevice": _Spec("KB_LIBDEVICE", ("nvvm/libdevice/libdevice.10.bc",),
                       ("nvidia/cu13/nvvm/libdevice/libdevice.10.bc",
                        "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc"), tool=False,
                       max_bytes=MAX_LIBDEVICE_BYTES),
    "cuda-include": _Spec("KB_CUDA_INCLUDE", ("include/cuda.h", "targets/*/include/cuda.h"),
                          ("nvidia/cu13/include/cuda.h", "nvidia/cuda_runtime/include/cuda.h"),
                          tool=False, result_is_parent=True),
    "nvjitlink": _Spec("", (), (), tool=False),
}
# Per-item override variables (the one spelling, shared with CMake).
OVERRIDES: dict[str, str] = {name: spec.override for name, spec in ITEMS.items() if spec.override}


@dataclass(frozen=True)
class Found:
    """Where one item is (`path`, None when missing), which step found it (`found_by`: an override
    variable, 'KB_CUDA_HOME', 'CUDA_HOME', 'CUDA_PATH', 'PATH', 'NVIDIA wheel', 'cuda-pathfinder (...)',
    '/usr/local/cuda', or 'not found'), a `problem` worth telling (a bad override, named by
    `variable`) and a `hint` on how to get it."""
    name: str
    path: str | None
    found_by: str
    problem: str = ""
    hint: str = ""
    variable: str = ""       # the KB_* setting whose value is the problem ('' when none is)

    def __bool__(self) -> bool:
        return self.path is not None

    def describe(self) -> str:
        """One line: 'PATH (found by X)' or 'not found: problem; hint'."""
        if self.path is not None:
            return f"{self.path} (found by {self.found_by})"
        return "not found" + (f": {self.problem}" if self.problem else "") + f"; to get it: {self.hint}"

    def as_dict(self) -> dict:
        return {"path": self.path, "found_by": self.found_by, "problem": self.problem or None,
                "hint": None if self.path else self.hint}


def _kb_cuda_home() -> str:
    """KB_CUDA_HOME as the locator reads it everywhere: stripped, '' when unset."""
    return os.environ.get("KB_CUDA_HOME", "").strip()


def system_toolkit_disabled() -> bool:
    """True when KB_CUDA_HOME=none: installed toolkits (CUDA_HOME, PATH, /usr/local/cuda) are ignored."""
    return _kb_cuda_home().lower() == NO_TOOLKIT


def _exe(name: str) -> str:
    return name + ".exe" if os.name == "nt" and not name.endswith(".bc") else name


def _unusable(path: str, spec: _Spec) -> str:
    """Why `path` cannot be the item ('' when it can): a tool must be an executable file; any other
    item a regular file (never a directory or a device such as /dev/zero, which never ends) no larger
    than `spec.max_bytes`."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):     # missing, a dangling link, no permission, a name too long
        return "does not exist" if not spec.tool else "is not an executable"
    if spec.tool:
        return "" if stat.S_ISREG(st.st_mode) and os.access(path, os.X_OK) else "is not an executable"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if spec.max_bytes and st.st_size > spec.max_bytes:
        return f"has {st.st_size} bytes, more than the {spec.max_bytes} such a file may have"
    return ""


def _ok(path: str, spec: _Spec) -> bool:
    return not _unusable(path, spec)


def _in_dir(base: str, patterns: tuple[str, ...], spec: _Spec) -> str | None:
    for pattern in patterns:
        pattern = _exe(pattern) if spec.tool else pattern
        for hit in sorted(glob.glob(os.path.join(base, pattern))):
            if _ok(hit, spec):
                return hit
    return None


def _cuda_home_problem() -> str:
    """'' when KB_CUDA_HOME is unset, `none` or a directory; else what is wrong with it."""
    home = _kb_cuda_home()
    if not home or system_toolkit_disabled() or os.path.isdir(home):
        return ""
    return f"KB_CUDA_HOME={home} is not a directory (expected a CUDA toolkit root, or '{NO_TOOLKIT}')"


def _path_toolkit_root() -> str | None:
    """Root of the toolkit whose nvcc (or ptxas) is on PATH (symlinks resolved)."""
    for tool in ("nvcc", "ptxas"):
        hit = shutil.which(tool)
        if hit:
            return str(Path(hit).resolve().parent.parent)
    return None


def toolkit_roots() -> list[tuple[str, str]]:
    """(root, found_by) of every toolkit root searched, in order (step 2, 3, 4 for files, 6)."""
    roots: list[tuple[str, str]] = []
    home = _kb_cuda_home()
    if home and not system_toolkit_disabled():
        roots.append((home, "KB_CUDA_HOME"))
    if not system_toolkit_disabled():
        for var in ("CUDA_HOME", "CUDA_PATH"):
            if os.environ.get(var):
                roots.append((os.environ[var], var))
        on_path = _path_toolkit_root()
        if on_path:
            roots.append((on_path, "PATH"))
        roots.append((DEFAULT_ROOT, DEFAULT_ROOT))
    seen: set[str] = set()
    return [(r, by) for r, by in roots if not (r in seen or seen.add(r))]


def _site_dirs() -> list[str]:
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        import site
        dirs += list(site.getsitepackages()) + [site.getusersitepackages()]
    except Exception:  # noqa: BLE001 - virtualenv-era site modules lack these
        pass
    seen: set[str] = set()
    return [d for d in dirs if not (d in seen or seen.add(d))]


def _under_site(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(d) + os.sep) for d in _site_dirs())


def _pathfinder(name: str, spec: _Spec) -> tuple[str, str] | None:
    """(path, found_by) from cuda.pathfinder, when it is importable and knows the item."""
    try:
        import cuda.pathfinder as pf  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - optional
        return None
    try:
        if spec.tool and hasattr(pf, "find_nvidia_binary_utility"):
            hit = pf.find_nvidia_binary_utility(name)
            return (hit, "cuda-pathfinder") if hit else None
        if name == "libdevice" and hasattr(pf, "locate_bitcode_lib"):
            loc = pf.locate_bitcode_lib("device")
            return (str(loc.abs_path), f"cuda-pathfinder ({loc.found_via})")
        if name == "cuda-include" and hasattr(pf, "locate_nvidia_header_directory"):
            loc = pf.locate_nvidia_header_directory("cudart")
            if loc is not None and os.path.isfile(os.path.join(loc.abs_path, "cuda.h")):
                return (str(loc.abs_path), f"cuda-pathfinder ({loc.found_via})")
    except Exception:  # noqa: BLE001 - a pathfinder miss raises on some versions
        return None
    return None


def _nvjitlink() -> Found:
    hint = _HINTS["nvjitlink"]
    try:
        import cuda.pathfinder as pf  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001
        return Found("nvjitlink", None, "not found", f"cuda.pathfinder is not importable ({exc})", hint)
    try:
        loaded = pf.load_nvidia_dynamic_lib("nvJitLink")
    except Exception as exc:  # noqa: BLE001 - DynamicLibNotFoundError and friends
        return Found("nvjitlink", None, "not found", f"{type(exc).__name__}: {exc}".splitlines()[0], hint)
    return Found("nvjitlink", str(loaded.abs_path),
                 f"cuda-pathfinder ({getattr(loaded, 'found_via', 'loaded')})")


def locate(name: str) -> Found:
    """Where item `name` (a key of ITEMS) is, and how it was found. Never raises for a missing item."""
    if name not in ITEMS:
        raise ValueError(f"bridge.toolkit.locate: argument 'name' (#0): expected one of "
                         f"{', '.join(ITEMS)}, got {name!r}")
    if name == "nvjitlink":
        return _nvjitlink()
    spec, hint = ITEMS[name], _HINTS[name]
    finish = (lambda p: str(Path(p).parent)) if spec.result_is_parent else (lambda p: p)
    override = os.environ.get(spec.override, "").strip()
    if override:
        probe = os.path.join(override, "cuda.h") if spec.result_is_parent else override
        why = _unusable(probe, spec)
        if not why:
            return Found(name, override, spec.override)
        if spec.result_is_parent:
            why = "is not a directory holding cuda.h"
        return Found(name, None, "not found", f"{spec.override}={override} {why}", hint, spec.override)
    home_problem = _cuda_home_problem()
    if home_problem:
        return Found(name, None, "not found", home_problem, hint, "KB_CUDA_HOME")
    roots = toolkit_roots()
    for root, by in roots:
        if by == DEFAULT_ROOT:
            break                                  # the default root comes after PATH and the wheels
        if by == "PATH" and spec.tool:
            hit = shutil.which(_exe(name))
        else:
            hit = _in_dir(root, spec.in_root, spec)
        if hit:
            return Found(name, finish(hit), by)
    if spec.tool and not system_toolkit_disabled() and not any(by == "PATH" for _, by in roots):
        hit = shutil.which(_exe(name))             # a tool on PATH whose nvcc is not (wheels layout)
        if hit:
            return Found(name, hit, "PATH")
    for site_dir in _site_dirs():
        hit = _in_dir(site_dir, spec.in_wheels, spec)
        if hit:
            return Found(name, finish(hit), "NVIDIA wheel")
    found = _pathfinder(name, spec)
    if found and (not system_toolkit_disabled() or _under_site(found[0])) and \
            (spec.result_is_parent or _ok(found[0], spec)):
        return Found(name, found[0], found[1])
    if not system_toolkit_disabled():
        hit = _in_dir(DEFAULT_ROOT, spec.in_root, spec)
        if hit:
            return Found(name, finish(hit), DEFAULT_ROOT)
    problem = "KB_CUDA_HOME=none: installed toolkits ignored" if system_toolkit_disabled() else ""
    return Found(name, None, "not found", problem, hint)


def locate_all() -> dict[str, Found]:
    """Every item of ITEMS, located."""
    return {name: locate(name) for name in ITEMS}


def find_tool(name: str) -> str | None:
    """Path of toolkit item `name` (e.g. 'ptxas'), or None when it is not installed."""
    return locate(name).path


_RELEASE = re.compile(r"release (\d+\.\d+)")


def tool_version(path: str, timeout: float = 20.0) -> str:
    """The `--version` line that matters ('release 13.0, V13.0.88', 'Version 2025.3.0'), or why not."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"not runnable: {exc}"
    text = (proc.stdout or "") + (proc.stderr or "")
    m = re.search(r"release [\d.]+[^\n]*", text) or re.search(r"Version [\w.]+", text)
    if m:
        return m.group(0).strip()
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "?"


def cuda_version_of(version_text: str) -> tuple[int, int] | None:
    """(major, minor) CUDA release from a `tool_version` text, or None."""
    m = _RELEASE.search(version_text)
    if not m:
        return None
    major, minor = m.group(1).split(".")
    return int(major), int(minor)


# ------------------------------------------------------------------ CMake entry (script mode)
def _cmake_quote(text: str) -> str:
    """A CMake quoted argument holding `text` literally (a ';' stays a list separator, as in any CMake
    path variable)."""
    return '"' + text.replace("\\", "/" if os.name == "nt" else "\\\\").replace('"', '\\"').replace(
        "$", "\\$") + '"'


def _cmake_main(argv: list[str]) -> int:
    """`toolkit.py --cmake OUT NAME...`: write `set(KB_LOCATED_<NAME>[_BY|_PROBLEM|_HINT] ...)` lines."""
    if len(argv) < 2 or argv[0] != "--cmake":
        print("usage: toolkit.py --cmake OUT.cmake NAME...", file=sys.stderr)
        return 2
    lines = []
    for name in argv[2:]:
        found = locate(name)
        var = "KB_LOCATED_" + name.upper().replace("-", "_")
        lines += [f"set({var} {_cmake_quote(found.path or '')})",
                  f"set({var}_BY {_cmake_quote(found.found_by)})",
                  f"set({var}_PROBLEM {_cmake_quote(found.problem)})",
                  f"set({var}_HINT {_cmake_quote(found.hint)})"]
    Path(argv[1]).write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":   # pragma: no cover - exercised through CMake
    sys.exit(_cmake_main(sys.argv[1:]))
