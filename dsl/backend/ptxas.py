"""Run `ptxas -v` on PTX text for one arch and parse the resource usage it reports.

Used by `kernel.inspect()`, `python -m dsl compile`, and the tests (every generated PTX must assemble).
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from dsl.backend.target import parse_arch
from dsl.backend.toolkit import locate
from dsl.errors import DslTargetError


class PtxasNotFound(DslTargetError, FileNotFoundError):
    """ptxas is not installed (or not on PATH / CUDA_HOME)."""


class PtxasError(DslTargetError, RuntimeError):
    """ptxas rejected the PTX; the message carries its diagnostics."""


@dataclass(frozen=True)
class ResourceUsage:
    """What ptxas reports for one entry function."""
    kernel: str
    arch: str
    registers: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_frame: int = 0
    shared_bytes: int = 0
    const_bytes: int = 0
    barriers: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def find_ptxas() -> str | None:
    """ptxas as the one toolkit locator finds it (bridge.toolkit), or None."""
    return locate("ptxas").path


def assemble(ptx: str, arch: str | int, *, output: str | None = None, timeout: float = 60.0
             ) -> tuple[list[ResourceUsage], str]:
    """Assemble `ptx` for `arch`; returns (usage per entry, raw ptxas log). Raises PtxasError."""
    found = locate("ptxas")
    exe = found.path
    if exe is None:
        raise PtxasNotFound(f"ptxas {found.describe()}")
    sm = f"sm_{parse_arch(arch)}"
    if isinstance(arch, str) and arch.endswith("a"):
        sm += "a"                 # an arch-specific target (sm_90a: wgmma) assembles only for itself
    with tempfile.TemporaryDirectory(prefix="kb_ptxas_") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        out = output or str(Path(tmp) / "kernel.cubin")
        proc = subprocess.run([exe, f"-arch={sm}", "-v", str(src), "-o", out],
                              capture_output=True, text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise PtxasError(f"ptxas -arch={sm} failed:\n{log.strip()}")
    return parse_log(log, sm), log


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_FIELDS = {
    "registers": re.compile(r"Used (\d+) registers"),
    "barriers": re.compile(r"used (\d+) barriers"),
    "stack_frame": re.compile(r"(\d+) bytes stack frame"),
    "spill_stores": re.compile(r"(\d+) bytes spill stores"),
    "spill_loads": re.compile(r"(\d+) bytes spill loads"),
    "shared_bytes": re.compile(r"(\d+) bytes smem"),
    "const_bytes": re.compile(r"(\d+) bytes cmem\[0\]"),
}


def parse_log(log: str, arch: str) -> list[ResourceUsage]:
    """Split a `ptxas -v` log into per-entry records (lines after 'Compiling entry function')."""
    usages: list[ResourceUsage] = []
    chunks = _ENTRY.split(log)
    # split gives [prefix, name1, arch1, text1, name2, arch2, text2, ...]
    for k in range(1, len(chunks) - 2, 3):
        name, sm, text = chunks[k], chunks[k + 1], chunks[k + 2]
        vals = {f: int(m.group(1)) for f, rx in _FIELDS.items() if (m := rx.search(text))}
        usages.append(ResourceUsage(kernel=name, arch=sm or arch, **vals))
    return usages
