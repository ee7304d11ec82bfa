"""The fuzz targets by name. Each is a module with:

- `generate(rng: random.Random) -> spec`: a plain-data input (picklable, its repr is the repro), made
  in the parent from a structure-aware generator (mutated valid seeds, not only random bytes);
- `execute(spec) -> str`: run in the worker; returns a short summary of a good result, or raises;
- `allowed(exc, spec) -> bool`: whether an exception is one of the target's typed refusals;
- `TIMEOUT`: seconds one input may take before it counts as a hang;
- `INPUTS` (optional): how many inputs a suite run gives it (default DEFAULT_INPUTS), chosen so the
  target takes a few seconds on a 2-core machine: the suite counts inputs, not seconds.

`execute` raises `Oracle(...)` when a result is wrong although no exception escaped (a different
contract from corrupt bytes, a simulator result that disagrees with NumPy, ...): always a finding.
"""
from __future__ import annotations

import importlib
from types import ModuleType

TARGETS: dict[str, str] = {
    "contract": "interop_tests.fuzz.t_contract",
    "intake_asarray": "interop_tests.fuzz.t_intake",
    "intake_launch": "interop_tests.fuzz.t_intake",
    "modules": "interop_tests.fuzz.t_modules",
    "dsl_source": "interop_tests.fuzz.t_dsl_source",
    "decorator": "interop_tests.fuzz.t_decorator",
    "differential": "interop_tests.fuzz.t_differential",
    "differential_gpu": "interop_tests.fuzz.t_differential",   # the same kernels on the device (GPU tests)
    "selftest": "interop_tests.fuzz.t_selftest",     # the harness's own tests: crashes on request
    "contract_depth": "interop_tests.fuzz.t_parsers",   # the bounded parsers of embedded contracts
    "ptx_literal": "interop_tests.fuzz.t_parsers",
}

DEFAULT_INPUTS = 50

# what the CPU test suite runs (test_fuzz_targets.py), every registered target but the harness's own
# (selftest, exercised by test_fuzz_harness.py) and the device ones (*_gpu, each run by a GPU test)
SUITE: tuple[str, ...] = tuple(name for name in TARGETS if name != "selftest" and not name.endswith("_gpu"))


class Oracle(Exception):
    """A wrong result: no exception escaped, but the output breaks a property the target checks."""


class _Bound:
    """A module's target functions with the target name bound (one module may serve two targets)."""

    def __init__(self, module: ModuleType, name: str) -> None:
        self.module, self.name = module, name
        variant = getattr(module, "variant", None)
        self.TIMEOUT = getattr(module, "TIMEOUT", 10.0)
        self.INPUTS = int(getattr(module, "INPUTS", DEFAULT_INPUTS))
        self._variant = variant(name) if variant else None

    def warm(self) -> None:
        warm = getattr(self.module, "warm", None)
        if warm is not None:
            warm()

    def generate(self, rng):
        return self.module.generate(rng) if self._variant is None else self.module.generate(rng, self._variant)

    def execute(self, spec):
        return self.module.execute(spec) if self._variant is None else self.module.execute(spec, self._variant)

    def allowed(self, exc, spec) -> bool:
        return (self.module.allowed(exc, spec) if self._variant is None
                else self.module.allowed(exc, spec, self._variant))


def load(name: str) -> _Bound:
    if name not in TARGETS:
        raise KeyError(f"unknown fuzz target {name!r}; targets: {', '.join(TARGETS)}")
    return _Bound(importlib.import_module(TARGETS[name]), name)
