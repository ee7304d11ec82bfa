"""The porting walkthrough (examples/porting) uses the porting tools: `dsl port` gives each C++
kernel's DSL signature, and check_ports.py compares every DSL kernel with its C++ original (GPU) or
with NumPy (simulator), after checking that their contracts describe the same job."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from bridge import testing as T

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 15 s of a full run on 2 cores: ports checked on the simulator

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "porting"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=ROOT)


def test_check_ports_on_the_simulator(nvcc):
    proc = run(str(EXAMPLE / "check_ports.py"), "--cpu", "--trials", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("blur3x3", "histogram256", "normalize"):
        assert f"candidate {name} (@simt.kernel) matches reference" in proc.stdout
    assert "PASS: every DSL kernel has its C++ kernel's contract" in proc.stdout


@pytest.mark.gpu
def test_check_ports_against_the_cpp_kernels_on_the_gpu(nvcc):
    proc = run(str(EXAMPLE / "check_ports.py"), "--trials", "4")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("blur3x3", "histogram256", "normalize"):
        assert f"candidate {name} (@simt.kernel) matches reference {name} (bridge.Kernel)" in proc.stdout


@pytest.mark.parametrize("src, kernel, params", [
    ("blur.cu", "blur3x3", "img: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]"),
    ("histogram.cu", "histogram256", "v: simt.Array[f32], hist: simt.DisjointSlice[u32]"),
    ("normalize.cu", "normalize", "v: simt.Array[f32], out: simt.DisjointSlice[f32], lo: f32, hi: f32"),
])
def test_dsl_port_gives_the_walkthrough_kernels_signatures(tmp_path, nvcc, src, kernel, params):
    proc = run("-m", "dsl", "port", str(EXAMPLE / "kernels" / src), "--kernel", kernel, "-o", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / f"{kernel}_port.py").read_text()
    assert f"def {kernel}({params}):" in text
    spec = importlib.util.spec_from_file_location("port", tmp_path / f"{kernel}_port.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    walkthrough = importlib.util.spec_from_file_location("dsl_kernels", EXAMPLE / "dsl_kernels.py")
    wk = importlib.util.module_from_spec(walkthrough)
    walkthrough.loader.exec_module(wk)
    T.check_compatible(getattr(mod, kernel), getattr(wk, kernel))      # the port's signature = the walkthrough's
