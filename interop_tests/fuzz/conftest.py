"""Fixtures of the fuzz suite: the module bases the `modules` target mutates (built once per machine)."""
from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def module_bases() -> dict:
    """Base name -> path of every module the `modules` target mutates (nvcc builds a few, cached)."""
    from interop_tests.fuzz import t_modules
    found = t_modules.bases()
    if not found:
        why = "no nvcc and no installed bridge/kernels/*.fatbin: nothing to mutate"
        if IN_CI:
            pytest.fail(f"the modules fuzz target needs base modules in CI (CI=true): {why}")
        pytest.skip(why)
    return found
