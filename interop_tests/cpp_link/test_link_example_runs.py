"""examples/link_cpp_device.py: links both directions without a GPU, runs to PASS with one."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 2 s of a full run on 2 cores: nvcc and nvJitLink

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "link_cpp_device.py"


def _run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_link_example_links_both_directions(nvcc, nvjitlink):
    r = _run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert "DSL->C++: linked gelu with cpp_gelu" in r.stdout
    assert "C++->DSL: linked softsign_kernel with dsl_softsign" in r.stdout


@pytest.mark.gpu
def test_link_example_passes_gpu(nvcc, nvjitlink):
    r = _run()
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("PASS")
