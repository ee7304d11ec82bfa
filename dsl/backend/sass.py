"""SASS disassembly of a cubin with cuobjdump (or nvdisasm), when the CUDA toolkit has them."""
from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from dsl.backend.ptxas import assemble
from dsl.backend.toolkit import find_tool


def available() -> bool:
    return find_tool("cuobjdump") is not None or find_tool("nvdisasm") is not None


def disassemble(ptx: str, arch: str | int, timeout: float = 60.0) -> str | None:
    """SASS text for `ptx` assembled for `arch`, or None when no disassembler is installed."""
    tool = find_tool("cuobjdump")
    alt = find_tool("nvdisasm")
    if tool is None and alt is None:
        return None
    with tempfile.TemporaryDirectory(prefix="kb_sass_") as tmp:
        cubin = str(Path(tmp) / "k.cubin")
        assemble(ptx, arch, output=cubin, timeout=timeout)
        cmd = [tool, "-sass", cubin] if tool else [alt, "-c", cubin]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        return None
    return proc.stdout
