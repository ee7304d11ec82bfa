"""The GPT-2 training step of examples/gpt2 on the GPU (the `mini` model: 2 layers, 2 heads, 128
channels, B4 x T256, vocabulary 1000): twenty steps with every op on its C++ side (--dsl none), every
op on its DSL side (--dsl all) and eight seeded random mixes (each mix's DSL ops in its test id),
each step's loss and gradient norm against the torch.nn reference in float64 on the same GPU; the
CUDA-graph run (--graph) against the eager one; CuPy buffers against torch ones (in process and
through the command line); and a mixed step refused before the launch, by a C++ or a DSL kernel,
with nothing it owns changed.

Tolerances (relative, against float64, every one of the 20 steps): loss 2e-3, gradient norm 5e-2
(examples/gpt2/__main__.py's LOSS_RTOL / NORM_RTOL). Why that much: both sides keep f32 activations
and run their GEMMs in tf32 (cuBLAS with allow_tf32, the tile GEMMs on tensor cores, whose tf32
wgmma truncates the low mantissa bits), the DSL attention takes f16 operands, atomics make the
device's sums order-dependent, and 20 AdamW steps carry each step's differences into the next
weights. The same step on the simulator, 20 `mini` steps all-DSL, stays within 1.2e-5 (loss) and
7e-4 (norm) of float64 (measured 2026-12-04); each test prints the largest deviation it saw.
Graph replays and CuPy buffers repeat the same launches, so they agree to the atomics' reordering
(1e-4). No timing here: benchmarks/gpt2_step.py measures.

    python -m pytest -q -p no:cacheprovider -n 0 -m gpu interop_tests/gpt2/test_gpt2_gpu.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bridge
from examples.gpt2 import registry
from examples.gpt2.config import config
from examples.gpt2.model import batch, init_params
from examples.gpt2.reference import reference_run
from examples.gpt2.train import StepRecord, build, train
from interop_tests.gpt2.mixes import dsl_of, mix, spec_id

pytestmark = pytest.mark.gpu

STEPS = 20
LOSS_RTOL, NORM_RTOL = 2e-3, 5e-2
SAME_LAUNCHES_RTOL = 1e-4
SPECS = ["none", "all"] + [f"mix{s}" for s in range(8)]


@pytest.fixture(scope="module")
def mini():
    return config("mini")


@pytest.fixture(scope="module")
def reference(mini):
    return reference_run(mini, init_params(mini), STEPS, device="cuda")


@pytest.mark.parametrize("spec", SPECS, ids=[spec_id(s) for s in SPECS])
def test_twenty_steps_match_the_float64_reference(spec, mini, reference):
    dsl = dsl_of(spec)
    ours = train(mini, dsl, STEPS)
    assert len(ours) == STEPS
    worst_loss = worst_norm = 0.0
    for rec, (loss, norm) in zip(ours, reference):
        where = f"--dsl {registry.describe(dsl)} step {rec.step}"
        dl, dn = abs(rec.loss / loss - 1), abs(rec.grad_norm / norm - 1)
        worst_loss, worst_norm = max(worst_loss, dl), max(worst_norm, dn)
        assert dl <= LOSS_RTOL, (where, rec.loss, loss)
        assert dn <= NORM_RTOL, (where, rec.grad_norm, norm)
    assert ours[-1].loss < ours[0].loss
    print(f"\n{spec_id(spec)}: worst of {STEPS} steps: loss {worst_loss:.1e}, norm {worst_norm:.1e}")


def _close(a, b, rtol: float = SAME_LAUNCHES_RTOL) -> None:
    for x, y in zip(a, b, strict=True):
        assert abs(x.loss / y.loss - 1) <= rtol, (x.step, x.loss, y.loss)
        assert abs(x.grad_norm / y.grad_norm - 1) <= rtol, (x.step, x.grad_norm, y.grad_norm)


@pytest.mark.parametrize("spec", ["all", "none", "mix0"], ids=spec_id)
def test_graph_replays_give_the_eager_losses(spec, mini):
    dsl = dsl_of(spec)
    _close(train(mini, dsl, 4, graph=True), train(mini, dsl, 4))


@pytest.mark.parametrize("spec", ["all", "none", "mix1"], ids=spec_id)
def test_cupy_buffers_give_the_torch_losses_eager_and_as_a_graph(spec, mini):
    pytest.importorskip("cupy")
    dsl = dsl_of(spec)
    torch_run = train(mini, dsl, 3)
    _close(train(mini, dsl, 3, arrays="cupy"), torch_run)
    _close(train(mini, dsl, 3, arrays="cupy", graph=True), torch_run)


FRESH = """
import json, sys
from examples.gpt2.config import config
from examples.gpt2.train import train
assert "cupy" not in sys.modules, "CuPy imported before train()"
recs = train(config("mini"), frozenset(sys.argv[1].split(",")), 3, arrays="cupy", graph=True)
print(json.dumps([[r.loss, r.grad_norm] for r in recs]))
"""


def test_cupy_buffers_work_in_a_process_that_imports_cupy_only_inside_train(mini):
    """train() imports CuPy and torch before entering the step's stream (train.import_libraries):
    `bridge.use_stream` sets the current stream of the libraries already imported, so otherwise
    CuPy's fills and copies would run on its own stream, unordered with the kernels and outside the
    graph's capture."""
    pytest.importorskip("cupy")
    dsl = mix(2)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", FRESH, ",".join(sorted(dsl))], capture_output=True, text=True,
                          timeout=300, cwd=root, env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    fresh = [StepRecord(i + 1, loss, norm, 0.0) for i, (loss, norm) in
             enumerate(json.loads(done.stdout.strip().splitlines()[-1]))]
    _close(fresh, train(mini, dsl, 3))


POOL_DROPPED = """
import gc, json, sys
import torch
import bridge
from examples.gpt2.config import config
from examples.gpt2.model import batch
from examples.gpt2.train import build, capture, torch_pool
cfg, dsl = config("mini"), frozenset(sys.argv[1].split(",")) - {""}
stream = bridge.Stream()

def captured():
    # the pool is this frame's only reference to it, as in a benchmark that builds its variants
    # in a helper: the graph must hold it, or its temporaries' memory goes back to the device
    with bridge.use_stream(stream):
        model = build(cfg, dsl, False)
        model.set_batch(*batch(cfg, 0))
        pool = torch.cuda.MemPool()
        with torch_pool(pool):
            model.step(1)
        first = model.loss(), model.grad_norm()
        return model, capture(model, stream, pool), first

model, g, first = captured()
gc.collect()
torch.cuda.empty_cache()
junk = [torch.full((1 << 18,), float("nan"), device="cuda") for _ in range(256)]   # takes freed memory
recs = [first]
with bridge.use_stream(stream):
    for step in range(1, 4):
        model.set_batch(*batch(cfg, step))
        g.replay()
        model.update(step + 1)
        recs.append((model.loss(), model.grad_norm()))
torch.cuda.synchronize()
written = sum(int((~torch.isnan(j)).sum()) for j in junk)
print(json.dumps({"recs": recs, "junk_written": written}))
"""


@pytest.mark.parametrize("spec", ["none", "all"], ids=spec_id)
def test_a_captured_step_keeps_its_torch_pool_alive_after_the_caller_drops_it(spec, mini):
    """capture() hands the torch pool its temporaries came from to the graph (Graph.keep_alive): a
    caller that drops its own reference (benchmarks/gpt2_step.py built its variants in a helper) used to
    free the pool, so replays wrote memory that was unmapped (an illegal address) or handed to others.
    In a child process: an illegal address would poison every later test's context."""
    pytest.importorskip("torch")
    dsl = dsl_of(spec)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", POOL_DROPPED, ",".join(sorted(dsl))], capture_output=True,
                          text=True, timeout=300, cwd=root, env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["junk_written"] == 0, f"replays wrote {got['junk_written']} floats into memory handed to others"
    replayed = [StepRecord(i + 1, loss, norm, 0.0) for i, (loss, norm) in enumerate(got["recs"])]
    _close(replayed, train(mini, dsl, 4))


# ---- misuse: a mixed step refused before the launch --------------------------------------------------
def _owned(model) -> dict[str, np.ndarray]:
    return {n: model.rt.lib.to_numpy(getattr(model, n)).copy() for n in ("params", "grads", "m", "v")}


@pytest.mark.parametrize("side", ["cpp", "dsl"])
def test_int64_targets_stop_a_mixed_step_at_the_cross_entropy_with_nothing_changed(side, mini):
    """torch's default int64 tokens where both cross-entropy kernels read int32: the mixed forward
    runs, then the cross-entropy launch is refused (C++ contract or DSL port), naming itself and
    `targets`; its output keeps its NaN poison, parameters, gradients and moments are as before."""
    import torch
    dsl = mix(5) - {"crossentropy_forward"} if side == "cpp" else mix(5) | {"crossentropy_forward"}
    stream = bridge.Stream()
    with bridge.use_stream(stream):
        model = build(mini, dsl, simulate=False)
        model.targets = torch.zeros(mini.tokens, dtype=torch.int64, device="cuda")
        model.set_batch(*batch(mini, 0))
        model.acts.losses.fill_(float("nan"))
        before = _owned(model)
        with pytest.raises(bridge.DTypeError) as err:
            model.step(1)
        stream.synchronize()
        assert (err.value.kernel, err.value.arg_name) == ("crossentropy_forward", "targets")
        assert "int32" in str(err.value) and "got int64" in str(err.value)
        assert torch.isnan(model.acts.losses).all()
        assert torch.isfinite(model.acts.lnf).all()                  # the mixed forward before it ran
        for name, was in before.items():
            assert np.array_equal(model.rt.lib.to_numpy(getattr(model, name)), was), name


@pytest.mark.parametrize("side,relation", [("cpp", "len(mean) == N"), ("dsl", "len(mean) == inp.shape[0]")])
def test_a_statistics_buffer_one_row_short_is_refused_by_either_sides_layernorm(side, relation, mini):
    import torch
    dsl = mix(5) - {"layernorm_forward"} if side == "cpp" else mix(5) | {"layernorm_forward"}
    stream = bridge.Stream()
    with bridge.use_stream(stream):
        model = build(mini, dsl, simulate=False)
        model.acts.ln1_mean = torch.zeros((mini.n_layer, mini.tokens - 1), device="cuda")
        model.set_batch(*batch(mini, 0))
        model.acts.ln1.fill_(float("nan"))
        before = _owned(model)
        with pytest.raises(bridge.ShapeRelationError) as err:
            model.step(1)
        stream.synchronize()
        assert err.value.kernel == "layernorm_forward" and relation in str(err.value)
        assert torch.isnan(model.acts.ln1).all()
        for name, was in before.items():
            assert np.array_equal(model.rt.lib.to_numpy(getattr(model, name)), was), name


# ---- the linear layer's GEMMs in every operand layout the per-op table times ---------------------------
@pytest.mark.parametrize("dx_layout,dw_layout", [("wt", "stored"), ("nn", "stored"), ("wt", "xt"), ("wt", "tt")])
def test_the_linear_backward_matches_float64_on_the_gpu_in_every_layout(dx_layout, dw_layout, mini):
    """kernels_dsl.linear_backward on the H200 at a ragged shape (600 tokens: 19 k tiles, dW's K split
    in 2), each layout against float64: dX (W^T written / W as stored), dW (TN as stored, X^T written,
    dY^T and X^T written: the NT loop), db. tf32 bound as the simulator tests' (3 * 2^-10 sum |a||b|)."""
    import torch
    from examples.gpt2 import kernels_dsl
    from examples.gpt2.arrays import array_lib
    from examples.gpt2.runtime import Runtime
    g = torch.Generator(device="cuda").manual_seed(31)
    n, oc, c = 600, 264, 136
    dy, x, w = (torch.randn(s, device="cuda", generator=g) for s in ((n, oc), (n, c), (oc, c)))
    dw0, db0 = torch.randn((oc, c), device="cuda", generator=g), torch.randn(oc, device="cuda", generator=g)
    dx, dw, db = torch.full((n, c), float("nan"), device="cuda"), dw0.clone(), db0.clone()
    rt = Runtime(array_lib("torch", "cuda"), mini, simulate=False)
    rt.state["sm_count"] = 12                                        # dW's 6 tiles split in two (dw_splits)
    assert kernels_dsl.dw_splits(6, 19, 12) == 2
    kernels_dsl.linear_backward(rt, dx, dw, db, dy, x, w, dx_layout, dw_layout)
    torch.cuda.synchronize()
    d = lambda t: t.double()                                         # noqa: E731
    bound = lambda a, b: 3 * 2.0 ** -10 * (d(a).abs() @ d(b).abs())  # noqa: E731
    assert ((d(dx) - d(dy) @ d(w)).abs() <= bound(dy, w)).all()
    assert ((d(dw) - d(dw0) - d(dy).T @ d(x)).abs() <= bound(dy.T, x) + 1e-5 * d(dw0).abs()).all()
    assert torch.allclose(d(db), d(db0) + d(dy).sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("out_tile", [(128, 128), (128, 256)], ids=["128x128", "wide"])
def test_the_linear_forward_matches_float64_on_the_gpu_with_either_tile(out_tile, mini):
    import torch
    from examples.gpt2 import kernels_dsl
    from examples.gpt2.arrays import array_lib
    from examples.gpt2.runtime import Runtime
    g = torch.Generator(device="cuda").manual_seed(32)
    n, c, oc = 600, 136, 520
    x, w, b = (torch.randn(s, device="cuda", generator=g) for s in ((n, c), (oc, c), (oc,)))
    out = torch.full((n, oc), float("nan"), device="cuda")
    rt = Runtime(array_lib("torch", "cuda"), mini, simulate=False)
    kernels_dsl.linear_forward(rt, out, x, w, b, out_tile)
    torch.cuda.synchronize()
    want = x.double() @ w.double().T + b.double()
    assert ((out.double() - want).abs() <= 3 * 2.0 ** -10 * (x.double().abs() @ w.double().abs().T)).all()
