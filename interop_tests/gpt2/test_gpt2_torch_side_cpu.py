"""The torch-backed "cpp" sides of examples/gpt2 (matmul: torch.addmm / mm / addmm_; attention: SDPA's
memory-efficient ops; grad_clip: torch ops) run on CPU tensors too, except the attention ops
themselves (CUDA only), for which a float64 stand-in written from the formulas takes their place
(host_cpp.py).
So a tiny step with these ops on their torch side and every other op on its DSL side (simulator) checks
the torch side's views, copies and argument order, and both attention recompute paths (forward on one
side, backward on the other), against the float64 model without a GPU. Tolerances: as
test_gpt2_simulator.py's."""
from __future__ import annotations

import numpy as np
import pytest

from examples.gpt2 import registry
from examples.gpt2.arrays import array_lib
from examples.gpt2.config import config
from examples.gpt2.model import GPT2, batch, init_params
from examples.gpt2.reference import reference_grads, reference_run
from examples.gpt2.runtime import Runtime
from interop_tests.gpt2 import host_cpp

LOSS_RTOL, NORM_RTOL, GRAD_RTOL = 1e-4, 2e-3, 3e-3
TORCH_OPS = set(host_cpp.TORCH_OPS)


@pytest.fixture
def sdpa_stand_in(monkeypatch):
    host_cpp.sdpa_stand_in(monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("torch_side", [TORCH_OPS, {"attention_forward"}, {"attention_backward", "matmul_backward"}],
                         ids=["all-torch-ops", "attention-fwd-only", "attention-bwd-and-matmul-bwd"])
def test_torch_sides_in_a_mixed_tiny_step_match_the_float64_reference(torch_side, sdpa_stand_in):
    cfg = config("tiny")
    model = GPT2(Runtime(array_lib("torch", "cpu"), cfg, simulate=True), frozenset(registry.NAMES) - torch_side)
    assert {n for n, s in model.sides.items() if s == "cpp"} == torch_side
    ref = reference_run(cfg, init_params(cfg), 2)
    for step, (loss, norm) in enumerate(ref):
        model.set_batch(*batch(cfg, step))
        model.forward()
        model.backward()
        if step == 0:
            _check_gradients(model, cfg)
        model.clip()
        model.update(step + 1)
        assert abs(model.loss() / loss - 1) <= LOSS_RTOL, (step, model.loss(), loss)
        assert abs(model.grad_norm() / norm - 1) <= NORM_RTOL, (step, model.grad_norm(), norm)


def _check_gradients(model, cfg):
    """Every parameter's gradient (unclipped) against the float64 model's, tensor by tensor."""
    _, ref = reference_grads(cfg, init_params(cfg))
    for name, tensors in ref.items():
        views = model.g[name] if isinstance(model.g[name], list) else [model.g[name]]
        for layer, (got, want) in enumerate(zip(views, tensors)):
            err = np.linalg.norm(got.numpy().astype(np.float64) - want) / np.linalg.norm(want)
            assert err <= GRAD_RTOL, f"{name}[{layer}]: relative error {err:.2e}"
