"""Flash attention backward (examples/flash_attention_bwd.py) and the forward's log-sum-exp
(flash_fwd_lse in examples/flash_attention.py): the simulator against float64 NumPy written here from
the softmax Jacobian, the lowered sm_90 kernels (warpgroup MMA) on the CPU simulator, bad inputs refused
before anything runs, PTX that ptxas assembles for sm_90a without register spills, and the GPU
against torch autograd of scaled_dot_product_attention in float64."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import bridge
from dsl import tile
from ptxas_kit import ptxas_verbose, spill_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))      # the example imports its sibling flash_attention.py
_spec = importlib.util.spec_from_file_location("flash_attention_bwd", ROOT / "examples" / "flash_attention_bwd.py")
BWD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BWD)
FA = BWD.fwd


def softmax_rows64(q, k, seq, causal):
    """Float64 P = softmax(q k^T / sqrt(d)) of each sequence, (heads, seq, seq), and its log-sum-exp."""
    d = q.shape[1]
    q3, k3 = (x.astype(np.float64).reshape(-1, seq, d) for x in (q, k))
    s = np.einsum("hid,hjd->hij", q3, k3) / np.sqrt(d)
    if causal:
        s[:, np.triu_indices(seq, 1)[0], np.triu_indices(seq, 1)[1]] = -np.inf
    top = s.max(axis=2, keepdims=True)
    lse = top + np.log(np.exp(s - top).sum(axis=2, keepdims=True))
    return np.exp(s - lse), lse[..., 0].reshape(-1)


def grads64(q, k, v, dout, seq, causal):
    """Float64 (dq, dk, dv) through the softmax Jacobian row by row: dS_i = (diag(p_i) - p_i p_i^T) dP_i."""
    d = q.shape[1]
    p, _ = softmax_rows64(q, k, seq, causal)
    q3, k3, v3, do3 = (x.astype(np.float64).reshape(-1, seq, d) for x in (q, k, v, dout))
    dp = np.einsum("hid,hjd->hij", do3, v3)
    ds = np.empty_like(p)
    for h in range(p.shape[0]):
        for i in range(seq):
            ds[h, i] = (np.diag(p[h, i]) - np.outer(p[h, i], p[h, i])) @ dp[h, i]
    scale = 1 / np.sqrt(d)
    dq = np.einsum("hij,hjd->hid", ds, k3) * scale
    dk = np.einsum("hij,hid->hjd", ds, q3) * scale
    dv = np.einsum("hij,hid->hjd", p, do3)
    return tuple(x.reshape(-1, d) for x in (dq, dk, dv))


def inputs(rng, heads, seq, d, dtype=np.float32):
    return tuple(rng.standard_normal((heads * seq, d)).astype(dtype) for _ in range(4))


def nan(*shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def test_the_example_reference_matches_finite_differences(rng):
    """The example's float64 reference (used by its main()) against central differences of the loss
    sum(O * dO), on one tiny causal head."""
    seq, d = 6, 4
    q, k, v, dout = inputs(rng, 1, seq, d, np.float64)

    def loss(q, k, v):
        return float((FA.reference(q, k, v, seq, True) * dout).sum())
    got = BWD.reference(q, k, v, dout, seq, True)
    for which, x in enumerate((q, k, v)):
        num = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            hi, lo = [a.copy() for a in (q, k, v)], [a.copy() for a in (q, k, v)]
            hi[which][idx] += 1e-6
            lo[which][idx] -= 1e-6
            num[idx] = (loss(*hi) - loss(*lo)) / 2e-6
        np.testing.assert_allclose(got[which], num, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_lse_is_the_log_sum_exp_and_leaves_the_output_as_flash_fwd(rng, d, causal):
    seq, heads = 128, 3
    q, k, v, _ = inputs(rng, heads, seq, d)
    o, lse, plain = nan(heads * seq, d), nan(heads * seq), nan(heads * seq, d)
    FA.flash_fwd_lse.simulate(*FA.launch_args_lse(q, k, v, o, lse, seq, causal))
    FA.flash_fwd.simulate(*FA.launch_args(q, k, v, plain, seq, causal))
    np.testing.assert_allclose(lse, softmax_rows64(q, k, seq, causal)[1], rtol=0, atol=2e-3)
    np.testing.assert_array_equal(o, plain)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("seq", [128, 192])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_simulator_gradients_match_float64_numpy(rng, d, seq, causal):
    q, k, v, dout = inputs(rng, 2, seq, d)
    _, *grads = BWD.forward_and_backward(q, k, v, dout, seq, causal, simulate=True)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        # f32 inputs are products in tf32 (10-bit mantissa) in the simulator, as on the tensor cores
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max(), err_msg=name)


def test_gradients_may_be_stored_in_the_input_dtype(rng):
    seq, d = 64, 64
    q, k, v, dout = inputs(rng, 2, seq, d, np.float16)
    o, lse, delta = nan(2 * seq, d), nan(2 * seq), nan(2 * seq)
    FA.flash_fwd_lse.simulate(*FA.launch_args_lse(q, k, v, o, lse, seq, False))
    dq, dk, dv = (nan(2 * seq, d, dtype=np.float16) for _ in range(3))
    BWD.run(BWD.launch_args(q, k, v, o, dout, lse, delta, dq, dk, dv, seq, False), simulate=True)
    for got, want in zip((dq, dk, dv), grads64(q, k, v, dout, seq, False)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=5e-3 * np.abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_warpgroup_mma_kernels_match_float64_numpy_in_the_lowered_simulator(rng, d, causal):
    """The sm_90 lowering (every product on wgmma, K and V in shared memory at D128) through the CPU
    semantics of its PTX, bf16 inputs: P and dS rounded to bf16 for the products (8-bit mantissa)."""
    _lowered_backward_matches_float64(rng, d, causal, "wgmma.mma_async")


def _lowered_backward_matches_float64(rng, d, causal, in_ptx: str, steps=lambda steps: steps, **options) -> None:
    """The backward's launches (launch_args with `options`, through `steps`) on the lowered sm_90 simulator,
    two bf16 heads of 128, against float64; the dK/dV and dQ kernels' PTX holds `in_ptx`."""
    seq = 128
    q, k, v, dout = inputs(rng, 2, seq, d, ml_dtypes.bfloat16)
    o, lse, delta = nan(2 * seq, d), nan(2 * seq), nan(2 * seq)
    FA.flash_fwd_lse.simulate(*FA.launch_args_lse(q, k, v, o, lse, seq, causal))
    grads = tuple(nan(2 * seq, d) for _ in range(3))
    for kern, args in steps(BWD.launch_args(q, k, v, o, dout, lse, delta, *grads, seq, causal, tensor_cores=True,
                                            wgmma=True, **options)):
        if kern is not BWD.attn_bwd_preprocess:
            assert in_ptx in kern.compile(args, "sm_90").ptx
        kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=name)


# the two-kernel backward with its streamed loads by a TMA ring, issued by a thread of the block (tma) or by a
# producer warpgroup (ws) (benchmarks/_attention_bwd.py BWD_SWEEP's ring rows: ptxas, sm_90a, D128 64x32 causal,
# dK/dV 195 / 188 registers and dQ 122 / 120, no spills; each ring holds Q and dO once, read by two products)
_FAST = {"wgmma_a": "shared", "fp_fusion": True, "ftz": True}
RINGS = {"tma": {"loop_pipeline": "tma", **_FAST}, "ws": {"loop_pipeline": "ws", **_FAST}}
# and FlashAttention-2's backward tile: 128 rows a block owns on 8 warps (two warpgroups), 64 streamed, the tma
# ring (BWD_SWEEP; ptxas, sm_90a, D128 causal: dK/dV 255 registers, dQ 187, no spills, 135 KiB of shared memory)
WIDE = (128, 64, 8)
FORMS = {"tma": {"lowering": RINGS["tma"]}, "ws": {"lowering": RINGS["ws"]},
         "tma 128x64 w8": {"tiles": WIDE, "lowering": RINGS["tma"]}}


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_tma_ring_backward_matches_float64_numpy_in_the_lowered_simulator(rng, causal, d, form):
    _lowered_backward_matches_float64(rng, d, causal, "cp.async.bulk.tensor.2d", **FORMS[form])


def test_tiles_that_do_not_divide_the_sequence_are_refused_and_nothing_is_written():
    rows = 384
    named = dict(q=np.zeros((rows, 64), np.float32), k=np.zeros((rows, 64), np.float32),
                 v=np.zeros((rows, 64), np.float32), o=np.zeros((rows, 64), np.float32),
                 dout=np.zeros((rows, 64), np.float32), lse=np.zeros(rows, np.float32), delta=nan(rows),
                 dq=nan(rows, 64), dk=nan(rows, 64), dv=nan(rows, 64))
    with pytest.raises(bridge.ShapeRelationError, match=r"seq: 192 is not a multiple of the tiles' 128 and 64 rows"):
        BWD.run(BWD.launch_args(**named, seq=192, causal=True, tiles=WIDE), simulate=True)
    assert all(np.isnan(named[n]).all() for n in ("dq", "dk", "dv", "delta"))


@pytest.mark.gpu
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_tma_ring_backward_matches_torch_autograd_in_float64(causal, form):
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    import torch.nn.functional as F
    batch, heads, seq, d = 2, 4, 256, 128
    g = torch.Generator(device="cuda").manual_seed(7 + causal)
    q, k, v, dout = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for _ in range(4))
    _, *grads = BWD.forward_and_backward(*(t.reshape(-1, d) for t in (q, k, v, dout)), seq, causal,
                                         steps=lambda *a, **kw: BWD.launch_args(*a, **kw, **FORMS[form]))
    x64 = [t.double().requires_grad_() for t in (q, k, v)]
    F.scaled_dot_product_attention(*x64, is_causal=causal).backward(dout.double())
    for name, got, t in zip(("dq", "dk", "dv"), grads, x64):
        err = ((got.reshape(t.shape).double() - t.grad).abs().max() / t.grad.abs().max()).item()
        assert err < 1e-2, (name, err)


def _args(d=64, seq=128, rows=256, **over):
    named = dict(q=np.zeros((rows, d), np.float32), k=np.zeros((rows, d), np.float32),
                 v=np.zeros((rows, d), np.float32), o=np.zeros((rows, d), np.float32),
                 dout=np.zeros((rows, d), np.float32), lse=np.zeros(rows, np.float32), delta=nan(rows),
                 dq=nan(rows, d), dk=nan(rows, d), dv=nan(rows, d))
    named.update(over)
    return named, seq


@pytest.mark.parametrize("over,err,text", [
    (dict(k=np.zeros((256, 48), np.float32)), bridge.ShapeRelationError, r"k: expected shape \(256, 64\)"),
    (dict(dv=nan(128, 64)), bridge.ShapeRelationError, r"dv: expected shape \(256, 64\)"),
    (dict(lse=np.zeros(255, np.float32)), bridge.ShapeRelationError, r"lse: expected shape \(256,\)"),
    (dict(seq=96), bridge.ShapeRelationError, "256 rows are not whole sequences of 96"),
    (dict(seq=32, rows=256), ValueError, "seq: 32 is not a positive multiple of 64"),
    (dict(d=32), ValueError, "head dim 32 not supported"),
    (dict(dout=np.zeros((256, 64), np.float16)), bridge.DTypeError, "dout: expected q's dtype float32"),
    (dict(delta=np.zeros(256, np.float64)), bridge.DTypeError, "delta: expected float32"),
])
def test_bad_inputs_are_refused_naming_the_argument_and_nothing_is_written(over, err, text):
    shape = {key: over.pop(key) for key in ("d", "seq", "rows") if key in over}
    named, seq = _args(**{key: shape[key] for key in ("d", "rows") if key in shape}, **over)
    seq = shape.get("seq", seq)
    with pytest.raises(err, match=text):
        BWD.run(BWD.launch_args(**named, seq=seq, causal=True), simulate=True)
    for name in ("dq", "dk", "dv", "delta"):
        if named[name].dtype == np.float32:
            assert np.isnan(named[name]).all(), name


def test_the_validator_refuses_partitions_whose_tiles_disagree_before_anything_runs():
    """Called directly, flash_bwd_dkdv's dk and dv must cut into the same tiles (the tile model's
    relation): the launch is refused and neither output is touched."""
    (named, seq), d = _args(), 64
    dk, dv = named["dk"], nan(512, d)
    with pytest.raises(bridge.ShapeRelationError):
        BWD.flash_bwd_dkdv.simulate(named["q"], named["k"], named["v"], named["dout"], named["lse"], named["lse"],
                                    tile.partition(dk, (64, d)), tile.partition(dv, (64, d)), seq, 0.125, 64, False, 1)
    assert np.isnan(dk).all() and np.isnan(dv).all()


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_ptx_assembles_without_register_spills(d, arch, tmp_path):
    """Every kernel at the example's tiles, bf16, causal: on sm_90 (sm_90a) every product is a wgmma,
    on sm_80 an mma.sync; ptxas spills nothing (at D128 only because K and V wait in shared memory)."""
    seq, rows = 256, 512
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = BWD.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                            nan(rows, d), seq, True, tensor_cores=True, wgmma=arch == "sm_90")
    for kern, args in steps:
        ptx = kern.compile(args, arch).ptx
        if kern is not BWD.attn_bwd_preprocess:
            assert ("wgmma.mma_async" in ptx and "mma.sync" not in ptx) if arch == "sm_90" else "mma.sync" in ptx
        log = ptxas_verbose(ptx, arch, tmp_path)
        assert spill_bytes(log) == 0, (kern.name, log[-1500:])


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_gradients_match_torch_autograd_in_float64(d, causal, dtype):
    """B2 H4 S256 against torch autograd of SDPA in float64 on the same rounded inputs, the error
    relative to the largest gradient: the lowered sm_90 simulator measures up to 3.3e-3 for bf16 and
    3.0e-4 for f16 (P and dS rounded to the input dtype for the products); bounds 1e-2 and 2e-3."""
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    import torch.nn.functional as F
    batch, heads, seq = 2, 4, 256
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, dout = (torch.randn(batch, heads, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
                     for _ in range(4))
    _, *grads = BWD.forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), seq, causal)
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*x64, is_causal=causal).backward(dout.double())
    for name, got, x in zip(("dq", "dk", "dv"), grads, x64):
        err = ((got.reshape(x.shape).double() - x.grad).abs().max() / x.grad.abs().max()).item()
        assert err < (1e-2 if dtype == "bfloat16" else 2e-3), (name, err)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_row_statistics_reach_the_accumulators_without_shared_memory(causal):
    """`tile.load(lse, ...) * LOG2E` broadcast over the S^T accumulators (and Delta over dP^T): each thread
    loads the values of its own columns, once each (8 at D128 64 x 32), so the sm_90 dK/dV kernel writes no
    shared memory at all (before 2026-12-05 the product went through it, with four block barriers a step)."""
    rows, d, seq = 512, 128, 256
    z = np.zeros((rows, d), ml_dtypes.bfloat16)
    steps = BWD.launch_args(z, z, z, nan(rows, d), z, nan(rows), nan(rows), nan(rows, d), nan(rows, d), nan(rows, d),
                            seq, causal, tensor_cores=True, wgmma=True)
    kern, args = steps[1]
    ptx = kern.compile(args, "sm_90").ptx
    assert "st.shared" not in ptx and ptx.count("bar.sync") <= 12
    assert len(re.findall(r"ld\.global", ptx)) == 16      # lse and Delta, 8 columns each (32 with every row's own)
