"""C++ -> DSL from a CMake build (examples/link_cpp): the DSL function exported as PTX and linked with
the CUDA C++ kernel by nvJitLink into a cubin (CPU); the cubin's kernel matches NumPy (GPU)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 7 s of a full run on 2 cores: CMake + nvcc builds

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "examples" / "link_cpp"


def _build(tmp: Path, cmake: str, arch: str = "90") -> Path:
    bdir = tmp / "link_cpp"
    for cmd in ([cmake, "-S", str(PROJECT), "-B", str(bdir), f"-DLINK_ARCH={arch}",
                 f"-DPython_EXECUTABLE={sys.executable}"], [cmake, "--build", str(bdir)]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
    return bdir / "softsign.cubin"


@pytest.mark.parametrize("arch", ["80", "90"])
def test_cmake_links_cpp_kernel_with_exported_dsl_function(tmp_path, cmake, nvcc, nvjitlink, arch):
    cubin = _build(tmp_path, cmake, arch).read_bytes()
    assert cubin[:4] == b"\x7fELF" and int.from_bytes(cubin[16:18], "little") == 2   # ET_EXEC: fully linked
    assert b"softsign_kernel" in cubin and b"dsl_softsign" in cubin
    ptx = (tmp_path / "link_cpp" / "dsl_softsign.ptx").read_text()
    assert ".visible .func" in ptx and f".target sm_{arch}" in ptx


def test_link_cli_reports_errors(tmp_path):
    r = subprocess.run([sys.executable, "-m", "dsl.link", "export", "examples/link_cpp_device.py::missing",
                        "--signature", "f32", "-o", str(tmp_path / "x.ptx")], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "no function 'missing'" in r.stderr


@pytest.mark.gpu
def test_cmake_built_cubin_runs_gpu(tmp_path, cmake, nvcc, nvjitlink, rng):
    import bridge
    cc = bridge.current_device().cc
    cubin = _build(tmp_path, cmake, f"{cc[0]}{cc[1]}")
    mod = bridge.load_module(str(cubin))
    n = 70_001
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    dx, dout = bridge.from_host(x), bridge.from_host(np.full(n, np.nan, np.float32))
    bridge.unsafe_launch(mod.softsign_kernel, ((n + 255) // 256,), (256,), dx, np.float32(0.5), dout, np.int32(n))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(dout.to_host(), x64 / (1 + 0.5 * np.abs(x64)), rtol=1e-6, atol=1e-7)
