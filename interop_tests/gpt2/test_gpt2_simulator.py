"""The GPT-2 training step of examples/gpt2 on the CPU simulator (every op on its DSL side; the
2-layer, 64-channel `tiny` model): its loss and gradient norm over four steps, and every parameter's
gradient, against the plain torch.nn model in float64; the per-kernel switch (both sides registered
for every op, with the same arguments; `--dsl` parsing); and what is refused before anything runs.
Mixed C++ / DSL steps on the simulator: test_gpt2_mixed_cpu.py.

Tolerances (relative, against float64): the step keeps f32 activations and its GEMM inputs are
rounded to tf32 on the simulator as on the tensor cores, so the tiny model's loss is within 2e-5
and its gradient norm within 1.3e-3 over 20 steps (measured, 2026-12-04); the bounds below are
loss 1e-4 and norm 2e-3 a step, each gradient tensor 3e-3 (measured <= 8e-4)."""
from __future__ import annotations

import inspect
import math
import re

import numpy as np
import pytest

import bridge
from examples.gpt2 import registry
from examples.gpt2.__main__ import main
from examples.gpt2.config import ConfigError, config
from examples.gpt2.model import init_params
from examples.gpt2.reference import reference_grads, reference_run
from examples.gpt2.train import NeedsGpuError, build, check_runnable, train

LOSS_RTOL = 1e-4
NORM_RTOL = 2e-3
GRAD_RTOL = 3e-3            # |ours - ref| / |ref| per gradient tensor (measured <= 8e-4)
ALL = frozenset(registry.NAMES)
STEPS = 4


@pytest.fixture(scope="module")
def tiny():
    return config("tiny")


@pytest.mark.slow
def test_tiny_steps_match_the_float64_reference_on_the_simulator(tiny):
    ours = train(tiny, ALL, STEPS, simulate=True)
    ref = reference_run(tiny, init_params(tiny), STEPS)
    assert len(ours) == len(ref) == STEPS
    for rec, (loss, norm) in zip(ours, ref):
        assert abs(rec.loss / loss - 1) <= LOSS_RTOL, (rec.step, rec.loss, loss)
        assert abs(rec.grad_norm / norm - 1) <= NORM_RTOL, (rec.step, rec.grad_norm, norm)
    assert ours[-1].loss < ours[0].loss             # the updates moved the weights the right way


@pytest.mark.slow
def test_numpy_buffers_train_exactly_as_torch_cpu_tensors_on_the_simulator(tiny):
    """The array library only holds the buffers: the simulator gets NumPy views of either, so the
    losses and norms are bitwise the same."""
    a, b = train(tiny, ALL, 2, simulate=True, arrays="numpy"), train(tiny, ALL, 2, simulate=True)
    assert [(r.loss, r.grad_norm) for r in a] == [(r.loss, r.grad_norm) for r in b]


@pytest.mark.slow
def test_tiny_every_gradient_tensor_matches_the_reference(tiny):
    model = build(tiny, ALL, simulate=True)
    model.set_batch(*_batch(tiny))
    model.forward()
    model.backward()
    ref_loss, ref = reference_grads(tiny, init_params(tiny))
    assert abs(model.loss() / ref_loss - 1) <= LOSS_RTOL
    for name, tensors in ref.items():
        views = model.g[name] if isinstance(model.g[name], list) else [model.g[name]]
        for layer, (got, want) in enumerate(zip(views, tensors)):
            err = np.linalg.norm(model.rt.lib.to_numpy(got).astype(np.float64) - want) / np.linalg.norm(want)
            assert err <= GRAD_RTOL, f"{name}[{layer}]: relative error {err:.2e}"


def _batch(cfg):
    from examples.gpt2.model import batch
    return batch(cfg, 0)


def test_every_op_has_a_cpp_and_a_dsl_side_taking_the_same_arguments():
    assert set(registry.REGISTRY) == set(registry.NAMES)
    for name, sides in registry.REGISTRY.items():
        assert set(sides) == {"cpp", "dsl"}, name
        cpp, dsl = (list(inspect.signature(sides[s]).parameters) for s in ("cpp", "dsl"))
        assert cpp == dsl and cpp[0] == "rt", (name, cpp, dsl)


def test_dsl_parsing_takes_all_none_names_and_families():
    assert registry.parse_dsl("all") == ALL
    assert registry.parse_dsl("none") == frozenset()
    assert registry.parse_dsl("layernorm, gelu_forward") == {"layernorm_forward", "layernorm_backward",
                                                             "gelu_forward"}
    assert registry.parse_dsl("matmul") == {"matmul_forward", "matmul_backward"}
    assert registry.sides(frozenset({"grad_clip"}))["grad_clip"] == "dsl"
    assert registry.sides(frozenset({"grad_clip"}))["adamw_update"] == "cpp"


def test_an_unknown_dsl_name_is_a_typed_error_listing_the_names():
    with pytest.raises(registry.UnknownKernelError) as err:
        registry.parse_dsl("layernorm,softmax_forward")
    msg = str(err.value)
    assert "unknown kernel 'softmax_forward'" in msg
    assert all(n in msg for n in registry.NAMES)
    assert isinstance(err.value, ValueError)


def test_random_mixes_are_neither_all_nor_none_and_repeat_from_a_seed():
    mixes = [registry.random_mix(np.random.default_rng(s)) for s in range(20)]
    assert all(0 < len(m) < len(registry.NAMES) for m in mixes)
    assert mixes[3] == registry.random_mix(np.random.default_rng(3))
    assert registry.parse_dsl(registry.describe(mixes[0])) == mixes[0]


@pytest.mark.parametrize("spec", ["none", "layernorm", "all,"])
def test_the_simulator_refuses_cpp_sides_before_building_anything(spec):
    dsl = registry.parse_dsl(spec) if spec != "all," else ALL - {"adamw_update"}
    with pytest.raises(NeedsGpuError, match="needs a GPU; the CPU simulator runs DSL kernels only"):
        check_runnable(dsl, simulate=True, graph=False)
    with pytest.raises(NeedsGpuError, match="--graph: CUDA graphs need a GPU"):
        check_runnable(ALL, simulate=True, graph=True)


def test_command_line_refusals_exit_2_with_the_reason(capsys):
    assert main(["--simulate", "--dsl", "none"]) == 2
    assert "the C++ side (16 ops) needs a GPU" in capsys.readouterr().err
    assert main(["--simulate", "--dsl", "gelu,bogus"]) == 2
    assert "unknown kernel 'bogus'" in capsys.readouterr().err
    assert main(["--simulate", "--arrays", "cupy"]) == 2
    assert "--arrays: expected 'torch' (GPU or simulator), 'cupy' (GPU)" in capsys.readouterr().err
    assert main(["--list"]) == 0
    assert "matmul_forward         cpp: torch.addmm (cuBLAS)" in capsys.readouterr().out


def test_a_head_dim_flash_attention_lacks_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"n_embd: expected n_head \* a head dim of \(64, 128\)"):
        config("tiny", n_head=2)
    with pytest.raises(ConfigError, match="seq_len: expected a multiple of 64"):
        config("tiny", seq_len=48)


def test_a_float64_dlosses_is_refused_by_the_dsl_cross_entropy_backward_before_the_launch(tiny):
    """A buffer in another dtype (a float64 dlosses, as a float64 loss scale would give): the DSL
    cross-entropy backward's validator refuses it before launching, and its output stays as it was
    (poisoned with NaN). Mixed steps' refusals, by C++ and DSL kernels: test_gpt2_mixed_cpu.py."""
    model = build(tiny, ALL, simulate=True)
    model.dlosses = model.rt.lib.from_numpy(np.full(tiny.tokens, 1.0 / tiny.tokens, np.float64))
    model.set_batch(*_batch(tiny))
    model.acts.dlogits.fill_(float("nan"))
    model.forward()
    with pytest.raises(bridge.DTypeError) as err:
        model.backward()
    assert (err.value.kernel, err.value.arg_name) == ("crossentropy_backward", "dlosses")
    assert "expected float32 array, got float64" in str(err.value)
    assert np.isnan(model.rt.lib.to_numpy(model.acts.dlogits)).all()


def test_a_shape_mismatch_is_refused_naming_the_kernel_and_the_relation(tiny):
    model = build(tiny, ALL, simulate=True)
    rt, a = model.rt, model.acts
    short = rt.lib.zeros((tiny.tokens - 1,))
    with pytest.raises(bridge.ShapeRelationError) as err:
        registry.REGISTRY["layernorm_forward"]["dsl"](rt, a.ln1[0], short, a.ln1_rstd[0], a.residual2[0],
                                                     model.p["ln1w"][0], model.p["ln1b"][0])
    assert err.value.kernel == "layernorm_forward"
    assert "len(mean) == inp.shape[0]" in str(err.value)
    wrong_bias = rt.lib.zeros((3 * tiny.n_embd + 1,))
    with pytest.raises(bridge.ShapeRelationError) as err:
        registry.REGISTRY["matmul_forward"]["dsl"](rt, a.qkv[0], a.ln1[0], model.p["qkvw"][0], wrong_bias)
    assert err.value.kernel == "linear_bias" and "len(bias) == w.shape[0]" in str(err.value)
    narrow = rt.lib.zeros((tiny.tokens, tiny.n_embd - 4))           # dX four columns short
    dw = model.g["qkvw"][0].clone()
    with pytest.raises(bridge.ShapeRelationError) as err:
        registry.REGISTRY["matmul_backward"]["dsl"](rt, narrow, model.g["qkvw"][0], model.g["qkvb"][0], a.dqkv,
                                                    a.ln1[0], model.p["qkvw"][0])
    assert err.value.kernel == "linear_nobias" and "out.shape[1] == w.shape[0]" in str(err.value)
    assert (model.g["qkvw"][0] == dw).all()                          # dW not touched: dX goes first


@pytest.mark.slow
def test_the_command_line_runs_a_simulated_step_beside_the_reference(capsys):
    assert main(["--config", "tiny", "--steps", "1", "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "--dsl all; torch arrays on the CPU simulator" in out
    loss = float(re.search(r"step   1  loss (\S+)", out).group(1))
    assert abs(loss - math.log(97)) < 0.1                # near-uniform predictions at init: ~ln V
    assert "reference loss" in out and out.rstrip().endswith("PASS")
