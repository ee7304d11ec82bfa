"""The `lz4` package in tests: a dependency of kernelbridge, so required in CI; a visible skip where it
is missing (the GPU machine has no network to install it); and a way to hide it, to test the typed
refusal an LZ4 entry meets without it."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest


def require_lz4_package() -> None:
    if importlib.util.find_spec("lz4") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the lz4 package is required in CI (a kernelbridge dependency: pip install -e .)")
        pytest.skip("the lz4 package (a kernelbridge dependency) is not installed here: LZ4 fatbin entries "
                    "cannot be decoded (pip install lz4)")


def hide_lz4_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import lz4.block` fail for the test's duration (bridge.fatbin imports it per call)."""
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.block", None)
