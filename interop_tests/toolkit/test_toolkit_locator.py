"""The one CUDA toolkit locator (bridge.toolkit): its declared order, how it reports each find, and
that the DSL's compiler, linker and libdevice lookup ask it (so they cannot disagree with the doctor).

Every test builds its own fake toolkit / wheel layout in a temporary directory and controls PATH,
CUDA_HOME, CUDA_PATH, the KB_* overrides and what cuda.pathfinder finds (`fake_pathfinder`), so the
machine's real toolkit never decides a result. test_toolkit_pathfinder.py holds the pathfinder steps.
"""
from __future__ import annotations

import os
import sys

import pytest

from bridge import toolkit
from interop_tests.toolkit import fakes

# the fakes and fixtures, shared with test_libdevice_setting.py and test_toolkit_pathfinder.py
_exe, _file, _fake_root, fake_pathfinder = fakes.stub_exe, fakes.stub_file, fakes.fake_root, fakes.fake_pathfinder
bare, clean = fakes.bare, fakes.clean


def test_per_tool_override_wins_and_is_named(clean, tmp_path):
    fake = _exe(tmp_path / "mine" / "ptxas")
    fake_pathfinder(clean, _fake_root(tmp_path / "home"))           # pathfinder would find one too
    clean.setenv("KB_PTXAS", str(fake))
    found = toolkit.locate("ptxas")
    assert (found.path, found.found_by, found.problem) == (str(fake), "KB_PTXAS", "")
    assert found.describe() == f"{fake} (found by KB_PTXAS)"


def test_an_override_naming_nothing_is_reported_not_skipped(clean, tmp_path):
    fake_pathfinder(clean, _fake_root(tmp_path / "home"))           # a working nvcc is there...
    clean.setenv("KB_NVCC", "/nonexistent/bin/nvcc")                 # ...but the user asked for this one
    found = toolkit.locate("nvcc")
    assert found.path is None and not found and found.found_by == "not found"
    assert found.problem == "KB_NVCC=/nonexistent/bin/nvcc is not an executable"
    assert found.describe().startswith("not found: KB_NVCC=/nonexistent/bin/nvcc is not an executable; "
                                       "to get it: install the CUDA toolkit")
    assert toolkit.find_tool("nvcc") is None


def test_kb_cuda_home_root_serves_every_item(clean, tmp_path):
    root = _fake_root(tmp_path / "kbroot")
    clean.setenv("KB_CUDA_HOME", str(root))
    fake_pathfinder(clean, _fake_root(tmp_path / "other"))          # KB_CUDA_HOME comes first
    got = {name: (f.path, f.found_by) for name, f in toolkit.locate_all().items() if name != "nvjitlink"}
    assert got == {
        "nvcc": (str(root / "bin" / "nvcc"), "KB_CUDA_HOME"),
        "ptxas": (str(root / "bin" / "ptxas"), "KB_CUDA_HOME"),
        "cuobjdump": (str(root / "bin" / "cuobjdump"), "KB_CUDA_HOME"),
        "nvdisasm": (str(root / "bin" / "nvdisasm"), "KB_CUDA_HOME"),
        "compute-sanitizer": (str(root / "bin" / "compute-sanitizer"), "KB_CUDA_HOME"),
        "libdevice": (str(root / "nvvm" / "libdevice" / "libdevice.10.bc"), "KB_CUDA_HOME"),
        "cuda-include": (str(root / "include"), "KB_CUDA_HOME"),
    }


def test_files_come_from_the_toolkit_of_the_nvcc_on_path(clean, tmp_path):
    root = _fake_root(tmp_path / "tk")
    link = tmp_path / "links" / "nvcc"
    link.parent.mkdir()
    link.symlink_to(root / "bin" / "nvcc")
    clean.setenv("PATH", str(link.parent))
    found = toolkit.locate("libdevice")
    assert (found.path, found.found_by) == (str(root.resolve() / "nvvm" / "libdevice" / "libdevice.10.bc"), "PATH")


def test_wheels_on_sys_path_come_before_path_and_the_default_root(clean, tmp_path):
    """pathfinder scans site-packages only; a wheel on sys.path alone (pip's isolated build environment)
    is found by our step 4a, before PATH and /usr/local/cuda, like pathfinder's wheels before toolkits."""
    site = tmp_path / "site"
    wheel_ptxas = _exe(site / "nvidia" / "cu13" / "bin" / "ptxas")
    _file(site / "nvidia" / "cu13" / "include" / "cuda.h")
    clean.syspath_prepend(str(site))
    default = _fake_root(tmp_path / "usr_local_cuda")
    clean.setattr(toolkit, "DEFAULT_ROOT", str(default))
    on_path = _exe(tmp_path / "pathbin" / "ptxas")
    clean.setenv("PATH", str(on_path.parent))
    assert (toolkit.locate("ptxas").path, toolkit.locate("ptxas").found_by) == (str(wheel_ptxas), "NVIDIA wheel")
    inc = toolkit.locate("cuda-include")
    assert (inc.path, inc.found_by) == (str(site / "nvidia" / "cu13" / "include"), "NVIDIA wheel")
    assert toolkit.locate("cuobjdump").found_by == str(default)     # no wheel, none on PATH: the default root
    on_path_nvcc = _exe(tmp_path / "pathbin" / "nvcc")
    assert (toolkit.locate("nvcc").path, toolkit.locate("nvcc").found_by) == (str(on_path_nvcc), "PATH")


def test_kb_cuda_home_none_ignores_installed_toolkits(clean, tmp_path):
    home = _fake_root(tmp_path / "home")
    clean.setenv("CUDA_HOME", str(home))
    fake_pathfinder(clean, home)                                    # pathfinder finds it through CUDA_HOME
    clean.setenv("PATH", str(_exe(tmp_path / "pathbin" / "nvcc").parent))
    clean.setattr(toolkit, "DEFAULT_ROOT", str(_fake_root(tmp_path / "default")))
    site = tmp_path / "site"
    wheel_ptxas = _exe(site / "nvidia" / "cu13" / "bin" / "ptxas")
    clean.syspath_prepend(str(site))
    clean.setenv("KB_CUDA_HOME", "none")
    nvcc = toolkit.locate("nvcc")
    assert nvcc.path is None and nvcc.problem == "KB_CUDA_HOME=none: installed toolkits ignored"
    assert toolkit.locate("ptxas").path == str(wheel_ptxas)          # wheels still count
    assert [r for r, _ in toolkit.toolkit_roots()] == []


def test_cuda_include_override_is_a_directory_holding_cuda_h(clean, tmp_path):
    inc = _file(tmp_path / "inc" / "cuda.h").parent
    clean.setenv("KB_CUDA_INCLUDE", str(inc))
    assert (toolkit.locate("cuda-include").path, toolkit.locate("cuda-include").found_by) == (
        str(inc), "KB_CUDA_INCLUDE")
    clean.setenv("KB_CUDA_INCLUDE", str(tmp_path))
    assert toolkit.locate("cuda-include").problem == f"KB_CUDA_INCLUDE={tmp_path} is not a directory holding cuda.h"


def test_unknown_item_is_a_value_error_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"bridge.toolkit.locate: argument 'name' \(#0\): expected one of "
                                         r"nvcc, ptxas, .*got 'nvc'"):
        toolkit.locate("nvc")


def test_tool_version_reads_the_release_line(tmp_path):
    fake = _exe(tmp_path / "nvcc", release="13.1")
    text = toolkit.tool_version(str(fake))
    assert text == "release 13.1, V13.1.1"
    assert toolkit.cuda_version_of(text) == (13, 1)
    assert toolkit.cuda_version_of("Version 2025.3.0") is None


def test_dsl_compiler_linker_and_libdevice_ask_the_same_locator(clean, tmp_path):
    import dsl.backend.toolkit as dsl_toolkit
    from dsl import link
    from dsl.backend import libdevice, ptxas
    assert dsl_toolkit.locate is toolkit.locate and dsl_toolkit.find_tool is toolkit.find_tool
    root = _fake_root(tmp_path / "home")
    fake_pathfinder(clean, root)
    libdevice.find_libdevice.cache_clear()
    try:
        assert ptxas.find_ptxas() == str(root / "bin" / "ptxas")
        assert link.find_nvcc() == str(root / "bin" / "nvcc")
        assert libdevice.find_libdevice() == root / "nvvm" / "libdevice" / "libdevice.10.bc"
    finally:
        libdevice.find_libdevice.cache_clear()


def test_missing_ptxas_error_names_the_bad_override(clean):
    from dsl.backend.ptxas import PtxasNotFound, assemble
    clean.setenv("KB_PTXAS", "/nonexistent/ptxas")
    with pytest.raises(PtxasNotFound, match=r"^ptxas not found: KB_PTXAS=/nonexistent/ptxas is not an "
                                            r"executable; to get it: "):
        assemble(".version 8.0\n.target sm_80\n.address_size 64\n", "sm_80")


def test_missing_nvcc_for_cu_linking_says_how_to_get_it(clean, tmp_path):
    from dsl.link import LinkError, compile_cu
    src = tmp_path / "f.cu"
    src.write_text("extern \"C\" __device__ float f(float x) { return x; }\n")
    with pytest.raises(LinkError, match=r"needs nvcc, which is not found; to get it: install the CUDA toolkit"):
        compile_cu(src, "sm_80")


def test_missing_libdevice_names_kb_libdevice(clean):
    from dsl.backend.libdevice import LibdeviceNotFound, find_libdevice
    find_libdevice.cache_clear()
    try:
        with pytest.raises(LibdeviceNotFound, match=r"^libdevice.10.bc not found; to get it: .*KB_LIBDEVICE"):
            find_libdevice()
    finally:
        find_libdevice.cache_clear()


def test_the_locator_runs_as_a_plain_script_without_the_package(tmp_path):
    """CMake runs bridge/toolkit.py before the package is built: it must import nothing from bridge."""
    import subprocess
    out = tmp_path / "o.cmake"
    fake = _exe(tmp_path / "bin" / "nvcc")
    code = ("import importlib.util as u, sys; s = u.spec_from_file_location('kb_toolkit', sys.argv[1]); "
            "m = u.module_from_spec(s); sys.modules['kb_toolkit'] = m; s.loader.exec_module(m); "
            "rc = m._cmake_main(sys.argv[2:]); assert 'bridge' not in sys.modules, 'imported bridge'; "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-S", "-c", code, toolkit.__file__, "--cmake", str(out), "nvcc",
                           "cuda-include"], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", ""), "KB_NVCC": str(fake)})
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert f'set(KB_LOCATED_NVCC "{fake}")' in text and 'set(KB_LOCATED_NVCC_BY "KB_NVCC")' in text
    assert "set(KB_LOCATED_CUDA_INCLUDE_BY " in text
