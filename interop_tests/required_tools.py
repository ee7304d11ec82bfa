"""Tools the C++ and toolkit tests need: in CI (CI=true) a missing one fails the test — those tests may
never pass by not running — and elsewhere it skips with the reason."""
from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def missing(why: str) -> None:
    """What a test needs is missing: fail in CI, skip (with `why`) elsewhere."""
    if IN_CI:
        pytest.fail(f"required in CI (CI=true): {why}")
    pytest.skip(why)


def require_tool(what: str, path: str | None) -> str:
    """`path`, or fail (CI) / skip (elsewhere) naming `what`."""
    if not path:
        missing(f"{what} not found")
    return path  # type: ignore[return-value]
