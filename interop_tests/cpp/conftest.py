"""Fixtures for the CUDA C++ part: compiling snippets, the installed fatbins (nvcc and cmake come from
interop_tests/conftest.py: in CI (CI=true) a missing tool fails the test instead of skipping it, so the
C++ part can never pass by not running)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import bridge

@pytest.fixture(scope="session")
def include_dir() -> Path:
    return bridge.cpp_kernels.include_dir()


@pytest.fixture(scope="session")
def compile_cu(nvcc, include_dir, tmp_path_factory):
    """compile_cu(source, mode="-cubin") -> (returncode, output bytes or None, diagnostics)."""
    root = tmp_path_factory.mktemp("cu")
    counter = iter(range(10**6))

    def run(source: str, mode: str = "-cubin", arch: str = "sm_80") -> tuple[int, bytes | None, str]:
        n = next(counter)
        src, out = root / f"k{n}.cu", root / f"k{n}.out"
        src.write_text(source)
        proc = subprocess.run([nvcc, mode, f"-arch={arch}", "-std=c++17", f"-I{include_dir}", str(src),
                               "-o", str(out)], capture_output=True, text=True, timeout=300)
        data = out.read_bytes() if proc.returncode == 0 and out.exists() else None
        return proc.returncode, data, proc.stdout + proc.stderr

    return run


@pytest.fixture(scope="session")
def installed_fatbins(nvcc) -> dict[str, Path]:
    """name -> installed fatbin of every kernel in bridge.cpp_kernels.KERNELS (nvcc exists, so the
    package build must have produced them: a missing one is a failure, not a skip)."""
    out = {}
    for name in bridge.cpp_kernels.KERNELS:
        try:
            out[name] = bridge.cpp_kernels.path(name)
        except FileNotFoundError as exc:
            pytest.fail(f"nvcc is present but the package's C++ kernel {name!r} is not installed: {exc}")
    return out
