"""`python -m bridge doctor`: what this machine offers kernelbridge, and one verdict line.

Why a separate tool: most failures in the field are environmental (no driver, old toolkit, missing
NVPTX target); the doctor names them in one run and never fails itself on a machine without a GPU.
"""
from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
from typing import Callable


def _tool(name: str) -> tuple[str | None, str]:
    path = shutil.which(name)
    for candidate in (path, f"/usr/local/cuda/bin/{name}"):
        if candidate and shutil.which(candidate):
            try:
                out = subprocess.run([candidate, "--version"], capture_output=True, text=True, timeout=20).stdout
            except (OSError, subprocess.SubprocessError) as exc:
                return candidate, f"not runnable: {exc}"
            m = re.search(r"release ([\d.]+)[^\n]*", out)
            return candidate, (m.group(0) if m else out.strip().splitlines()[-1] if out.strip() else "?")
    return None, "not found"


def _llvm_nvptx() -> tuple[bool, str]:
    try:
        import llvmlite
        import llvmlite.binding as llvm
    except Exception as exc:
        return False, f"llvmlite not importable: {exc}"
    try:
        for init in ("initialize_all_targets", "initialize_all_asmprinters"):
            fn = getattr(llvm, init, None)
            if fn is not None:
                fn()
        target = llvm.Target.from_triple("nvptx64-nvidia-cuda")
        target.create_target_machine(cpu="sm_90")
        return True, f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}, NVPTX ok"
    except Exception as exc:
        return False, f"llvmlite {getattr(llvmlite, '__version__', '?')}: NVPTX target unavailable ({exc})"


def _version(mod: str) -> str:
    try:
        m = importlib.import_module(mod)
    except Exception as exc:
        return f"not importable ({type(exc).__name__})"
    return str(getattr(m, "__version__", "?"))


def report(out: Callable[[str], None] = print) -> int:
    """Print the report through `out`; return the exit status (0 unless the bridge itself is broken)."""
    import bridge
    from bridge import _driver
    out(f"kernelbridge {bridge.__version__} on Python {sys.version.split()[0]}")
    problems: list[str] = []
    try:
        from bridge import _native
        native_ok = True
        out(f"native extension: {_native.__file__}")
    except Exception as exc:
        native_ok = False
        problems.append("native extension missing")
        out(f"native extension: NOT importable ({exc})")
    gpus = 0
    if _driver.available():
        drv = _native.driver_version() if native_ok else int(_driver.call("cuDriverGetVersion"))
        out(f"CUDA driver: {drv // 1000}.{drv % 1000 // 10} (driver API version {drv})")
        from bridge.device import Device, device_count
        gpus = device_count()
        for i in range(gpus):
            d = Device(i)
            out(f"  GPU {i}: {d.name}, compute capability {d.cc[0]}.{d.cc[1]}, {d.sm_count} SMs, "
                f"{d.total_memory / 2**30:.1f} GiB")
    else:
        out(f"CUDA driver: none ({_driver.reason()})")
    for tool in ("nvcc", "ptxas"):
        path, ver = _tool(tool)
        out(f"{tool}: {path or 'not found'}" + (f" ({ver})" if path else ""))
        if path is None:
            problems.append(f"{tool} not found")
    ok, text = _llvm_nvptx()
    out(f"LLVM NVPTX: {text}")
    if not ok:
        problems.append("no LLVM NVPTX target")
    for mod in ("cupy", "torch", "jax", "numba", "cuda.bindings"):
        out(f"{mod}: {_version(mod)}")
    if not native_ok:
        verdict = "BROKEN: the native extension is missing; reinstall kernelbridge"
    elif gpus == 0:
        verdict = "no GPU: compile, simulate and test host-side only" + (
            f" ({'; '.join(problems)})" if problems else "")
    elif problems:
        verdict = f"GPU ready, with problems: {'; '.join(problems)}"
    else:
        verdict = f"ready: {gpus} GPU(s), compiler and driver present"
    out(f"verdict: {verdict}")
    return 1 if not native_ok else 0


def main(argv: list[str] | None = None) -> int:
    return report()


if __name__ == "__main__":   # pragma: no cover
    sys.exit(main())
