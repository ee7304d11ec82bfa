"""Fake CUDA toolkits for the locator tests: executables and files laid out as a toolkit root, what
cuda.pathfinder finds (`fake_pathfinder`), and fixtures that leave nothing else reachable."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bridge import toolkit

ENV_VARS = ("CUDA_HOME", "CUDA_PATH", "KB_CUDA_HOME", *toolkit.OVERRIDES.values())


def stub_exe(path: Path, release: str = "12.4") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    path.chmod(0o755)
    return path


def stub_file(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"BC")
    return path


def fake_root(root: Path) -> Path:
    for tool in ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "compute-sanitizer"):
        stub_exe(root / "bin" / tool)
    stub_file(root / "nvvm" / "libdevice" / "libdevice.10.bc")
    stub_file(root / "include" / "cuda.h")
    return root


def fake_pathfinder(monkeypatch, root: Path | None, via: str = "CUDA_PATH") -> None:
    """Make cuda.pathfinder's functions find the toolkit laid out at `root` (tools in bin/, libdevice,
    include/cuda.h), as its real search would there, or nothing at all (root None)."""
    try:
        import cuda.pathfinder as pf
    except ImportError:
        if root is None:
            return                   # nothing to hide: the locator runs without it
        pytest.skip("cuda.pathfinder (installed with cuda-bindings) is not importable")

    def tool(name: str) -> str | None:
        hit = root / "bin" / name if root else None
        return str(hit) if hit is not None and hit.is_file() else None

    def bitcode(name: str):
        hit = root / "nvvm" / "libdevice" / "libdevice.10.bc" if root else None
        if hit is None or not hit.is_file():
            raise pf.BitcodeLibNotFoundError(f"fake pathfinder: no {name} bitcode")
        return pf.LocatedBitcodeLib(name=name, abs_path=str(hit), filename=hit.name, found_via=via)

    def headers(libname: str):
        inc = root / "include" if root else None
        return pf.LocatedHeaderDir(abs_path=str(inc), found_via=via) if inc and (inc / "cuda.h").is_file() else None

    monkeypatch.setattr(pf, "find_nvidia_binary_utility", tool)
    monkeypatch.setattr(pf, "locate_bitcode_lib", bitcode)
    monkeypatch.setattr(pf, "locate_nvidia_header_directory", headers)


@pytest.fixture
def bare(monkeypatch, tmp_path):
    """No toolkit reachable through our own steps except what a test adds: empty PATH dir, no
    CUDA_HOME/CUDA_PATH/KB_*, no default root, no wheel outside tmp_path; cuda.pathfinder is real."""
    for var in (*ENV_VARS, "CONDA_PREFIX"):
        monkeypatch.delenv(var, raising=False)
    empty = tmp_path / "empty_bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(toolkit, "DEFAULT_ROOT", str(tmp_path / "no_default_root"))
    monkeypatch.setattr(toolkit, "_site_dirs", lambda: [p for p in sys.path if p.startswith(str(tmp_path))])
    return monkeypatch


@pytest.fixture
def clean(bare):
    """`bare`, and cuda.pathfinder finds nothing (the machine's wheels and toolkit stay out)."""
    fake_pathfinder(bare, None)
    return bare
