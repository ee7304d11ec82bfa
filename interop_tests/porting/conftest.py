"""Fixtures for the porting tests: nvcc and cmake (in CI a missing tool fails the test instead of
skipping it, as in interop_tests/cpp)."""
from __future__ import annotations

import os
import shutil

import pytest


def _tool(name: str, *extra: str) -> str:
    found = shutil.which(name) or next((p for p in extra if os.path.exists(p)), None)
    if found:
        return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{name} is required in CI (CI=true) for the porting tests but was not found")
    pytest.skip(f"{name} not found")


@pytest.fixture(scope="session")
def nvcc() -> str:
    return _tool("nvcc", "/usr/local/cuda/bin/nvcc")


@pytest.fixture(scope="session")
def cmake() -> str:
    return _tool("cmake")
