"""Shared fixtures: the `gpu` marker skips with a visible reason when no CUDA device is present, and
the `multigpu` marker when fewer than two are ("needs 2 GPUs, found N").

On the GPU machine, set KB_REQUIRE_GPU=1 (the GPU check does): then a GPU test that would be skipped
fails instead, so a skipped GPU test can never pass for a run. A test that loses its process's CUDA
context (a sticky error) fails alone: its xdist worker is replaced (interop_tests/cuda_context_guard.py).

The DSL disk cache of a test run is a fresh temporary directory (KB_CACHE_DIR), never the user's: it is
set in `pytest_configure`, before any test module compiles a kernel at import, and removed at the end.
"""
from __future__ import annotations

import gc
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

import bridge
from interop_tests.cuda_context_guard import ContextGuard
from interop_tests.required_tools import require_tool
from interop_tests.shard import BY_ENV as SHARD_BY_ENV, ENV as SHARD_ENV, in_shard, parse_by, parse_shard


_TEST_CACHE: dict[str, str] = {}   # this process's temporary cache dir (set once, in pytest_configure)
@pytest.fixture(scope="session")
def nvcc() -> str:
    """nvcc as the one toolkit locator finds it (bridge.toolkit)."""
    from bridge.toolkit import locate
    return require_tool("nvcc", locate("nvcc").path)


@pytest.fixture(scope="session")
def cmake() -> str:
    return require_tool("cmake", shutil.which("cmake"))


# Cyclic GC in the test processes. Once the test modules are imported a worker holds ~270k objects
# (torch, jax, LLVM, hypothesis, the collected items), later up to ~1M (compiled kernels' IR, caches),
# and with CPython's default thresholds each full collection scans all of them (~0.3 s): a run spent
# 12-15 s of one worker's time there. What is alive after collection lives to the end of the session,
# so gc.freeze() takes it out of every later scan, and a gen-0 threshold of 7000 (default 700) makes
# collections 10x rarer. Garbage the tests make is still collected, and explicit gc.collect() calls
# (the deleter tests) still collect everything created after collection.
GC_THRESHOLDS = (7000, 10, 10)


def pytest_configure(config):
    _shard()             # a malformed KB_TEST_SHARD stops the run before anything is collected
    gc.set_threshold(*GC_THRESHOLDS)
    # a test that loses the process's CUDA context fails alone (interop_tests/cuda_context_guard.py)
    config.pluginmanager.register(ContextGuard(), "cuda_context_guard")
    _TEST_CACHE["dir"] = tempfile.mkdtemp(prefix="kb_test_cache_")
    _TEST_CACHE["previous"] = os.environ.get("KB_CACHE_DIR", "")
    os.environ["KB_CACHE_DIR"] = _TEST_CACHE["dir"]


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    gc.freeze()          # the imported modules and the collected items: see GC_THRESHOLDS


def pytest_unconfigure(config):
    if "dir" not in _TEST_CACHE:
        return
    shutil.rmtree(_TEST_CACHE.pop("dir"), ignore_errors=True)
    previous = _TEST_CACHE.pop("previous", "")
    if previous:
        os.environ["KB_CACHE_DIR"] = previous
    else:
        os.environ.pop("KB_CACHE_DIR", None)


@pytest.fixture(scope="session", autouse=True)
def kb_test_cache_dir() -> Path:
    """The run's temporary DSL cache directory; subprocesses inherit it through KB_CACHE_DIR."""
    path = Path(_TEST_CACHE["dir"])
    assert os.environ.get("KB_CACHE_DIR") == str(path), "a test changed KB_CACHE_DIR for the session"
    return path


def _gpus_required() -> int:
    """KB_REQUIRE_GPUS=n: the machine must have n devices, so a multigpu test may not be skipped."""
    try:
        return int(os.environ.get("KB_REQUIRE_GPUS", "0"))
    except ValueError:
        return 0


def _is_multigpu(item) -> bool:
    # the marker, not item.keywords: those also hold the names of the test's folders (interop_tests/multigpu)
    return item.get_closest_marker("multigpu") is not None


def _multigpu_skip_reason() -> str | None:
    """Why a `multigpu` test cannot run here ('needs 2 GPUs, found N'), None when it can."""
    found = bridge.device_count()
    return None if found >= 2 else f"needs 2 GPUs, found {found}"


# The test files holding the longest tests and fixtures (seconds on 2 cores), run first. Under
# `--dist worksteal` each worker runs its share from the front and an idle worker steals from the back of
# another's, so a long test at the front never runs last, alone, while the other worker has finished.
# Whole files move, so a module-scoped fixture is still set up once; the order within them is kept.
LONG_FIRST = (
    "interop_tests/cpp/test_cpp_build_without_nvcc.py",    # builds the package with no toolkit: ~14 s
    "interop_tests/fuzz/test_fuzz_targets.py",              # each target runs its count of inputs
    "interop_tests/cpp_link/test_porting_example.py",       # four CMake + nvcc builds
    "interop_tests/porting/test_new_project.py",            # four generated projects built and tested
    "interop_tests/fuzz/test_fuzz_harness.py",              # a module fixture that waits out a hang
)


def _long_first(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONG_FIRST.index(path) if path in LONG_FIRST else len(LONG_FIRST)


def _shard() -> tuple[int, int, str] | None:
    """KB_TEST_SHARD=i/n (and KB_TEST_SHARD_BY) as (i, n, by); None when unset; a usage error when
    either is malformed."""
    text = os.environ.get(SHARD_ENV)
    if not text:
        return None
    try:
        return (*parse_shard(text), parse_by(os.environ.get(SHARD_BY_ENV)))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def _keep_shard(config, items) -> None:
    """KB_TEST_SHARD=i/n: only the i-th of n shards of whole files (KB_TEST_SHARD_BY=tests: of single tests)
    runs (interop_tests/shard.py)."""
    shard = _shard()
    if shard is None:
        return
    index, count, by = shard
    keep = in_shard([item.nodeid for item in items], index, count, by)
    dropped = [item for item, k in zip(items, keep) if not k]
    items[:] = [item for item, k in zip(items, keep) if k]
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_modifyitems(config, items):
    _keep_shard(config, items)
    items.sort(key=_long_first)          # stable: every other test keeps its place
    # multigpu tests: skipped with a visible reason on machines with fewer than two devices (not a
    # failure under KB_REQUIRE_GPU=1: the GPU check reports them as not run; KB_REQUIRE_GPUS=2 fails them)
    multi = _multigpu_skip_reason()
    if multi is not None and _gpus_required() < 2:
        skip_multi = pytest.mark.skip(reason=multi)
        for item in items:
            if _is_multigpu(item):
                item.add_marker(skip_multi)
    if bridge.gpu_available():
        return
    reason = f"no CUDA device: {bridge.gpu_unavailable_reason()}"
    if os.environ.get("KB_REQUIRE_GPU") == "1":
        return  # pytest_runtest_setup below fails them instead
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords and not _is_multigpu(item):
            item.add_marker(skip)


def pytest_runtest_setup(item):
    if _is_multigpu(item) and _gpus_required() >= 2 and _multigpu_skip_reason() is not None:
        pytest.fail(f"KB_REQUIRE_GPUS={_gpus_required()} but this multigpu test {_multigpu_skip_reason()}")
    if "gpu" in item.keywords and not bridge.gpu_available() and os.environ.get("KB_REQUIRE_GPU") == "1":
        pytest.fail(f"KB_REQUIRE_GPU=1 but no CUDA device: {bridge.gpu_unavailable_reason()}")


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator per test; seeds differ between runs unless KB_TEST_SEED is set."""
    seed = int(os.environ.get("KB_TEST_SEED", np.random.SeedSequence().entropy % (2**32)))
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With KB_REQUIRE_GPU=1 (the GPU check), a skipped GPU test is a failure, whatever skipped it."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and _is_multigpu(item):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if _gpus_required() >= 2:
            report.outcome = "failed"
            report.longrepr = f"multigpu test skipped with KB_REQUIRE_GPUS={_gpus_required()}: {reason}"
        return   # fewer than two devices: not run (never a pass, never a KB_REQUIRE_GPU failure)
    if report.skipped and "gpu" in item.keywords and os.environ.get("KB_REQUIRE_GPU") == "1":
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"GPU test skipped on the GPU machine (KB_REQUIRE_GPU=1): {reason}"
