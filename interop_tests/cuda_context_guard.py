"""A pytest plugin (registered by interop_tests/conftest.py): one test that breaks its process's CUDA
context must not take every later test of that process with it.

A sticky CUDA error (an illegal address or instruction, a misaligned address, a device-side assert, a
launch failure) leaves the context unusable: every later CUDA call of the process fails with the same
error. On the H200 on 2026-12-05 one faulting PTX probe turned into 78 failures, every test its xdist
worker ran after it, and those tests stayed unverified. With this plugin the test that hit the error
fails as it should, naming the error, and then:
- in an xdist worker, the worker exits once the test is reported, so xdist starts a fresh worker (a
  fresh process, a fresh context) for the tests it had left (`--max-worker-restart`, by default four
  per worker);
- in a single process (the GPU check's compute-sanitizer passes), every later GPU test fails at once
  with a message that names the test that lost the context, instead of each failing with the error.
"""
from __future__ import annotations

import os

import pytest

# The driver's names of the sticky errors (bridge.errors.CudaError messages carry them) and torch's
# wording of the same errors
STICKY = ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ILLEGAL_INSTRUCTION", "CUDA_ERROR_MISALIGNED_ADDRESS",
          "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC", "CUDA_ERROR_HARDWARE_STACK_ERROR",
          "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT", "an illegal memory access was encountered",
          "an illegal instruction was encountered", "misaligned address", "unspecified launch failure",
          "device-side assert triggered")
EXIT_CODE = 3       # the worker's exit status when it leaves for a fresh one


def sticky_cuda_error(exc: BaseException | None) -> str | None:
    """The sticky CUDA error `exc` (or an exception it was raised from or during) reports, or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        for marker in STICKY:
            if marker in text:
                return marker
        exc = exc.__cause__ or exc.__context__
    return None


class ContextGuard:
    """The plugin's state: the test of this process that lost the CUDA context, and why."""

    def __init__(self) -> None:
        self.lost: tuple[str, str] | None = None      # (node id, error)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        if self.lost is None and call.excinfo is not None:
            why = sticky_cuda_error(call.excinfo.value)
            if why is not None:
                self.lost = (item.nodeid, why)
                outcome.get_result().sections.append(
                    ("CUDA context", f"{why}: this process's CUDA context is lost; "
                     + ("the xdist worker restarts" if _in_worker() else "later GPU tests are not run")))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        if self.lost is not None and "gpu" in item.keywords:
            nodeid, why = self.lost
            pytest.fail(f"not run: {nodeid} lost this process's CUDA context ({why}), so every later CUDA "
                        f"call here fails; run this test on its own", pytrace=False)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid, location):
        if self.lost is not None and self.lost[0] == nodeid and _in_worker():
            os._exit(EXIT_CODE)     # after the test's reports: xdist replaces the worker


def _in_worker() -> bool:
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))
