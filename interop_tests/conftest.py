"""Shared fixtures: the `gpu` marker skips with a visible reason when no CUDA device is present.

On the GPU machine, set KB_REQUIRE_GPU=1 (the GPU check does): then a GPU test that would be skipped
fails instead, so a skipped GPU test can never pass for a run.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import bridge


def pytest_collection_modifyitems(config, items):
    if bridge.gpu_available():
        return
    reason = f"no CUDA device: {bridge.gpu_unavailable_reason()}"
    if os.environ.get("KB_REQUIRE_GPU") == "1":
        return  # pytest_runtest_setup below fails them instead
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item):
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
    if report.skipped and "gpu" in item.keywords and os.environ.get("KB_REQUIRE_GPU") == "1":
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.longrepr = f"GPU test skipped on the GPU machine (KB_REQUIRE_GPU=1): {reason}"
