"""The optional `lz4` package in tests: required in CI (the `test` extra installs it), a visible skip
elsewhere; and a way to hide it so the pure-Python LZ4 decoder is tested too."""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest


def require_lz4_package() -> None:
    if importlib.util.find_spec("lz4") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("the lz4 package is required in CI (pip install -e '.[test]')")
        pytest.skip("the optional lz4 package is not installed (pip install 'kernelbridge[fast]')")


def hide_lz4_package(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import lz4.block` fail for the test's duration (bridge.fatbin imports it per call)."""
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.block", None)
