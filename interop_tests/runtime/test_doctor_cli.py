"""`python -m bridge doctor` always runs to a verdict and exits 0 (also without a GPU)."""
from __future__ import annotations

import subprocess
import sys

import bridge


def test_doctor_reports_and_exits_zero():
    proc = subprocess.run([sys.executable, "-m", "bridge", "doctor"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for heading in ("kernelbridge", "CUDA driver:", "nvcc:", "ptxas:", "LLVM NVPTX:", "cupy:", "torch:", "verdict:"):
        assert heading in out, out
    verdict = [line for line in out.splitlines() if line.startswith("verdict:")]
    assert len(verdict) == 1
    if bridge.gpu_available():
        assert "GPU 0:" in out
    else:
        assert verdict[0].startswith("verdict: no GPU"), verdict


def test_unknown_subcommand_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "bridge", "frobnicate"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
