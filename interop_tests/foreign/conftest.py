"""Triton writes its compile cache under the test run's temporary cache directory, never the user's
~/.triton (as the DSL's: interop_tests/conftest.py)."""
from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _triton_cache_in_the_test_cache(kb_test_cache_dir, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(kb_test_cache_dir / "triton"))
