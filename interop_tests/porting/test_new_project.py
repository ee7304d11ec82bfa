"""`python -m dsl new NAME`: the generated project builds (CMake + nvcc) and passes its own tests at
once, on the CPU (simulator; GPU tests skipped with the reason) and on a GPU (all of them)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import bridge
from dsl.port import PortError
from dsl.scaffold import create

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 16 s of a full run on 2 cores: generated projects built and tested

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("model, arrays", [("simt", "cupy"), ("tile", "torch"), ("simt", "torch"),
                                           ("tile", "cupy")])
def test_new_project_passes_its_own_tests(tmp_path, cmake, nvcc, model, arrays):
    proc = subprocess.run([sys.executable, "-m", "dsl", "new", "myproj", "--dir", str(tmp_path), "--model", model,
                           "--arrays", arrays], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    root = tmp_path / "myproj"
    assert f"created {root}" in proc.stdout
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == ["CMakeLists.txt", "README.md", "dsl_kernels.py", "kernels/scale_add.cu", "pipeline.py",
                     "pytest.ini", "requirements-test.txt", "tests/conftest.py", "tests/test_project.py"]
    assert f"@{model}.kernel" in (root / "dsl_kernels.py").read_text()
    assert f"import {arrays}" in (root / "pipeline.py").read_text()
    assert "kernelbridge_add_cuda_module(myproj_kernels" in (root / "CMakeLists.txt").read_text()
    # no plugin autoloading: the project's tests use none, and the ones installed here (hypothesis,
    # xdist, benchmark) cost ~0.8 s of start-up per run
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"],
                         capture_output=True, text=True, timeout=900, cwd=root,
                         env=dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1"))
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    for name in ("test_cpp_module_builds_with_its_contract", "test_dsl_kernel_matches_numpy_on_the_simulator",
                 "test_dsl_kernel_has_the_cpp_kernels_contract"):
        assert f"PASSED tests/test_project.py::{name}" in out
    gpu_tests = ("test_dsl_kernel_matches_the_cpp_kernel_on_the_gpu", "test_pipeline_matches_numpy")
    if bridge.gpu_available():
        for name in gpu_tests:
            assert f"PASSED tests/test_project.py::{name}" in out
    else:
        assert "2 skipped" in out and "no CUDA device" in out


def test_new_refuses_bad_names_and_existing_directories(tmp_path):
    with pytest.raises(PortError, match=r"project name: expected a Python identifier .* got 'my-proj'"):
        create("my-proj", tmp_path)
    create("p", tmp_path)
    with pytest.raises(PortError, match=r"already exists"):
        create("p", tmp_path)
    proc = subprocess.run([sys.executable, "-m", "dsl", "new", "class", "--dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "error: project name: expected a Python identifier" in proc.stderr
