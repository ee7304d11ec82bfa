"""The locator's search is cuda.pathfinder's: what it finds is reported as found by 'cuda.pathfinder
(<where>)' (to the doctor and to CMake too), the KB_* settings still win over it, our own steps (wheels
on sys.path, PATH, /usr/local/cuda) come after it, a changed CUDA_HOME is honoured although pathfinder
caches its answers per process, and without pathfinder our own steps still run and a miss says why.

Most tests make pathfinder's functions find a fake toolkit (`fake_pathfinder`); one runs the real
pathfinder on a fake CUDA_HOME with site-packages hidden from it.
"""
from __future__ import annotations

import site
import sys

import pytest

from bridge import toolkit
from interop_tests.toolkit import fakes

bare, clean = fakes.bare, fakes.clean
FILES = {"libdevice": ("nvvm", "libdevice", "libdevice.10.bc"), "cuda-include": ("include",)}


def test_what_pathfinder_finds_is_reported_as_found_by_cuda_pathfinder(clean, tmp_path):
    home = fakes.fake_root(tmp_path / "home")
    clean.setenv("CUDA_HOME", str(home))
    fakes.fake_pathfinder(clean, home)
    for name in ("nvcc", "ptxas", "cuobjdump", "nvdisasm", "compute-sanitizer"):
        found = toolkit.locate(name)
        assert (found.path, found.found_by) == (str(home / "bin" / name), "cuda.pathfinder (CUDA_HOME)"), name
    for name, parts in FILES.items():
        found = toolkit.locate(name)
        assert (found.path, found.found_by) == (str(home.joinpath(*parts)), "cuda.pathfinder (CUDA_HOME)"), name
    assert toolkit.locate("nvcc").describe() == f"{home / 'bin' / 'nvcc'} (found by cuda.pathfinder (CUDA_HOME))"


def test_a_pathfinder_find_in_site_packages_is_an_nvidia_wheel(clean, tmp_path):
    site_dir = tmp_path / "site"
    wheel = fakes.fake_root(site_dir / "nvidia" / "cu13")
    clean.syspath_prepend(str(site_dir))
    fakes.fake_pathfinder(clean, wheel, via="site-packages")
    assert toolkit.locate("ptxas").found_by == "cuda.pathfinder (NVIDIA wheel)"
    assert toolkit.locate("cuda-include").found_by == "cuda.pathfinder (NVIDIA wheel)"


def test_kb_settings_win_over_what_pathfinder_finds(clean, tmp_path):
    fakes.fake_pathfinder(clean, fakes.fake_root(tmp_path / "pf"))
    mine = fakes.fake_root(tmp_path / "mine")
    clean.setenv("KB_NVCC", str(mine / "bin" / "nvcc"))
    clean.setenv("KB_LIBDEVICE", str(mine / "nvvm" / "libdevice" / "libdevice.10.bc"))
    clean.setenv("KB_CUDA_INCLUDE", str(mine / "include"))
    got = {name: (toolkit.locate(name).path, toolkit.locate(name).found_by)
           for name in ("nvcc", "libdevice", "cuda-include", "ptxas")}
    assert got == {"nvcc": (str(mine / "bin" / "nvcc"), "KB_NVCC"),
                   "libdevice": (str(mine / "nvvm" / "libdevice" / "libdevice.10.bc"), "KB_LIBDEVICE"),
                   "cuda-include": (str(mine / "include"), "KB_CUDA_INCLUDE"),
                   "ptxas": (str(tmp_path / "pf" / "bin" / "ptxas"), "cuda.pathfinder")}
    kb_home = fakes.fake_root(tmp_path / "kb_home")
    clean.setenv("KB_CUDA_HOME", str(kb_home))
    assert (toolkit.locate("ptxas").path, toolkit.locate("ptxas").found_by) == (
        str(kb_home / "bin" / "ptxas"), "KB_CUDA_HOME")
    clean.setenv("KB_PTXAS", "/nonexistent/ptxas")          # a bad override is reported, never skipped
    found = toolkit.locate("ptxas")
    assert (found.path, found.variable, found.problem) == (None, "KB_PTXAS",
                                                           "KB_PTXAS=/nonexistent/ptxas is not an executable")


def test_pathfinder_comes_before_wheels_on_sys_path_path_and_the_default_root(clean, tmp_path):
    site_dir = tmp_path / "site"
    fakes.stub_exe(site_dir / "nvidia" / "cu13" / "bin" / "nvcc")
    clean.syspath_prepend(str(site_dir))
    clean.setenv("PATH", str(fakes.stub_exe(tmp_path / "pathbin" / "nvcc").parent))
    clean.setattr(toolkit, "DEFAULT_ROOT", str(fakes.fake_root(tmp_path / "usr_local_cuda")))
    assert toolkit.locate("nvcc").found_by == "NVIDIA wheel"          # pathfinder finds nothing yet
    fakes.fake_pathfinder(clean, fakes.fake_root(tmp_path / "pf"))
    assert (toolkit.locate("nvcc").path, toolkit.locate("nvcc").found_by) == (
        str(tmp_path / "pf" / "bin" / "nvcc"), "cuda.pathfinder")


def test_kb_cuda_home_none_keeps_only_pathfinders_finds_in_wheels(clean, tmp_path):
    fakes.fake_pathfinder(clean, fakes.fake_root(tmp_path / "toolkit"))
    clean.setenv("KB_CUDA_HOME", "none")
    nvcc = toolkit.locate("nvcc")
    assert (nvcc.path, nvcc.problem) == (None, "KB_CUDA_HOME=none: installed toolkits ignored")
    site_dir = tmp_path / "site"
    wheel = fakes.fake_root(site_dir / "nvidia" / "cu13")
    clean.syspath_prepend(str(site_dir))
    fakes.fake_pathfinder(clean, wheel, via="site-packages")
    assert (toolkit.locate("nvcc").path, toolkit.locate("nvcc").found_by) == (
        str(wheel / "bin" / "nvcc"), "cuda.pathfinder (NVIDIA wheel)")


def test_the_doctor_and_cmake_report_cuda_pathfinder(clean, tmp_path):
    from bridge import doctor
    home = fakes.fake_root(tmp_path / "home")
    clean.setenv("CUDA_HOME", str(home))
    fakes.fake_pathfinder(clean, home)
    section = doctor.toolkit_section()
    assert f"nvcc: {home / 'bin' / 'nvcc'} (found by cuda.pathfinder (CUDA_HOME); release 12.4, V12.4.1)" \
        in section.lines
    assert section.data["libdevice"]["found_by"] == "cuda.pathfinder (CUDA_HOME)"
    out = tmp_path / "located.cmake"
    assert toolkit._cmake_main(["--cmake", str(out), "nvcc", "cuda-include"]) == 0
    text = out.read_text()
    assert f'set(KB_LOCATED_NVCC "{home / "bin" / "nvcc"}")' in text
    assert 'set(KB_LOCATED_NVCC_BY "cuda.pathfinder (CUDA_HOME)")' in text
    assert 'set(KB_LOCATED_CUDA_INCLUDE_BY "cuda.pathfinder (CUDA_HOME)")' in text


def test_without_pathfinder_our_steps_still_run_and_a_miss_says_why(clean, tmp_path):
    clean.setitem(sys.modules, "cuda.pathfinder", None)                 # `import cuda.pathfinder` fails
    clean.setenv("PATH", str(fakes.stub_exe(tmp_path / "pathbin" / "ptxas").parent))
    assert toolkit.locate("ptxas").found_by == "PATH"
    found = toolkit.locate("nvcc")
    assert found.path is None
    assert found.problem.startswith("cuda.pathfinder is not importable (ModuleNotFoundError: ") and \
        found.problem.endswith("pip install cuda-pathfinder")
    assert toolkit.locate("nvjitlink").problem == found.problem


def test_a_changed_cuda_home_is_honoured_although_pathfinder_caches_its_answers(bare, tmp_path):
    """The real cuda.pathfinder, with site-packages hidden from it: it finds nvcc through CUDA_HOME and
    keeps that answer for the process; the locator drops it when CUDA_HOME changes."""
    pf = pytest.importorskip("cuda.pathfinder")
    if "nvcc" not in getattr(pf, "SUPPORTED_BINARY_UTILITIES", ()):
        pytest.skip(f"cuda.pathfinder {getattr(pf, '__version__', '?')} cannot locate binaries")
    bare.setattr(site, "getsitepackages", lambda: [])
    bare.setattr(site, "ENABLE_USER_SITE", False)
    for n in (1, 2):
        home = fakes.fake_root(tmp_path / f"home{n}")
        bare.setenv("CUDA_HOME", str(home))
        found = toolkit.locate("nvcc")
        assert (found.path, found.found_by) == (str((home / "bin" / "nvcc").resolve()),
                                                "cuda.pathfinder (CUDA_HOME)"), n
    libdevice = toolkit.locate("libdevice")
    assert (libdevice.path, libdevice.found_by) == (
        str((tmp_path / "home2" / "nvvm" / "libdevice" / "libdevice.10.bc").resolve()), "cuda.pathfinder (CUDA_HOME)")
