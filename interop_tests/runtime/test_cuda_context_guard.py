"""interop_tests/cuda_context_guard.py: a test that loses its process's CUDA context (a sticky error)
fails alone. Checked without a GPU: a small suite in a temporary folder whose first test raises what
bridge raises after an illegal instruction, run by a pytest subprocess with and without xdist."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from interop_tests.cuda_context_guard import sticky_cuda_error

REPO = Path(__file__).resolve().parents[2]
CONFTEST = f'''
import sys
sys.path.insert(0, {str(REPO)!r})
from interop_tests.cuda_context_guard import ContextGuard


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device")
    config.pluginmanager.register(ContextGuard(), "cuda_context_guard")
'''
SUITE = '''
import os
import pytest

FAULT = "cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_INSTRUCTION (an illegal instruction was encountered)"


def record(name):
    with open(os.environ["GUARD_LOG"], "a") as f:
        f.write(f"{name} {os.getpid()}\\n")


@pytest.mark.gpu
def test_a_faults():
    record("a")
    raise RuntimeError(FAULT)


@pytest.mark.gpu
@pytest.mark.parametrize("i", range(4))
def test_b_later_gpu_test(i):
    record(f"b{i}")


def test_c_cpu_test():
    record("c")
'''


def _run(tmp_path: Path, *opts: str) -> tuple[subprocess.CompletedProcess, list[tuple[str, int]]]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_suite.py").write_text(SUITE)
    log = tmp_path / "ran.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_suite.py"), *opts],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**_env(), "GUARD_LOG": str(log)})
    ran = [(name, int(pid)) for name, pid in (line.split() for line in log.read_text().splitlines())]
    return done, ran


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


@pytest.mark.slow
def test_in_one_process_later_gpu_tests_fail_at_once_naming_the_test_that_lost_the_context(tmp_path):
    done, ran = _run(tmp_path, "-n", "0")
    out = done.stdout
    assert "1 failed, 1 passed, 4 errors" in out, out        # the later GPU tests: errors at setup
    assert [name for name, _ in ran] == ["a", "c"], ran       # ... so they never started
    assert out.count("test_suite.py::test_a_faults lost this process's CUDA context") >= 4, out
    assert "CUDA_ERROR_ILLEGAL_INSTRUCTION" in out


@pytest.mark.slow
def test_under_xdist_the_worker_is_replaced_and_the_later_tests_run_in_a_fresh_process(tmp_path):
    done, ran = _run(tmp_path, "-n", "1", "--max-worker-restart", "2")
    out = done.stdout + done.stderr
    names = [name for name, _ in ran]
    assert sorted(names) == ["a", "b0", "b1", "b2", "b3", "c"], ran
    pid_a = dict(ran)["a"]
    assert all(pid != pid_a for name, pid in ran if name != "a"), ran     # all after it in a new worker
    assert "5 passed" in out and "failed" in out, out
    assert "lost this process's CUDA context" not in out, out


@pytest.mark.parametrize("text,want", [
    ("cuCtxSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)",
     "CUDA_ERROR_ILLEGAL_ADDRESS"),
    ("CUDA error: device-side assert triggered", "device-side assert triggered"),
    ("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", None),
    ("expected shape (4, 8), got (4, 9)", None),
])
def test_only_sticky_cuda_errors_count_as_a_lost_context(text, want):
    assert sticky_cuda_error(RuntimeError(text)) == want


def test_a_sticky_error_raised_from_another_exception_counts():
    try:
        try:
            raise RuntimeError("CUDA error: an illegal instruction was encountered")
        except RuntimeError as inner:
            raise AssertionError("the kernel's result differs") from inner
    except AssertionError as outer:
        assert sticky_cuda_error(outer) == "an illegal instruction was encountered"
