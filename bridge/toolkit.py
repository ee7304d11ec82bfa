"""The one CUDA toolkit locator: where nvcc, ptxas, cuobjdump, nvdisasm, compute-sanitizer, libdevice,
the directory holding `cuda.h` and the nvJitLink library are, and HOW each was found.

The DSL compiler, the linker, the AOT tool, the doctor and CMake (through `cpp/cmake/kernelbridge.cmake`,
which runs this file as a script) all ask this module, so they can never disagree about a tool.

The search is NVIDIA's `cuda.pathfinder` (installed with cuda-bindings). What stays here is ours: the
`KB_*` settings, the "found by" report, CMake's entry, and the places pathfinder does not look.
Order for each item, first hit wins:
  1. its own override, `KB_<NAME>` (`KB_NVCC`, `KB_PTXAS`, `KB_CUOBJDUMP`, `KB_NVDISASM`,
     `KB_COMPUTE_SANITIZER`, `KB_LIBDEVICE`, `KB_CUDA_INCLUDE`): the file (the directory for
     `KB_CUDA_INCLUDE`) itself. An override that names nothing usable (a missing path, a directory or a
     device where a file belongs, a file larger than such a file can be) is reported as the item's
     `problem`, with the variable as its `variable`, never skipped silently;
  2. `KB_CUDA_HOME`: a toolkit root chosen for kernelbridge only (a value that is not a directory is
     reported like a bad override). Ours: pathfinder knows no such setting;
  3. `cuda.pathfinder`, in its own order: NVIDIA's wheels in site-packages, `$CONDA_PREFIX`,
     `$CUDA_PATH` then `$CUDA_HOME`, then the toolkit of the libcudart the dynamic loader finds (tools,
     cuda.h) and the system include directories (cuda.h). Reported as 'cuda.pathfinder (<where>)';
  4. what pathfinder does not search, so the search stays ours:
     a. NVIDIA's wheels on `sys.path` outside site-packages: pathfinder scans site-packages only, and
        pip's isolated build environment, where CMake runs this file, is on sys.path only;
     b. `PATH` (tools; files in the toolkit of the nvcc/ptxas on PATH): pathfinder never reads PATH;
     c. `/usr/local/cuda`: pathfinder reaches it only through a loadable libcudart, and libdevice
        (whose search has no such step) not even then.
`KB_CUDA_HOME=none` ignores every installed toolkit: only overrides and wheels count (pathfinder's finds
in wheels, step 4a). pathfinder keeps its answers for the whole process; they are dropped here when
CUDA_PATH, CUDA_HOME or CONDA_PREFIX changed since, so a changed setting is honoured. Without an
importable cuda.pathfinder (a Python that CMake picked without it) steps 1, 2 and 4 still run, and a
miss says why. nvJitLink is special: the linker reaches it through `cuda.bindings`, which loads it
with `cuda.pathfinder`, so that is what is reported for it.

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
from typing import Any

__all__ = ["ITEMS", "OVERRIDES", "Found", "locate", "locate_all", "find_tool", "toolkit_roots",
           "tool_version", "cuda_version_of", "system_toolkit_disabled"]

DEFAULT_ROOT = "/usr/local/cuda"
NO_TOOLKIT = "none"          # KB_CUDA_HOME=none: use no installed toolkit
MAX_LIBDEVICE_BYTES = 16 << 20   # libdevice.10.bc has ~0.5 MB: a larger "libdevice" is not read
PATHFINDER = "cuda.pathfinder"
WHEEL = "NVIDIA wheel"

_GET_TOOLKIT = ("install the CUDA toolkit and put its bin/ on PATH, or set CUDA_HOME or KB_CUDA_HOME "
                "to its root")
_HINTS = {
    "nvcc": f"{_GET_TOOLKIT}, set KB_NVCC to the nvcc executable, or `pip install nvidia-cuda-nvcc "
            "nvidia-cuda-runtime` (NVIDIA's wheels: nvcc, ptxas, libdevice and cuda.h; needed to build the "
            "package's C++ kernels: reinstall kernelbridge afterwards)",
    "ptxas": f"{_GET_TOOLKIT}, set KB_PTXAS, or `pip install nvidia-cuda-nvcc` (ships ptxas)",
    "cuobjdump": f"{_GET_TOOLKIT}, set KB_CUOBJDUMP, or `pip install nvidia-cuda-cuobjdump`",
    "nvdisasm": f"{_GET_TOOLKIT}, set KB_NVDISASM, or `pip install nvidia-cuda-nvdisasm`",
    "compute-sanitizer": f"{_GET_TOOLKIT}, or set KB_COMPUTE_SANITIZER",
    "libdevice": f"{_GET_TOOLKIT} (libdevice is nvvm/libdevice/libdevice.10.bc), `pip install "
                 "nvidia-cuda-nvcc` (ships it), or set KB_LIBDEVICE",
    "cuda-include": "`pip install nvidia-cuda-runtime` (ships include/cuda.h), or "
                    f"{_GET_TOOLKIT}, or set KB_CUDA_INCLUDE to the directory holding cuda.h",
    "nvjitlink": "`pip install nvidia-nvjitlink` (the `link` extra: pip install 'kernelbridge[link]')",
}


@dataclass(frozen=True)
class _Spec:
    override: str                    # KB_ variable naming the item itself ('' = none)
    in_root: tuple[str, ...]         # relative to a toolkit root (glob patterns)
    in_wheels: tuple[str, ...]       # relative to a sys.path directory (step 4a only)
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
    variable, 'KB_CUDA_HOME', 'cuda.pathfinder' or 'cuda.pathfinder (<where>)' with where one of
    'NVIDIA wheel', 'conda', 'CUDA_PATH', 'CUDA_HOME' or pathfinder's own word, 'NVIDIA wheel' (on
    sys.path), 'PATH', '/usr/local/cuda', or 'not found'), a `problem` worth telling (a bad override,
    named by `variable`) and a `hint` on how to get it."""
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
    """(root, found_by) of every toolkit root the locator's own steps search, in order (KB_CUDA_HOME,
    the toolkit of the nvcc on PATH, /usr/local/cuda); the roots cuda.pathfinder searches are its own."""
    if system_toolkit_disabled():
        return []
    roots: list[tuple[str, str]] = []
    if _kb_cuda_home():
        roots.append((_kb_cuda_home(), "KB_CUDA_HOME"))
    on_path = _path_toolkit_root()
    if on_path:
        roots.append((on_path, "PATH"))
    roots.append((DEFAULT_ROOT, DEFAULT_ROOT))
    seen: set[str] = set()
    return [(r, by) for r, by in roots if not (r in seen or seen.add(r))]


def _site_dirs() -> list[str]:
    """sys.path and site-packages directories: where NVIDIA's wheels can be (step 4a, and what makes a
    pathfinder find 'NVIDIA wheel')."""
    dirs = [p for p in sys.path if p and os.path.isdir(p)]
    try:
        import site
        dirs += list(site.getsitepackages()) + [site.getusersitepackages()]
    except Exception:  # noqa: BLE001 - virtualenv-era site modules lack these
        pass
    seen: set[str] = set()
    return [d for d in dirs if not (d in seen or seen.add(d))]


def _under(path: str, dirs: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(d) + os.sep) for d in dirs if d)


# ------------------------------------------------------------------ step 3: cuda.pathfinder
_PATHFINDER_ENV = ("CUDA_PATH", "CUDA_HOME", "CONDA_PREFIX")
_pathfinder_env_seen: tuple[str | None, ...] | None = None
# pathfinder's own words for where a header or bitcode library was found, as reported here
_PATHFINDER_VIA = {"site-packages": WHEEL, "conda": "conda", "system-ctk-root": "the loader's libcudart",
                   "supported_install_dir": "a system include directory"}


def _pathfinder() -> tuple[Any, str]:
    """(the cuda.pathfinder module, '') or (None, why it cannot be used). Its per-process caches are
    dropped when a variable it reads changed since the last call, so a changed setting is honoured."""
    global _pathfinder_env_seen
    try:
        import cuda.pathfinder as pf  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - CMake may run this file with a Python that lacks it
        return None, f"{PATHFINDER} is not importable ({type(exc).__name__}: {exc}): pip install cuda-pathfinder"
    env = tuple(os.environ.get(var) for var in _PATHFINDER_ENV)
    if env != _pathfinder_env_seen:
        for fn in ("find_nvidia_binary_utility", "locate_nvidia_header_directory", "find_bitcode_lib",
                   "get_cuda_path_or_home"):
            getattr(getattr(pf, fn, None), "cache_clear", lambda: None)()
        _pathfinder_env_seen = env
    return pf, ""


def _ask_pathfinder(pf: Any, name: str, spec: _Spec) -> tuple[str, str] | None:
    """(path, pathfinder's word for where, '' when it gives none) of item `name`, or None on a miss."""
    try:
        if spec.tool:
            if name not in getattr(pf, "SUPPORTED_BINARY_UTILITIES", ()):
                return None                      # an older pathfinder: ptxas came with 1.8.1
            hit = pf.find_nvidia_binary_utility(name)
            return (str(hit), "") if hit else None
        if name == "libdevice":
            loc = pf.locate_bitcode_lib("device")
            return str(loc.abs_path), str(loc.found_via)
        if name == "cuda-include":
            loc = pf.locate_nvidia_header_directory("cudart")     # cuda.h lives beside cuda_runtime.h
            if loc is not None and loc.abs_path and os.path.isfile(os.path.join(loc.abs_path, "cuda.h")):
                return str(loc.abs_path), str(loc.found_via)
    except Exception:  # noqa: BLE001 - BitcodeLibNotFoundError is its miss; an older or broken one is too
        return None
    return None


def _pathfinder_origin(path: str, via: str) -> str:
    """Where a pathfinder find lies, in the words of this module ('' when it cannot be told)."""
    if "nvidia" in Path(path).parts and _under(path, _site_dirs()):     # every wheel layout is nvidia/...
        return WHEEL
    if _under(path, [os.environ.get("CONDA_PREFIX", "")]):
        return "conda"
    for var in ("CUDA_PATH", "CUDA_HOME"):                 # pathfinder's order
        if _under(path, [os.environ.get(var, "")]):
            return var
    return _PATHFINDER_VIA.get(via, via)


def _via_pathfinder(name: str, spec: _Spec) -> tuple[Found | None, str]:
    """(what cuda.pathfinder found, or None; why it could not be asked, '' when it was)."""
    pf, why = _pathfinder()
    if pf is None:
        return None, why
    got = _ask_pathfinder(pf, name, spec)
    if got is None or not (spec.result_is_parent or _ok(got[0], spec)):
        return None, ""
    origin = _pathfinder_origin(*got)
    if system_toolkit_disabled() and origin != WHEEL:
        return None, ""                                   # KB_CUDA_HOME=none: wheels only
    return Found(name, got[0], f"{PATHFINDER} ({origin})" if origin else PATHFINDER), ""


def _nvjitlink() -> Found:
    hint = _HINTS["nvjitlink"]
    pf, why = _pathfinder()
    if pf is None:
        return Found("nvjitlink", None, "not found", why, hint)
    try:
        loaded = pf.load_nvidia_dynamic_lib("nvJitLink")
    except Exception as exc:  # noqa: BLE001 - DynamicLibNotFoundError and friends
        return Found("nvjitlink", None, "not found", f"{type(exc).__name__}: {exc}".splitlines()[0], hint)
    via = str(getattr(loaded, "found_via", ""))
    via = _PATHFINDER_VIA.get(via, via)
    return Found("nvjitlink", str(loaded.abs_path), f"{PATHFINDER} ({via})" if via else PATHFINDER)


# ------------------------------------------------------------------ steps 1, 2 and 4: ours
def _override(name: str, spec: _Spec) -> Found | None:
    """Step 1: the item's own KB_ variable, or None when it is unset."""
    override = os.environ.get(spec.override, "").strip()
    if not override:
        return None
    probe = os.path.join(override, "cuda.h") if spec.result_is_parent else override
    why = _unusable(probe, spec)
    if not why:
        return Found(name, override, spec.override)
    if spec.result_is_parent:
        why = "is not a directory holding cuda.h"
    return Found(name, None, "not found", f"{spec.override}={override} {why}", _HINTS[name], spec.override)


def _found(name: str, spec: _Spec, hit: str | None, by: str) -> Found | None:
    if hit is None:
        return None
    return Found(name, str(Path(hit).parent) if spec.result_is_parent else hit, by)


def _in_kb_cuda_home(name: str, spec: _Spec) -> Found | None:
    home = _kb_cuda_home()
    if not home or system_toolkit_disabled():
        return None
    return _found(name, spec, _in_dir(home, spec.in_root, spec), "KB_CUDA_HOME")


def _in_sys_path_wheels(name: str, spec: _Spec) -> Found | None:
    for site_dir in _site_dirs():
        hit = _in_dir(site_dir, spec.in_wheels, spec)
        if hit:
            return _found(name, spec, hit, WHEEL)
    return None


def _on_path(name: str, spec: _Spec) -> Found | None:
    if system_toolkit_disabled():
        return None
    if spec.tool:
        return _found(name, spec, shutil.which(_exe(name)), "PATH")
    root = _path_toolkit_root()
    return _found(name, spec, _in_dir(root, spec.in_root, spec), "PATH") if root else None


def _in_default_root(name: str, spec: _Spec) -> Found | None:
    if system_toolkit_disabled():
        return None
    return _found(name, spec, _in_dir(DEFAULT_ROOT, spec.in_root, spec), DEFAULT_ROOT)


def locate(name: str) -> Found:
    """Where item `name` (a key of ITEMS) is, and how it was found. Never raises for a missing item."""
    if name not in ITEMS:
        raise ValueError(f"bridge.toolkit.locate: argument 'name' (#0): expected one of "
                         f"{', '.join(ITEMS)}, got {name!r}")
    if name == "nvjitlink":
        return _nvjitlink()
    spec, hint = ITEMS[name], _HINTS[name]
    found = _override(name, spec)
    if found is not None:
        return found
    home_problem = _cuda_home_problem()
    if home_problem:
        return Found(name, None, "not found", home_problem, hint, "KB_CUDA_HOME")
    found = _in_kb_cuda_home(name, spec)
    if found is not None:
        return found
    found, pathfinder_problem = _via_pathfinder(name, spec)
    found = found or _in_sys_path_wheels(name, spec) or _on_path(name, spec) or _in_default_root(name, spec)
    if found:
        return found
    problem = "KB_CUDA_HOME=none: installed toolkits ignored" if system_toolkit_disabled() else pathfinder_problem
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
