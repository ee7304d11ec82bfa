"""The GPT-2 training step of examples/gpt2 on the GPU: five steps of the tiny and the mini model with
every op on its C++ side (--dsl none), every op on its DSL side (--dsl all) and three seeded random
mixes, each step's loss and gradient norm against the torch.nn reference in float64 on the same GPU;
the CUDA-graph run (--graph) against the eager one; CuPy buffers against torch ones; and the C++
side's validator refusing a mismatched buffer before the launch.

Tolerances (relative, against float64): both sides keep f32 activations and run their GEMMs in tf32
(cuBLAS with allow_tf32, the tile GEMMs on the tensor cores), the DSL attention takes f16 operands,
and atomics make the device's sums order-dependent: loss within 2e-3, gradient norm within 5e-2
(examples/gpt2/__main__.py's LOSS_RTOL / NORM_RTOL; the simulator's tiny run is within 1e-5 / 3e-4).
Graph replays repeat the eager launches, so they agree to the atomics' reordering (1e-4)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from examples.gpt2 import registry
from examples.gpt2.config import config
from examples.gpt2.model import init_params
from examples.gpt2.reference import reference_run
from examples.gpt2.train import build, train

pytestmark = pytest.mark.gpu

STEPS = 5
LOSS_RTOL, NORM_RTOL = 2e-3, 5e-2
GRAPH_RTOL = 1e-4
MIX_SEEDS = (0, 1, 2)
SIDES = ["none", "all"] + [f"mix{s}" for s in MIX_SEEDS]


def _dsl(spec: str) -> frozenset[str]:
    if spec.startswith("mix"):
        return registry.random_mix(np.random.default_rng(int(spec[3:])))
    return registry.parse_dsl(spec)


@pytest.fixture(scope="module")
def references():
    cache: dict[str, list[tuple[float, float]]] = {}

    def get(name: str) -> list[tuple[float, float]]:
        if name not in cache:
            cfg = config(name)
            cache[name] = reference_run(cfg, init_params(cfg), STEPS, device="cuda")
        return cache[name]
    return get


@pytest.mark.parametrize("spec", SIDES)
@pytest.mark.parametrize("name", ["tiny", "mini"])
def test_five_steps_match_the_float64_reference(name, spec, references):
    dsl = _dsl(spec)
    ours = train(config(name), dsl, STEPS)
    for rec, (loss, norm) in zip(ours, references(name)):
        where = f"{name} --dsl {registry.describe(dsl)} step {rec.step}"
        assert abs(rec.loss / loss - 1) <= LOSS_RTOL, (where, rec.loss, loss)
        assert abs(rec.grad_norm / norm - 1) <= NORM_RTOL, (where, rec.grad_norm, norm)


@pytest.mark.parametrize("spec", ["all", "none", "mix0"])
def test_graph_replays_give_the_eager_losses(spec):
    cfg, dsl = config("mini"), _dsl(spec)
    eager, graph = train(cfg, dsl, 4), train(cfg, dsl, 4, graph=True)
    for e, g in zip(eager, graph):
        assert abs(g.loss / e.loss - 1) <= GRAPH_RTOL, (spec, e.step, e.loss, g.loss)
        assert abs(g.grad_norm / e.grad_norm - 1) <= GRAPH_RTOL, (spec, e.step, e.grad_norm, g.grad_norm)


def test_cupy_buffers_give_the_torch_losses():
    pytest.importorskip("cupy")
    cfg, dsl = config("tiny"), _dsl("mix1")
    torch_run, cupy_run = train(cfg, dsl, 2), train(cfg, dsl, 2, arrays="cupy")
    for t, c in zip(torch_run, cupy_run):
        assert abs(c.loss / t.loss - 1) <= GRAPH_RTOL and abs(c.grad_norm / t.grad_norm - 1) <= GRAPH_RTOL


def test_the_cpp_side_refuses_mismatched_buffers_before_the_launch():
    import torch
    cfg = config("tiny")
    model = build(cfg, frozenset(), simulate=False)
    rt, a = model.rt, model.acts
    out = torch.full((cfg.tokens * 4 * cfg.n_embd,), float("nan"), device="cuda")
    with pytest.raises(bridge.DTypeError) as err:       # a bf16 activation where the f32 kernel reads
        registry.REGISTRY["gelu_forward"]["cpp"](rt, out, a.fch[0].reshape(-1).to(torch.bfloat16))
    assert (err.value.kernel, err.value.arg_name) == ("gelu_forward_f32", "inp")
    assert torch.isnan(out).all()
    with pytest.raises(bridge.ShapeRelationError) as err:
        registry.REGISTRY["layernorm_forward"]["cpp"](rt, a.ln1[0], a.ln1_mean[0][:-1], a.ln1_rstd[0],
                                                     a.residual2[0], model.p["ln1w"][0], model.p["ln1b"][0])
    assert err.value.kernel == "layernorm_forward" and "len(mean) == N" in str(err.value)
