"""On the GPU: compute-sanitizer memcheck names the Python file:line of a planted out-of-bounds
`unsafe` write (boundscheck=False, so nothing but the sanitizer stops it), through the PTX line
table; the same kernel compiled with lineinfo=False is reported without a Python line (the control
that shows the line comes from the line table)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from interop_tests.lineinfo.lineinfo_kit import KERNELS, marker_line

REPO = Path(__file__).resolve().parents[2]

RUNNER = textwrap.dedent("""
    import sys
    sys.path.insert(0, {repo!r})
    import bridge
    from interop_tests.lineinfo import lineinfo_kernels as K
    out = bridge.zeros((64,), "float32")
    getattr(K, {kernel!r})[1, 32](out)          # writes out[64 + t]: past the end
    try:
        bridge.synchronize()
    except Exception as exc:                      # the sanitizer may fail the launch: expected
        print("synchronize:", type(exc).__name__, exc)
    print("runner done")
""")


def _memcheck(kernel: str, tmp_path: Path) -> str:
    from bridge.toolkit import find_tool
    sanitizer = find_tool("compute-sanitizer")
    if sanitizer is None:
        pytest.skip("compute-sanitizer not found (bridge.toolkit: KB_COMPUTE_SANITIZER, CUDA_HOME, PATH)")
    script = tmp_path / f"run_{kernel}.py"
    script.write_text(RUNNER.format(repo=str(REPO), kernel=kernel))
    proc = subprocess.run([sanitizer, "--tool", "memcheck", "--print-limit", "8", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=300, cwd=str(REPO), env=dict(os.environ))
    out = proc.stdout + proc.stderr
    assert "runner done" in out, f"the runner did not finish (rc {proc.returncode}):\n{out[-4000:]}"
    assert "Invalid __global__ write" in out, f"memcheck saw no out-of-bounds write:\n{out[-4000:]}"
    return out


@pytest.mark.gpu
@pytest.mark.nosanitize     # runs compute-sanitizer itself, on a kernel that writes out of bounds on purpose
def test_memcheck_names_the_python_line_of_an_out_of_bounds_unsafe_write(tmp_path):
    out = _memcheck("planted_oob", tmp_path)
    line = marker_line(KERNELS, "oob")
    assert f"lineinfo_kernels.py:{line}" in out, (
        "memcheck did not name the Python line (the PTX carries `.loc`: see test_lineinfo_ptx.py); if the "
        "driver JIT dropped the line table, cuModuleLoadDataEx needs CU_JIT_GENERATE_LINE_INFO=1\n"
        + out[-4000:])
    assert "planted_oob" in out


@pytest.mark.gpu
@pytest.mark.nosanitize
def test_without_line_tables_memcheck_has_no_python_line(tmp_path):
    out = _memcheck("planted_oob_plain", tmp_path)
    assert "planted_oob_plain" in out
    assert "lineinfo_kernels.py:" not in out, out[-4000:]
