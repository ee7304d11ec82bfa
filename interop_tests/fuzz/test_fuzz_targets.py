"""The fuzz suite: each target runs for KB_FUZZ_SECONDS (default harness.DEFAULT_SECONDS) with its own
seed, in a crash-isolating worker. A failure lists every distinct finding with its seed, input index,
replay command and the input's repr (docs/fuzzing.md)."""
from __future__ import annotations

import pytest

from interop_tests.fuzz.harness import run_target

# Inputs a target must get through in its budget, and results that must be good: a generator that
# only produces rejected inputs (or a harness that runs none) fails here instead of passing vacuously.
MIN_INPUTS = {"contract": 200, "intake_asarray": 100, "intake_launch": 100, "modules": 100, "dsl_source": 20,
              "decorator": 20, "differential": 10}


def _run(target: str, minimum: int | None = None) -> None:
    floor = MIN_INPUTS[target] if minimum is None else minimum
    report = run_target(target, min_inputs=floor)
    print(report.summary())
    assert not report.findings, report.failure_text()
    assert report.inputs >= floor and report.ok > 0, \
        f"the fuzzer did too little to count: {report.summary()}"


def test_contract_json_and_relations_never_crash_and_refuse_only_with_typed_errors():
    _run("contract")


def test_hostile_producers_through_bridge_asarray_never_crash():
    _run("intake_asarray")


def test_hostile_producers_in_a_validate_only_launch_get_typed_launch_errors():
    _run("intake_launch")


def test_mutated_fatbins_cubins_and_ptx_give_contracts_or_module_format_errors(module_bases):
    _run("modules")


def test_mutated_zoo_kernel_sources_give_ptx_or_compile_errors():
    _run("dsl_source")


def test_decorator_options_are_checked_at_the_def_and_never_reach_llvm():
    _run("decorator")


def test_random_expression_kernels_agree_with_a_float64_reference_on_the_simulator():
    _run("differential")



@pytest.mark.gpu
def test_random_expression_kernels_agree_with_a_float64_reference_on_the_gpu():
    """The differential target's kernels launched on the device (libdevice math, real rounding)."""
    _run("differential_gpu", minimum=10)
