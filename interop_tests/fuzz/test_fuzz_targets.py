"""The fuzz suite: every target of targets.SUITE runs its own count of inputs (`INPUTS` in its module) with
its own seed, in a crash-isolating worker; KB_FUZZ_SECONDS keeps it going longer (the nightly run). A
failure lists every distinct finding with its seed, input index, replay command and the input's repr
(docs/fuzzing.md). A target registered in targets.TARGETS is run here without another line."""
from __future__ import annotations

import pytest

from interop_tests.fuzz.harness import Report, run_target
from interop_tests.fuzz.targets import SUITE

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): about 25 s on 2 cores: each target's count of inputs

# Targets that need a fixture of conftest.py first (it skips them, with the reason, where it cannot be made).
FIXTURES = {"modules": "module_bases"}


def check(report: Report) -> None:
    """No finding, every input it was asked for, and at least one good result: a generator that only
    produces rejected inputs (or a harness that runs none) fails here instead of passing vacuously."""
    print(report.summary())
    assert not report.findings, report.failure_text()
    assert not report.limited, (f"the fuzzer stopped at its wall-clock limit, unfinished (a stuck target, "
                                f"not a loaded machine): {report.summary()}")
    assert report.inputs >= report.wanted and report.ok > 0, f"the fuzzer did too little to count: {report.summary()}"


@pytest.mark.parametrize("target", SUITE)
def test_every_input_ends_in_a_checked_result_or_a_typed_refusal(request, target):
    """contract: contract JSON and relations; intake_*: hostile producers through asarray and a
    validate-only launch; modules: mutated fatbins, cubins and PTX; dsl_source: mutated zoo kernel
    sources; decorator: decorator options checked at the def; differential: random expression kernels
    against a float64 reference on the simulator (the table in docs/fuzzing.md says more)."""
    if target in FIXTURES:
        request.getfixturevalue(FIXTURES[target])
    check(run_target(target))


@pytest.mark.gpu
def test_random_expression_kernels_agree_with_a_float64_reference_on_the_gpu():
    """The differential target's kernels launched on the device (libdevice math, real rounding)."""
    check(run_target("differential_gpu", inputs=10))
