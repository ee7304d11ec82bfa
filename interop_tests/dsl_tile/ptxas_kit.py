"""ptxas -v on a kernel's PTX, for the tests that pin register use and spills (one runner, not one a file)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest


def ptxas_verbose(ptx: str, arch: str, tmp_path: Path) -> str:
    """ptxas -v's report on `ptx` for `arch` (sm_90a where the PTX targets it); the test fails if ptxas
    refuses the PTX and skips, visibly, where no ptxas is installed."""
    from bridge import toolkit
    tool = toolkit.locate("ptxas").path
    if tool is None:
        pytest.skip("ptxas not found (the PTX itself was checked)")
    if ".target sm_90a" in ptx:
        arch = "sm_90a"
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    r = subprocess.run([str(tool), "-v", f"-arch={arch}", str(src), "-o", str(tmp_path / f"k_{arch}.cubin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout + r.stderr


def spill_bytes(report: str) -> int:
    """The spill stores ptxas -v reports (bytes)."""
    return int(re.search(r"(\d+) bytes spill stores", report).group(1))
