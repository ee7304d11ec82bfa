"""`KB_LIBDEVICE` names a libdevice.10.bc file, and nothing else: a directory, a device (/dev/zero, whose
read never ends), a missing path, a file that is not LLVM bitcode or is damaged bitcode, or one larger
than MAX_LIBDEVICE_BYTES is a ConfigurationError naming the variable from a compile that needs libdevice,
never IsADirectoryError / RuntimeError / a hang. The locator reports the same problem (with the
variable) to the doctor, and treats a `KB_CUDA_HOME` that is not a directory the same way."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bridge import ConfigurationError, toolkit
from dsl import f32, simt
from dsl.backend import libdevice
from interop_tests.toolkit import test_toolkit_locator as locator_tests

# the locator tests' fixtures: no toolkit reachable but what a test adds
bare, clean = locator_tests.bare, locator_tests.clean

EXPECTED = (r"KB_LIBDEVICE must name a libdevice.10.bc file: a regular file of LLVM bitcode of at most "
            rf"{toolkit.MAX_LIBDEVICE_BYTES} bytes, or be left unset$")


@simt.kernel(block=64)
def soft(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = math.exp(a[i])           # a libdevice function: the compile links libdevice


@pytest.fixture
def compile_with(monkeypatch):
    """compile_with(value): soft's PTX with KB_LIBDEVICE=value, compiled for real (no disk cache)."""
    monkeypatch.setenv("KB_CACHE", "0")
    a = np.ones(64, np.float32)

    def run(value: str) -> str:
        monkeypatch.setenv("KB_LIBDEVICE", value)
        libdevice.find_libdevice.cache_clear()
        fresh = simt.kernel(block=64)(soft.pyfunc)   # no PTX kept in memory by an earlier test's compile
        try:
            return fresh.ptx(a, a, arch="sm_80")
        finally:
            libdevice.find_libdevice.cache_clear()
    return run


def test_a_directory_is_refused_naming_the_variable(compile_with, tmp_path):
    with pytest.raises(ConfigurationError, match=rf"^libdevice.10.bc: KB_LIBDEVICE={tmp_path} is a directory, "
                                                 rf"not a file; {EXPECTED}") as err:
        compile_with(str(tmp_path))
    assert err.value.variable == "KB_LIBDEVICE"


def test_a_file_that_is_not_bitcode_is_refused_before_llvm_reads_it(compile_with, tmp_path):
    junk = tmp_path / "libdevice.10.bc"
    junk.write_bytes(b"garbage, not bitcode" * 50)
    with pytest.raises(ConfigurationError, match=rf"^libdevice.10.bc: KB_LIBDEVICE={junk} is not LLVM bitcode "
                                                 rf"\(it starts with b'garb'\); {EXPECTED}"):
        compile_with(str(junk))


def test_damaged_bitcode_is_refused_naming_the_variable(compile_with, tmp_path):
    damaged = tmp_path / "libdevice.10.bc"
    damaged.write_bytes(b"BC\xc0\xde" + bytes(range(256)) * 4)
    with pytest.raises(ConfigurationError, match=rf"^libdevice.10.bc: KB_LIBDEVICE={damaged} is damaged LLVM "
                                                 rf"bitcode \(.*\); {EXPECTED}"):
        compile_with(str(damaged))


def test_a_missing_path_is_refused_naming_the_variable(compile_with, tmp_path):
    with pytest.raises(ConfigurationError, match=rf"KB_LIBDEVICE={tmp_path / 'nope.bc'} does not exist; "):
        compile_with(str(tmp_path / "nope.bc"))


def test_a_file_larger_than_a_libdevice_is_refused_unread(compile_with, tmp_path):
    huge = tmp_path / "libdevice.10.bc"
    with open(huge, "wb") as f:                 # sparse: no disk used, and nothing reads it
        f.truncate(toolkit.MAX_LIBDEVICE_BYTES + 1)
    with pytest.raises(ConfigurationError, match=rf"KB_LIBDEVICE={huge} has {toolkit.MAX_LIBDEVICE_BYTES + 1} "
                                                 rf"bytes, more than the {toolkit.MAX_LIBDEVICE_BYTES} "):
        compile_with(str(huge))


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero on this system")
def test_dev_zero_is_refused_at_once_instead_of_read_forever(tmp_path):
    code = textwrap.dedent("""
        import math, numpy as np
        from dsl import f32, simt
        @simt.kernel(block=64)
        def soft(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = math.exp(a[i])
        a = np.ones(64, np.float32)
        try:
            soft.ptx(a, a, arch="sm_80")
        except Exception as e:
            print(type(e).__name__, e)
    """)
    src = tmp_path / "soft.py"
    src.write_text(code)
    env = dict(os.environ, KB_LIBDEVICE="/dev/zero", KB_CACHE="0", PYTHONPATH=str(Path.cwd()))
    r = subprocess.run([sys.executable, str(src)], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ConfigurationError libdevice.10.bc: KB_LIBDEVICE=/dev/zero is not a regular "
                               "file; KB_LIBDEVICE must name"), r.stdout


def test_a_good_override_still_compiles_and_links(compile_with):
    ptx = compile_with(str(libdevice.find_libdevice()))
    assert ".entry soft" in ptx and "__nv_expf" not in ptx      # linked in and inlined, not left external


def test_the_locator_reports_the_problem_and_the_variable(clean, tmp_path):
    clean.setenv("KB_LIBDEVICE", str(tmp_path))
    found = toolkit.locate("libdevice")
    assert (found.path, found.variable) == (None, "KB_LIBDEVICE")
    assert found.describe().startswith(f"not found: KB_LIBDEVICE={tmp_path} is a directory, not a file; to get it:")


def test_a_kb_cuda_home_that_is_not_a_directory_is_reported_not_skipped(clean, tmp_path):
    home = locator_tests._fake_root(tmp_path / "home")
    locator_tests.fake_pathfinder(clean, home)          # pathfinder would find it, were it not for ...
    clean.setenv("KB_CUDA_HOME", str(tmp_path / "typo"))
    found = toolkit.locate("ptxas")
    assert (found.path, found.variable) == (None, "KB_CUDA_HOME")
    assert found.problem == (f"KB_CUDA_HOME={tmp_path / 'typo'} is not a directory (expected a CUDA toolkit root, "
                             "or 'none')")
    libdevice.find_libdevice.cache_clear()
    try:
        with pytest.raises(ConfigurationError, match=r"^libdevice.10.bc: KB_CUDA_HOME=.* is not a directory") as err:
            libdevice.find_libdevice()
        assert err.value.variable == "KB_CUDA_HOME"
    finally:
        libdevice.find_libdevice.cache_clear()
    clean.setenv("KB_CUDA_HOME", "none")
    assert toolkit.locate("ptxas").variable == ""
