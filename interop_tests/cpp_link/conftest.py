"""Shared fixtures of the C++ linking / AOT tests (nvcc and cmake: interop_tests/conftest.py). In CI
(CI=true) a missing tool fails, never skips."""
from __future__ import annotations

import pytest

from dsl import link
from interop_tests.required_tools import require_tool


@pytest.fixture
def nvjitlink() -> None:
    if not link.available():
        require_tool("nvJitLink (pip install nvidia-nvjitlink)", None)
