"""The main job's demo: `python -m dsl demo` / `kernelbridge demo` (the old `python -m bridge demo` only
points there). It passes on this machine, and without the C++ kernels it says what is missing and how
to get them, then runs the rest."""
from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import numpy as np
import pytest

import bridge

NOT_BUILT = {"format": 1, "cuda_h": {"include_dir": "/x", "found_by": "NVIDIA wheel"},
             "nvcc": {"path": None, "found_by": "not found", "version": ""},
             "cpp_kernels": {"built": False, "modules": [], "archs": ["80", "90"],
                             "reason": "nvcc was not found when kernelbridge was built",
                             "hint": "install the CUDA toolkit and put its bin/ on PATH"}}


@pytest.fixture
def no_cpp_kernels(monkeypatch, tmp_path):
    """The package as a build without nvcc leaves it: no fatbins, a build record saying why."""
    monkeypatch.setattr(bridge.cpp_kernels, "kernels_dirs", lambda: [tmp_path / "kernels"])
    monkeypatch.setattr(bridge.cpp_kernels, "build_info", lambda: NOT_BUILT)


@pytest.mark.slow
def test_dsl_demo_command_passes():
    proc = subprocess.run([sys.executable, "-m", "dsl", "demo"], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last == ("PASS (GPU)" if bridge.gpu_available() else "PASS (CPU simulator)")


def test_kernelbridge_console_script_is_the_dsl_cli():
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")
               if ep.dist is not None and ep.dist.metadata["Name"] == "kernelbridge"}
    assert scripts == {"kernelbridge": "dsl.cli:main", "kernelbridge-doctor": "bridge.doctor:main"}


def test_missing_cpp_kernel_error_says_why_and_how(no_cpp_kernels):
    with pytest.raises(bridge.cpp_kernels.CppKernelsMissing) as info:
        bridge.cpp_kernels.load("saxpy")
    assert str(info.value) == (
        "C++ kernel module 'saxpy' is not available: C++ kernels NOT built: nvcc was not found when "
        "kernelbridge was built. To get them: install the CUDA toolkit and put its bin/ on PATH, then "
        "reinstall kernelbridge (pip install .)")
    assert isinstance(info.value, FileNotFoundError)


def test_demo_without_cpp_kernels_runs_the_dsl_part_on_the_cpu(no_cpp_kernels, capsys):
    from dsl import demo
    rng = np.random.default_rng(0)
    x = rng.standard_normal(demo.ROWS * demo.COLS).astype(np.float32)
    y = rng.standard_normal(demo.ROWS * demo.COLS).astype(np.float32)
    got = demo.run_cpu(x, y)
    out = capsys.readouterr().out
    assert "  C++ saxpy: not available. C++ kernel module 'saxpy' is not available: C++ kernels NOT built: " in out
    assert "simulated both DSL kernels on the CPU" in out
    np.testing.assert_allclose(got, demo.reference(x, y), rtol=0, atol=1e-6)


@pytest.mark.gpu
def test_demo_without_cpp_kernels_still_runs_on_the_gpu(no_cpp_kernels, capsys):
    from dsl import demo
    assert demo.main([]) == 0
    out = capsys.readouterr().out
    assert "  C++ saxpy: skipped. C++ kernel module 'saxpy' is not available" in out
    assert "(NumPy saxpy) -> DSL SIMT tanh_residual -> DSL tile row_softmax" in out
    assert out.strip().splitlines()[-1] == "PASS (GPU)"
