"""Shared fixtures of the C++ linking / AOT tests. In CI (CI=true) a missing tool fails, never skips."""
from __future__ import annotations

import os
import shutil

import pytest

from dsl import link

IN_CI = os.environ.get("CI", "").lower() == "true"


def _missing(what: str) -> None:
    if IN_CI:
        pytest.fail(f"{what} is required in CI (CI=true) for the C++ linking tests")
    pytest.skip(f"{what} not found")


@pytest.fixture(scope="session")     # a lookup: module-scoped build fixtures use it too
def nvcc_path() -> str:
    path = link.find_nvcc()
    if path is None:
        _missing("nvcc")
    return path  # type: ignore[return-value]


@pytest.fixture
def nvjitlink() -> None:
    if not link.available():
        _missing("nvJitLink (pip install nvidia-nvjitlink)")


@pytest.fixture(scope="session")
def cmake_path() -> str:
    path = shutil.which("cmake")
    if path is None:
        _missing("cmake")
    return path  # type: ignore[return-value]
