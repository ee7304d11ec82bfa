"""The install's build is fast and says what it does (issue 31; docs/install.md has the timings).

- Every `cpp/native/*.cpp` is compiled exactly once, in one of two unity batches; the launch path's
  files are in the `-O3` batch, the rest at `-O2`, and no step is LTO (pybind11's default LTO made the
  link a serial 25 s pass).
- Under scikit-build-core, with a terminal, the build tells the terminal itself (pip captures its output
  without -v) that it is compiling and for about how long, and that the C++ kernels were skipped.
- The README, the build's notice and docs/install.md state one duration and how to watch the build.
No timing is asserted here: the numbers are measured (docs/install.md), the layout that gives them is
what these tests hold.
"""
from __future__ import annotations

import functools
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.required_tools import require_tool

REPO = Path(__file__).resolve().parents[2]
HOT_PATH = {"launcher.cpp", "intake_fast.cpp", "intake.cpp", "driver_api.cpp"}   # per-launch code


@functools.lru_cache(maxsize=1)
def _pybind11_dir() -> str:
    return subprocess.run([sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _run_on_a_terminal(argv: list[str], timeout: float = 300) -> tuple[int, str]:
    """Run argv as the leader of a new session whose controlling terminal is a pseudo-terminal (as
    pip's build runs under an interactive shell); return its exit status and everything the terminal
    received, /dev/tty writes included."""
    pid, fd = pty.fork()
    if pid == 0:                                    # child: the pty is its stdin/stdout/stderr and tty
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:                             # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode(errors="replace")


@pytest.fixture(scope="module")
def configured(tmp_path_factory) -> tuple[Path, int, str]:
    """One configure as scikit-build-core runs it (SKBUILD set), on a terminal, with nvcc missing."""
    cmake = require_tool("cmake", shutil.which("cmake"))
    ninja = require_tool("ninja", shutil.which("ninja"))
    build = tmp_path_factory.mktemp("layout") / "b"
    rc, out = _run_on_a_terminal(
        [cmake, "-S", str(REPO), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
         "-DCMAKE_BUILD_TYPE=Release", "-DSKBUILD=2", f"-Dpybind11_DIR={_pybind11_dir()}",
         f"-DPython_EXECUTABLE={sys.executable}", "-DKB_JAX_FFI_INCLUDE=/nonexistent/jax-ffi-headers",
         "-DKB_NVCC=/nonexistent/bin/nvcc"])
    return build, rc, out


def _batch(build: Path, name: str) -> list[str]:
    text = (build / f"kb_native_{name}.cpp").read_text()
    return [Path(p).name for p in re.findall(r'^#include "([^"]+)"$', text, re.M)]


def _flags_of(build: Path, obj: str) -> str:
    ninja = (build / "build.ninja").read_text()
    block = ninja.split(f"build CMakeFiles/_native.dir/{obj}:", 1)[1].split("\n\n", 1)[0]
    return re.search(r"^\s*FLAGS = (.*)$", block, re.M).group(1)


@pytest.mark.slow       # one CMake configure (~5 s on 2 cores)
def test_every_native_source_is_compiled_once_in_one_of_two_batches(configured):
    build, rc, out = configured
    assert rc == 0, out[-3000:]
    hot, cold = _batch(build, "hot"), _batch(build, "cold")
    sources = sorted(p.name for p in (REPO / "cpp" / "native").glob("*.cpp"))
    assert sorted(hot + cold) == sources, (hot, cold)
    assert HOT_PATH <= set(hot), f"the launch path must be in the -O3 batch: {hot}"


@pytest.mark.slow
def test_the_hot_batch_is_O3_the_cold_one_O2_and_nothing_is_lto(configured):
    build, rc, out = configured
    assert rc == 0, out[-3000:]
    hot, cold = _flags_of(build, "kb_native_hot.cpp.o"), _flags_of(build, "kb_native_cold.cpp.o")
    assert re.findall(r"-O\d", hot)[-1] == "-O3", hot          # the last -O given wins
    assert re.findall(r"-O\d", cold)[-1] == "-O2", cold
    assert "-flto" not in (build / "build.ninja").read_text()


@pytest.mark.slow
def test_the_terminal_hears_that_it_compiles_and_that_the_kernels_were_skipped(configured):
    _, rc, out = configured
    assert rc == 0, out[-3000:]
    assert re.search(r"kernelbridge: compiling the C\+\+ extension, about \d+ s on 2 cores", out), out[-3000:]
    skipped = re.search(r"kernelbridge: C\+\+ kernels skipped: ([^\n]*)", out)
    assert skipped, out[-3000:]
    assert "/nonexistent/bin/nvcc" in skipped.group(1) and "To get the C++ ones:" in skipped.group(1)


def test_without_scikit_build_the_configure_writes_nothing_to_the_terminal():
    """Plain CMake users (and the other tests' configures) see CMake's own messages only."""
    text = (REPO / "CMakeLists.txt").read_text()
    body = text.split("function(_kb_tell_terminal", 1)[1].split("endfunction()", 1)[0]
    assert re.search(r"if\(SKBUILD AND UNIX AND EXISTS /dev/tty\)", body), body


def test_readme_the_build_notice_and_the_install_page_state_one_duration_and_how_to_watch():
    readme = (REPO / "README.md").read_text()
    cmake = (REPO / "CMakeLists.txt").read_text()
    page = (REPO / "docs" / "install.md").read_text()
    said = {where: re.findall(r"about (\d+) s on 2 cores", text)
            for where, text in (("README.md", readme), ("CMakeLists.txt", cmake), ("docs/install.md", page))}
    assert all(said.values()) and len({n for ns in said.values() for n in ns}) == 1, said
    assert "pip install -v -e ." in readme and "docs/install.md" in readme
    assert "pip install -v" in cmake.split("_kb_tell_terminal(\"kernelbridge: compiling", 1)[1].split("\n", 1)[0]
