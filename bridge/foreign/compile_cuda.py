"""CUDA C++ source → cubin for one architecture, with NVRTC (`cuda.bindings.nvrtc`) or nvcc.

Why our own compile of someone else's source (a CuPy RawKernel's `code`): the cubin is then ours to
check and load on any device and stream. NVRTC is what CuPy uses; when its library cannot be loaded
(no `nvidia-cuda-nvrtc` wheel, no toolkit) nvcc, found by the one toolkit locator (bridge.toolkit),
compiles the same text, and the result says which compiler ran. Results are cached per (source,
options, arch, compiler) for the process.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
import threading
from typing import Sequence

from bridge.errors import ForeignKernelError

__all__ = ["compile_cuda", "compile_like_cupy", "nvrtc_problem"]

_NVRTC_ONLY = ("--device-as-default-execution-space", "-default-device", "--pch", "-pch")

_cache: dict[tuple[str, tuple[str, ...], int, str], bytes] = {}   # documented cache (above)
_lock = threading.Lock()


def nvrtc_problem() -> str:
    """'' when NVRTC can compile here, else why not (the library is loaded on first use)."""
    try:
        from cuda.bindings import nvrtc
        err, _major, _minor = nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001 - any loader failure means "not usable", said in the text
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    return "" if int(err) == 0 else f"nvrtcVersion failed: {err}"


def _check(nvrtc: object, err: object, call: str, prog: object = None) -> None:
    if int(err) == 0:                                    # NVRTC_SUCCESS
        return
    log = ""
    if prog is not None:
        _e, size = nvrtc.nvrtcGetProgramLogSize(prog)    # type: ignore[attr-defined]
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)              # type: ignore[attr-defined]
        log = buf.rstrip(b"\0 ").decode(errors="replace")
    raise ForeignKernelError(f"NVRTC {call} failed ({err})" + (f":\n{log}" if log else ""))


def _nvrtc(source: str, options: Sequence[str], arch: int, filename: str) -> bytes:
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), filename.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options] + [f"-arch=sm_{arch}".encode()]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        _check(nvrtc, err, "nvrtcCompileProgram", prog)
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        _check(nvrtc, err, "nvrtcGetCUBINSize")
        cubin = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
        _check(nvrtc, err, "nvrtcGetCUBIN")
        return cubin
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _nvcc(source: str, options: Sequence[str], arch: int, filename: str) -> bytes:
    from bridge.toolkit import locate
    found = locate("nvcc")
    if found.path is None:
        raise ForeignKernelError(f"no CUDA compiler: NVRTC cannot be loaded ({nvrtc_problem()}) and nvcc was not "
                                 f"found ({found.problem or 'not installed'}); `pip install nvidia-cuda-nvrtc` "
                                 f"gives NVRTC")
    with tempfile.TemporaryDirectory(prefix="kb_foreign_") as tmp:
        src, out = os.path.join(tmp, filename), os.path.join(tmp, "out.cubin")
        with open(src, "w", encoding="utf-8") as f:
            f.write(source)
        cmd = [found.path, "-cubin", f"-arch=sm_{arch}", *options, "-o", out, src]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise ForeignKernelError(f"nvcc failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                                     f"{(proc.stderr or proc.stdout).strip()}")
        with open(out, "rb") as f:
            return f.read()


def compile_cuda(source: str, options: Sequence[str] = (), *, arch: int, compiler: str = "nvrtc",
                 nvcc_options: Sequence[str] = (), filename: str = "kernel.cu") -> tuple[bytes, str]:
    """(cubin for sm_<arch>, the compiler that made it). compiler 'nvrtc' falls back to nvcc (with
    `nvcc_options` in place of the NVRTC-only `options`) when NVRTC cannot be loaded; 'nvcc' uses nvcc."""
    if compiler not in ("nvrtc", "nvcc"):
        raise ValueError(f"compiler: expected 'nvrtc' or 'nvcc', got {compiler!r}")
    use = compiler
    problem = nvrtc_problem() if compiler == "nvrtc" else ""
    if problem:
        use = "nvcc"
    opts = tuple(options) if use == compiler else tuple(nvcc_options)
    label = use if use == compiler else f"nvcc (NVRTC not loadable: {problem})"
    key = (hashlib.sha256(source.encode()).hexdigest(), opts, arch, use)
    cubin = _cache.get(key)
    if cubin is None:
        cubin = _nvrtc(source, opts, arch, filename) if use == "nvrtc" else _nvcc(source, opts, arch, filename)
        with _lock:
            _cache[key] = cubin
    return cubin, label


def _include_dirs() -> list[str]:
    """CuPy's header directory (when CuPy is installed) and the toolkit's (bridge.toolkit)."""
    dirs = []
    try:
        import importlib.util
        spec = importlib.util.find_spec("cupy")
        if spec is not None and spec.origin:
            dirs.append(os.path.join(os.path.dirname(spec.origin), "_core", "include"))
    except (ImportError, ValueError):
        pass
    from bridge.toolkit import locate
    inc = locate("cuda-include").path
    if inc:
        dirs.append(inc)
    return [d for d in dirs if os.path.isdir(d)]


def compile_like_cupy(code: str, name: str, options: tuple[str, ...], backend: str, arch: int) -> tuple[bytes, str]:
    """(cubin, compiler) of CUDA source as CuPy compiles it (RawKernel code, generated ElementwiseKernels):
    NVRTC with `-ftz=true` and `--device-as-default-execution-space`, CuPy's and CUDA's include
    directories; nvcc (without the NVRTC-only options) when `backend == "nvcc"` or NVRTC cannot be loaded."""
    includes = [f"-I{d}" for d in _include_dirs()]
    nvrtc_opts = [*options, "-ftz=true", "--device-as-default-execution-space", *includes]
    nvcc_opts = [o for o in options if o not in _NVRTC_ONLY] + ["-ftz=true", *includes]
    return compile_cuda(code, nvrtc_opts if backend == "nvrtc" else nvcc_opts, arch=arch, compiler=backend,
                        nvcc_options=nvcc_opts, filename=f"{name}.cu")
