"""Configuring the package without nvcc does not fail silently: CMake prints a loud WARNING and
defines no kernel targets; with nvcc it defines one target per cpp/kernels/*.cu."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _configure(cmake: str, build: Path, nvcc: str) -> subprocess.CompletedProcess:
    pybind11_dir = subprocess.run([sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True,
                                  text=True, check=True).stdout.strip()
    return subprocess.run(
        [cmake, "-S", str(REPO), "-B", str(build), f"-Dpybind11_DIR={pybind11_dir}",
         f"-DPython_EXECUTABLE={sys.executable}", f"-DKERNELBRIDGE_NVCC={nvcc}"],
        capture_output=True, text=True, timeout=300)


def _targets(build: Path) -> str:
    """Every target's directory, as CMake lists them for any generator."""
    return (build / "CMakeFiles" / "TargetDirectories.txt").read_text()


@pytest.fixture(scope="module")
def source_checkout() -> Path:
    if not (REPO / "CMakeLists.txt").is_file() or not (REPO / "cpp" / "kernels").is_dir():
        pytest.skip("not a source checkout")
    return REPO


def test_configure_without_nvcc_warns_loudly(cmake, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", "/nonexistent/bin/nvcc")
    assert proc.returncode == 0, proc.stderr
    assert "CMake Warning" in proc.stderr and "nvcc NOT FOUND" in proc.stderr
    assert "kb_kernel_saxpy.dir" not in _targets(tmp_path / "b")


def test_configure_with_nvcc_defines_every_kernel(cmake, nvcc, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", nvcc)
    assert proc.returncode == 0, proc.stderr
    assert "nvcc NOT FOUND" not in proc.stderr
    targets = _targets(tmp_path / "b")
    for src in sorted((source_checkout / "cpp" / "kernels").glob("*.cu")):
        assert f"kb_kernel_{src.stem}.dir" in targets
