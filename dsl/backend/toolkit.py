"""Where the CUDA toolkit is: ONE search order for its tools (nvcc, ptxas, cuobjdump, nvdisasm) and
for files inside it (libdevice), so every part of the DSL finds the same toolkit.

Order: an explicit per-tool override (`KB_NVCC`, ...), then $CUDA_HOME and $CUDA_PATH, then PATH, then
/usr/local/cuda. The DSL never needs a driver for any of these.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

# Per-tool overrides: environment variable naming the executable itself.
OVERRIDES = {"nvcc": "KB_NVCC", "ptxas": "KB_PTXAS"}


def toolkit_roots() -> list[Path]:
    """Candidate toolkit roots, most explicit first (duplicates removed)."""
    roots: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    roots.append(Path("/usr/local/cuda"))
    seen: set[Path] = set()
    return [r for r in roots if not (r in seen or seen.add(r))]


def find_tool(name: str) -> str | None:
    """Path of toolkit executable `name`, or None when it is not installed."""
    env = os.environ.get(OVERRIDES.get(name, ""), "")
    if env and os.path.exists(env):
        return env
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / name).is_file():
            return str(Path(root) / "bin" / name)
    found = shutil.which(name)
    if found:
        return found
    p = Path("/usr/local/cuda/bin") / name
    return str(p) if p.is_file() else None
