"""Mixed C++ / DSL GPT-2 steps on the CPU simulator (the 2-layer, 64-channel `tiny` model): seeded
random mixes train a few steps against the float64 torch.nn model, every C++ kernel launch of them
validated against the C++ kernel's own contract (host_cpp.py: the launch is checked, the DSL port
computes; the torch-side ops run on CPU tensors); and misuse is refused before the launch: a buffer
one side would hand the other in another dtype or shape stops the step at the first kernel that
touches it, C++ or DSL, with the validator's typed error naming the kernel and the argument, and
nothing the step owns has changed (outputs poisoned with NaN stay NaN; parameters, gradients and
AdamW moments are bitwise as before).

Tolerances (relative, against float64, per step): loss 1e-4, gradient norm 2e-3, as
test_gpt2_simulator.py's (measured over 20 tiny steps all-DSL: <= 2e-5 and 1.3e-3; mixes come closer,
their torch-side GEMMs are not tf32-rounded on the CPU)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from examples.gpt2 import registry
from examples.gpt2.config import config
from examples.gpt2.model import batch, init_params
from examples.gpt2.reference import reference_run
from interop_tests.gpt2 import host_cpp
from interop_tests.gpt2.mixes import mix, mix_id

LOSS_RTOL, NORM_RTOL = 1e-4, 2e-3
STEPS = 4
MIX_SEEDS = (0, 1, 2, 3)


@pytest.fixture(scope="module")
def tiny():
    return config("tiny")


@pytest.fixture(scope="module")
def reference(tiny):
    return reference_run(tiny, init_params(tiny), STEPS)


@pytest.fixture(autouse=True)
def _sdpa(monkeypatch):
    host_cpp.sdpa_stand_in(monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("seed", MIX_SEEDS, ids=[mix_id(s) for s in MIX_SEEDS])
def test_seeded_mixes_train_like_the_float64_reference(seed, tiny, reference):
    dsl = mix(seed)
    model = host_cpp.mixed_model(tiny, dsl)
    for step, (loss, norm) in enumerate(reference):
        model.set_batch(*batch(tiny, step))
        model.step(step + 1)
        where = f"--dsl {registry.describe(dsl)} step {step + 1}"
        assert abs(model.loss() / loss - 1) <= LOSS_RTOL, (where, model.loss(), loss)
        assert abs(model.grad_norm() / norm - 1) <= NORM_RTOL, (where, model.grad_norm(), norm)
    # every C++-side op with a cpp/kernels/llm kernel went through that kernel's contract, every step
    cpp_kernels = {n for n, side in model.sides.items() if side == "cpp" and n not in host_cpp.TORCH_OPS}
    launched = {_op_of(k) for k in model.rt.launches}
    assert launched == cpp_kernels, (sorted(launched), sorted(cpp_kernels))


def _op_of(kernel: str) -> str:
    return kernel.removesuffix("_f32")


# ---- misuse: refused before the launch, nothing changed ------------------------------------------------
def _owned(model) -> dict[str, np.ndarray]:
    lib = model.rt.lib
    return {n: lib.to_numpy(getattr(model, n)).copy() for n in ("params", "grads", "m", "v")}


def _assert_unchanged(model, before: dict[str, np.ndarray]) -> None:
    for name, was in before.items():
        assert np.array_equal(model.rt.lib.to_numpy(getattr(model, name)), was), f"{name} changed"


def _sided(op: str, side: str) -> frozenset[str]:
    """Mix 5 with `op` put on `side`: a mixed step either way."""
    return mix(5) - {op} if side == "cpp" else mix(5) | {op}


@pytest.mark.parametrize("side", ["cpp", "dsl"])
def test_int64_targets_stop_a_mixed_step_at_the_cross_entropy_naming_the_argument(side, tiny):
    """A data pipeline that hands over torch's default int64 tokens where both cross-entropy kernels
    read int32: the forward runs (its other ops on both sides), then the cross-entropy launch is
    refused, by the C++ kernel's contract or the DSL port's, before it writes a loss."""
    model = host_cpp.mixed_model(tiny, _sided("crossentropy_forward", side))
    model.targets = model.rt.lib.zeros((tiny.tokens,), "int64")
    model.set_batch(*batch(tiny, 0))
    model.acts.losses.fill_(float("nan"))
    before = _owned(model)
    with pytest.raises(bridge.DTypeError) as err:
        model.step(1)
    assert (err.value.kernel, err.value.arg_name) == ("crossentropy_forward", "targets")
    assert "int32" in str(err.value) and "got int64" in str(err.value)
    assert np.isnan(model.rt.lib.to_numpy(model.acts.losses)).all()
    assert np.isfinite(model.rt.lib.to_numpy(model.acts.lnf)).all()          # the forward before it ran
    assert "encoder_forward" in model.rt.launches                     # C++ launches before it were checked
    assert "crossentropy_forward" not in model.rt.launches
    _assert_unchanged(model, before)


@pytest.mark.parametrize("side,relation", [("cpp", "len(mean) == N"), ("dsl", "len(mean) == inp.shape[0]")])
def test_a_statistics_buffer_one_row_short_is_refused_by_either_sides_layernorm(side, relation, tiny):
    """The layernorm's per-row mean buffer one row short (as if sized by a side that drops the last
    token): the first layernorm launch refuses it, naming the relation of its own contract."""
    model = host_cpp.mixed_model(tiny, _sided("layernorm_forward", side))
    model.acts.ln1_mean = model.rt.lib.zeros((tiny.n_layer, tiny.tokens - 1))
    model.set_batch(*batch(tiny, 0))
    model.acts.ln1.fill_(float("nan"))
    before = _owned(model)
    with pytest.raises(bridge.ShapeRelationError) as err:
        model.step(1)
    assert err.value.kernel == "layernorm_forward" and relation in str(err.value)
    assert "got len(mean) = 127" in str(err.value)
    assert np.isnan(model.rt.lib.to_numpy(model.acts.ln1)).all()
    _assert_unchanged(model, before)


def test_the_host_stand_in_checks_the_cpp_contract_not_the_ports():
    """The C++ contract is the one refusing: a launch the DSL port would take (its grid derived, no
    size scalars) but the C++ kernel's sizes contradict is refused by the stand-in."""
    cfg = config("tiny")
    model = host_cpp.mixed_model(cfg, frozenset())
    rt, a = model.rt, model.acts
    kernel = rt.cpp("gelu_forward_f32")
    with pytest.raises(bridge.ShapeRelationError) as err:
        kernel(a.fch_gelu[0].reshape(-1), a.fch[0].reshape(-1), 7, block=512)
    assert err.value.kernel == "gelu_forward_f32" and "len(out) == N" in str(err.value)
    assert rt.launches == []
