"""The doctor's foreign section (both `python -m bridge doctor` and `python -m dsl doctor`): which systems
bridge.foreign wraps are importable here and their versions, an installed one that fails to import
reported as such, and the compiler CuPy source goes through. No GPU needed."""
from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib.metadata import PackageNotFoundError, version

import pytest

from bridge.doctor import foreign_section


def _installed(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def test_each_foreign_system_is_listed_with_its_version_or_why_not():
    data = foreign_section().data
    assert set(data) == {"triton", "cupy", "numba-cuda", "numba", "cupy_source_compiler"}
    for label in ("triton", "numba-cuda", "numba"):
        dist = _installed(label)
        if dist is None:
            assert data[label]["importable"] is False and data[label]["installed"] is False, label
        elif data[label]["importable"]:
            assert data[label]["version"] == dist, label
        else:
            assert data[label]["installed"] is True and data[label]["error"], label


class _NumbaCudaFailsToImport:
    """A meta path finder standing for a numba-cuda that breaks on import (as under a too-new NumPy)."""

    def find_spec(self, name, path, target=None):
        if name == "numba.cuda":
            raise AttributeError("module 'numpy' has no attribute 'row_stack'")
        return None


def test_a_fake_module_shows_its_version_and_a_broken_one_its_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(__version__="99.1.0"))
    numba = types.ModuleType("numba")
    numba.__path__ = []                                      # numba without its CUDA target
    monkeypatch.setitem(sys.modules, "numba", numba)
    monkeypatch.delitem(sys.modules, "numba.cuda", raising=False)
    section = foreign_section()
    assert section.data["cupy"] == {"importable": True, "installed": True, "version": "99.1.0"}
    assert "foreign cupy: 99.1.0" in section.lines
    entry = section.data["numba-cuda"]
    assert entry["importable"] is False
    if entry["installed"]:
        # numba-cuda really installed (the GPU machine): its import hook meets the fake numba and fails;
        # the doctor still reports it, as an installed package that does not import, with the error
        assert entry["error"] and "not importable" in " ".join(section.lines)
    else:
        assert entry["error"] is None and "foreign numba-cuda: not installed" in section.lines
    monkeypatch.setattr(sys, "meta_path", [_NumbaCudaFailsToImport(), *sys.meta_path])
    entry = foreign_section().data["numba-cuda"]
    assert entry["importable"] is False and entry["installed"] is True
    assert entry["error"] == "AttributeError: module 'numpy' has no attribute 'row_stack'"


def test_the_cupy_source_compiler_is_the_one_bridge_foreign_uses():
    from bridge.foreign.compile_cuda import nvrtc_problem
    from bridge.toolkit import locate
    got = foreign_section().data["cupy_source_compiler"]
    if not nvrtc_problem():
        assert got == "NVRTC"
    elif locate("nvcc").path:
        assert got == "nvcc"
    else:
        assert got.startswith("none")


@pytest.mark.slow
@pytest.mark.parametrize("module", ["bridge", "dsl"])
def test_both_doctors_report_the_foreign_section(module):
    proc = subprocess.run([sys.executable, "-m", module, "doctor", "--json"], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert set(report["foreign"]) >= {"triton", "cupy", "numba-cuda", "numba"}
    proc = subprocess.run([sys.executable, "-m", module, "doctor"], capture_output=True, text=True, timeout=300)
    assert any(line.startswith("foreign triton: ") for line in proc.stdout.splitlines())
