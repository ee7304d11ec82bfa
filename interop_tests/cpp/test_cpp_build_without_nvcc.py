"""Building without nvcc, or without any CUDA toolkit, works and says so.

- Configuring without nvcc skips the C++ kernels with a loud CMake warning AND records it in
  `_build_info.json` (pip hides CMake warnings; bridge.cpp_kernels / the demo / the doctor read it).
- The toolkit overrides are spelled KB_* in CMake as in Python, from -D and from the environment; the
  old -DKERNELBRIDGE_NVCC still works with a deprecation warning.
- With PATH, CUDA_HOME and the system toolkit hidden (KB_CUDA_HOME=none), cuda.h comes from NVIDIA's
  nvidia-cuda-runtime wheel: the native extension builds and imports, and the C++ kernels are reported
  as not built, with how to get them.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.required_tools import missing

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 30 s of a full run on 2 cores: a package build, CMake configures

REPO = Path(__file__).resolve().parents[2]
WHEEL_FINDERS = ("cuda.pathfinder (NVIDIA wheel)", "NVIDIA wheel")   # bridge/toolkit.py's words for a wheel


@functools.lru_cache(maxsize=1)
def _pybind11_dir() -> str:
    return subprocess.run([sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True,
                          text=True, check=True).stdout.strip()


# The JAX FFI handler is not what these tests are about: naming a directory without its headers skips
# the configure step that imports jax to find them (~0.5 s of every configure).
NO_JAX_FFI = "-DKB_JAX_FFI_INCLUDE=/nonexistent/jax-ffi-headers"


def _configure(cmake: str, build: Path, *defines: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [cmake, "-S", str(REPO), "-B", str(build), f"-Dpybind11_DIR={_pybind11_dir()}",
         f"-DPython_EXECUTABLE={sys.executable}", NO_JAX_FFI, *defines],
        capture_output=True, text=True, timeout=300, env=env)


def _targets(build: Path) -> str:
    """Every target's directory, as CMake lists them for any generator."""
    return (build / "CMakeFiles" / "TargetDirectories.txt").read_text()


def _build_info(build: Path) -> dict:
    return json.loads((build / "_build_info.json").read_text())


def _toolkit_free_env() -> dict:
    """The environment minus every way to a CUDA toolkit: PATH without nvcc/ptxas directories, no
    CUDA_HOME / CUDA_PATH / KB_* overrides, and KB_CUDA_HOME=none for /usr/local/cuda."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH") and (k == "KB_CACHE_DIR" or not k.startswith("KB_"))}
    keep = [d for d in env.get("PATH", "").split(os.pathsep)
            if d and not any(os.path.exists(os.path.join(d, t)) for t in ("nvcc", "ptxas"))]
    env["PATH"] = os.pathsep.join(keep)
    env["KB_CUDA_HOME"] = "none"
    return env


def _wheel_include_dir() -> Path:
    """nvidia-cuda-runtime's include directory (found without the code under test)."""
    import importlib.util
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        for sub in ("cu13", "cuda_runtime"):
            if (Path(base) / sub / "include" / "cuda.h").is_file():
                return Path(base) / sub / "include"
    msg = "nvidia-cuda-runtime (the `test` extra) is not installed: no wheel cuda.h to build with"
    missing(msg)


@pytest.fixture(scope="module")
def source_checkout() -> Path:
    if not (REPO / "CMakeLists.txt").is_file() or not (REPO / "cpp" / "kernels").is_dir():
        pytest.skip("not a source checkout")
    return REPO


def test_configure_with_a_bad_nvcc_override_skips_kernels_and_records_why(cmake, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", "-DKB_NVCC=/nonexistent/bin/nvcc")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stderr.split())        # CMake re-wraps warning text
    assert "CMake Warning" in text and "the package's CUDA C++ kernels (cpp/kernels) are NOT built" in text
    assert "kb_kernel_saxpy.dir" not in _targets(tmp_path / "b")
    info = _build_info(tmp_path / "b")
    assert info["cpp_kernels"]["built"] is False and info["cpp_kernels"]["modules"] == []
    assert info["nvcc"] == {"path": None, "found_by": "not found", "version": ""}
    assert "KB_NVCC=/nonexistent/bin/nvcc is not an executable" in info["cpp_kernels"]["reason"]
    assert "install the CUDA toolkit" in info["cpp_kernels"]["hint"]


def test_nvcc_override_from_the_environment_is_the_same_setting(cmake, source_checkout, tmp_path):
    env = dict(os.environ, KB_NVCC="/nonexistent/env/nvcc")
    proc = _configure(cmake, tmp_path / "b", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "KB_NVCC=/nonexistent/env/nvcc is not an executable" in \
        _build_info(tmp_path / "b")["cpp_kernels"]["reason"]


def test_configure_with_nvcc_defines_every_kernel_and_records_them(cmake, nvcc, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", f"-DKB_NVCC={nvcc}")
    assert proc.returncode == 0, proc.stderr
    assert "NOT built" not in " ".join(proc.stderr.split())
    targets = _targets(tmp_path / "b")
    plain = sorted(p.stem for p in (source_checkout / "cpp" / "kernels").glob("*.cu"))
    llm = sorted(p.stem for p in (source_checkout / "cpp" / "kernels" / "llm").glob("*.cu"))
    for name in plain:
        assert f"kb_kernel_{name}.dir" in targets
    for family in llm:
        assert f"kb_kernel_llm_{family}.dir" in targets
    info = _build_info(tmp_path / "b")
    assert info["cpp_kernels"]["built"] is True
    assert sorted(info["cpp_kernels"]["modules"]) == sorted(plain + [f"llm_{f}" for f in llm])
    assert info["nvcc"]["path"] == nvcc and info["nvcc"]["found_by"] == "KB_NVCC"
    assert info["nvcc"]["version"].count(".") == 1 and info["cpp_kernels"]["reason"] is None


def test_old_kernelbridge_nvcc_spelling_still_works_but_is_deprecated(cmake, nvcc, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", f"-DKERNELBRIDGE_NVCC={nvcc}")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stderr.split())
    # CMake spells the category "Deprecation Warning" (3.x) or "Warning (deprecated)" (4.x)
    assert ("CMake Deprecation Warning" in text or "CMake Warning (deprecated)" in text) and "use KB_NVCC" in text
    assert text.count("KERNELBRIDGE_NVCC is deprecated") == 1
    assert "kb_kernel_saxpy.dir" in _targets(tmp_path / "b")
    assert _build_info(tmp_path / "b")["nvcc"]["found_by"] == "KB_NVCC"


def test_missing_cuda_h_is_a_configure_error_naming_both_ways_to_get_it(cmake, source_checkout, tmp_path):
    proc = _configure(cmake, tmp_path / "b", "-DKB_CUDA_INCLUDE=/nonexistent/include")
    assert proc.returncode != 0
    text = " ".join(proc.stderr.split())
    assert "kernelbridge: cuda.h not found (KB_CUDA_INCLUDE=/nonexistent/include is not a directory " \
           "holding cuda.h)" in text
    assert "pip install nvidia-cuda-runtime" in text and "install the CUDA toolkit" in text


def test_locator_output_survives_cmake_quoting(cmake, tmp_path):
    """A path with $, spaces, a backslash and quotes reaches CMake intact through the --cmake file."""
    odd = tmp_path / 'we\\ird${dir} "x"'
    odd.mkdir()
    fake = odd / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.1'\n")
    fake.chmod(0o755)
    out = tmp_path / "located.cmake"
    loader = ("import importlib.util as u, sys; s = u.spec_from_file_location('kb_toolkit', sys.argv[1]); "
              "m = u.module_from_spec(s); sys.modules['kb_toolkit'] = m; s.loader.exec_module(m); "
              "sys.exit(m._cmake_main(sys.argv[2:]))")
    subprocess.run([sys.executable, "-c", loader, str(REPO / "bridge" / "toolkit.py"), "--cmake", str(out), "nvcc"],
                   check=True, env=dict(os.environ, KB_NVCC=str(fake)), timeout=60)
    script = tmp_path / "show.cmake"
    script.write_text(f'include("{out.as_posix()}")\nmessage(STATUS "P=[${{KB_LOCATED_NVCC}}] '
                      f'B=[${{KB_LOCATED_NVCC_BY}}]")\n')
    proc = subprocess.run([cmake, "-P", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert f"P=[{fake}] B=[KB_NVCC]" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def toolkit_free_install(cmake, source_checkout, tmp_path_factory):
    """Configure, build and install the package with no CUDA toolkit reachable; returns (site, configure
    output). Python sources are copied the way the wheel packs them."""
    include = _wheel_include_dir()
    root = tmp_path_factory.mktemp("no_toolkit")
    build, site = root / "build", root / "site"
    env = _toolkit_free_env()
    # Debug without -g: optimisation is not what this test is about and halves the compile; the JAX FFI
    # handler (built when jaxlib is installed) is not either (NO_JAX_FFI). A unity build in ONE batch
    # parses pybind11 once instead of once per source: ~12 s of one core, where two batches (one per
    # core) take ~8 s but 15 s of CPU from a machine whose other core is running the other tests.
    proc = _configure(cmake, build, "-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_CXX_FLAGS_DEBUG=-O0",
                      "-DCMAKE_UNITY_BUILD=ON", "-DCMAKE_UNITY_BUILD_BATCH_SIZE=0", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for cmd in ([cmake, "--build", str(build)], [cmake, "--install", str(build), "--prefix", str(site)]):
        step = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
        assert step.returncode == 0, step.stdout + step.stderr
    for pkg in ("bridge", "dsl"):
        shutil.copytree(REPO / pkg, site / pkg, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "_build_info.json"))
    return site, proc.stdout + proc.stderr, include


_PROBE = r"""
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
sys.path.insert(0, sys.argv[1])
import bridge, dsl
from bridge import _native, cpp_kernels, doctor
try:
    cpp_kernels.load("saxpy")
    error = None
except cpp_kernels.CppKernelsMissing as exc:
    error = str(exc)
lines = []
code = doctor.execute(type("A", (), {"json": False})(), doctor.bridge_sections, False, lines.append)
print(json.dumps({"bridge": bridge.__file__, "native": _native.__file__, "dsl": dsl.__file__,
                  "available": cpp_kernels.available(), "info": cpp_kernels.build_info(), "error": error,
                  "doctor": lines, "code": code}))
"""


def test_toolkit_free_build_uses_the_wheel_cuda_h_and_reports_kernels_missing(toolkit_free_install):
    site, configure_log, include = toolkit_free_install
    # a wheel in site-packages is cuda.pathfinder's find; one on sys.path only (pip's isolated build) ours
    assert any(f"kernelbridge: cuda.h from {include} (found by {by})" in configure_log for by in WHEEL_FINDERS)
    assert not list((site / "bridge").glob("kernels/*.fatbin"))
    env = _toolkit_free_env()
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(site)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(site))
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["bridge"].startswith(str(site)) and got["native"].startswith(str(site / "bridge"))
    assert got["dsl"].startswith(str(site))
    assert got["available"] == []
    assert got["info"]["cuda_h"]["include_dir"] == str(include)
    assert got["info"]["cuda_h"]["found_by"] in WHEEL_FINDERS
    assert got["info"]["cpp_kernels"]["built"] is False
    assert got["error"].startswith("C++ kernel module 'saxpy' is not available: C++ kernels NOT built: "
                                   "nvcc was not found when kernelbridge was built (KB_CUDA_HOME=none: "
                                   "installed toolkits ignored). To get them: install the CUDA toolkit")
    assert got["error"].endswith("then reinstall kernelbridge (pip install .)")
    assert got["code"] == 0
    assert any(line.startswith("C++ kernels NOT built: nvcc was not found") for line in got["doctor"])
    assert any(line.startswith("nvcc: not found: KB_CUDA_HOME=none") for line in got["doctor"])
    verdict = [line for line in got["doctor"] if line.startswith("verdict:")]
    assert len(verdict) == 1 and "C++ kernels not built" in verdict[0] and "nvcc not found" in verdict[0]
