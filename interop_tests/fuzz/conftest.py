"""Fixtures of the fuzz suite: the module bases the `modules` target mutates (built once per machine)."""
from __future__ import annotations


import pytest

from interop_tests.required_tools import missing



@pytest.fixture(scope="session")
def module_bases() -> dict:
    """Base name -> path of every module the `modules` target mutates (nvcc builds a few, cached)."""
    from interop_tests.fuzz import t_modules
    found = t_modules.bases()
    if not found:
        why = "no nvcc and no installed bridge/kernels/*.fatbin: nothing to mutate"
        missing(f"the modules fuzz target needs base modules: {why}")
    return found
