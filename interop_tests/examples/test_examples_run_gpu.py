"""Each example runs to its PASS line on a GPU (as a user would run it: a fresh process)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
@pytest.mark.nosanitize     # scripts/gpu_check.py runs every example under memcheck itself
@pytest.mark.parametrize("name,args", [("mixed_pipeline.py", []), ("torch_custom_op.py", []),
                                       ("graph_capture.py", ["--iters", "50"]), ("jax_jit.py", []),
                                       ("flash_attention.py", []), ("flash_attention_bwd.py", []),
                                       ("flash_attention_varlen.py", []), ("attention_varlen_op.py", []),
                                       ("attention_op.py", []), ("launch_features.py", [])])
def test_example_prints_pass_last(name, args):
    p = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    lines = p.stdout.strip().splitlines()
    assert lines and lines[-1] == "PASS", out[-4000:]
