"""Triton writes its compile cache under the test run's temporary cache directory, never the user's
~/.triton (as the DSL's: interop_tests/conftest.py); JAX must not grab 75% of the GPU when its CUDA
backend starts (test_foreign_integrations_gpu.py runs it next to the other tests of the worker)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


@pytest.fixture(autouse=True)
def _triton_cache_in_the_test_cache(kb_test_cache_dir, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(kb_test_cache_dir / "triton"))
