"""Grouped-query attention (GQA/MQA: `group` query heads share one key/value head) in the flash-attention
examples: the forward and the backward on the CPU simulator and the lowered sm_90 simulator against
float64 NumPy written here (the key/value gradients summed over each group), PTX that ptxas assembles
for sm_90a and sm_80 without spills, bad groups and shapes refused before anything is written, and the
GPU against torch autograd of scaled_dot_product_attention(enable_gqa=True) in float64."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import bridge

from attention_refs import assert_matches_sdpa_autograd, gqa64
from ptxas_kit import ptxas_verbose, spill_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))      # the backward example imports its sibling flash_attention.py
_spec = importlib.util.spec_from_file_location("flash_attention_bwd_gqa", ROOT / "examples" / "flash_attention_bwd.py")
BWD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BWD)
FA = BWD.fwd


def inputs(rng, heads, kv_heads, seq, d, dtype=np.float32):
    q, dout = (rng.standard_normal((heads * seq, d)).astype(dtype) for _ in range(2))
    k, v = (rng.standard_normal((kv_heads * seq, d)).astype(dtype) for _ in range(2))
    return q, k, v, dout


def nan(*shape, dtype=np.float32):
    return np.full(shape, np.nan, dtype)


def close(got, want, rel, name):
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 1), (6, 2)], ids=["gqa2", "mqa", "gqa3"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_simulator_forward_and_gradients_match_float64_numpy(rng, heads, kv_heads, causal):
    seq, d = 64, 64
    q, k, v, dout = inputs(rng, heads, kv_heads, seq, d)
    o, *grads = BWD.forward_and_backward(q, k, v, dout, seq, causal, simulate=True, group=heads // kv_heads)
    want_o, want = gqa64(q, k, v, dout, seq, causal, heads // kv_heads)
    close(o, want_o, 5e-3, "o")                  # f32 inputs: tf32 products in the simulator, as on the GPU
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        assert got.shape == ref.shape, name
        close(got, ref, 5e-3, name)


def test_two_batches_keep_their_own_key_value_heads(rng):
    """B2 H4 H_kv2 as (B*H*S, D) row stacks: batch 1's query heads read batch 1's key/value heads."""
    seq, d, group = 64, 64, 2
    q, k, v, dout = inputs(rng, 8, 4, seq, d)
    o, *grads = BWD.forward_and_backward(q, k, v, dout, seq, True, simulate=True, group=group)
    want_o, want = gqa64(q, k, v, dout, seq, True, group)
    close(o, want_o, 5e-3, "o")
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        close(got, ref, 5e-3, name)


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
def test_warpgroup_mma_kernels_match_float64_numpy_in_the_lowered_simulator(rng, d):
    """The sm_90 lowering (products on wgmma; the dK/dV kernel's loop over the group's query heads
    around its loop over query blocks) through the CPU semantics of its PTX, bf16 inputs."""
    seq, group = 128, 2
    q, k, v, dout = inputs(rng, 2, 1, seq, d, ml_dtypes.bfloat16)
    o, lse, delta = nan(2 * seq, d), nan(2 * seq), nan(2 * seq)
    args = FA.launch_args_lse(q, k, v, o, lse, seq, True, tensor_cores=True, wgmma=True, group=group)
    FA.flash_fwd_lse.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    grads = (nan(2 * seq, d), nan(seq, d), nan(seq, d))
    for kern, a in BWD.launch_args(q, k, v, o, dout, lse, delta, *grads, seq, True, tensor_cores=True,
                                   wgmma=True, group=group):
        kern.simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    want_o, want = gqa64(q, k, v, dout, seq, True, group)
    close(o, want_o, 1e-2, "o")
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        close(got, ref, 1e-2, name)


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_grouped_kernels_assemble_without_register_spills(d, arch, tmp_path):
    """sm_90a (wgmma, the GPU we measure on): no spills. sm_80 (mma.sync): the D64 dK/dV kernel, at 252
    registers with group 1, spills 24 bytes for the group loop's one more live counter (pinned here)."""
    seq, rows, group = 256, 1024, 4
    bf = lambda n: np.zeros((n, d), ml_dtypes.bfloat16)          # noqa: E731
    wg = arch == "sm_90"
    kernels = [(FA.flash_fwd_lse, FA.launch_args_lse(bf(rows), bf(rows // group), bf(rows // group), nan(rows, d),
                                                     nan(rows), seq, True, tensor_cores=True, wgmma=wg, group=group))]
    kernels += BWD.launch_args(bf(rows), bf(rows // group), bf(rows // group), nan(rows, d), bf(rows), nan(rows),
                               nan(rows), nan(rows, d), nan(rows // group, d), nan(rows // group, d), seq, True,
                               tensor_cores=True, wgmma=wg, group=group)
    for kern, args in kernels:
        ptx = kern.compile(args, arch).ptx
        allowed = 24 if (arch, d, kern) == ("sm_80", 64, BWD.flash_bwd_dkdv) else 0
        assert spill_bytes(ptxas_verbose(ptx, arch, tmp_path)) <= allowed, kern.name


def test_group_one_compiles_to_the_plain_kernels(rng):
    """group=1 is the ordinary kernel: same answer as the arguments built without a group."""
    seq, d = 64, 64
    q, k, v, dout = inputs(rng, 2, 2, seq, d)
    plain = BWD.forward_and_backward(q, k, v, dout, seq, True, simulate=True)
    one = BWD.forward_and_backward(q, k, v, dout, seq, True, simulate=True, group=1)
    for a, b in zip(plain, one):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("group,kv_rows,err,text", [
    (3, 128, bridge.ShapeRelationError, "group: expected a positive number .* divides the 4 query heads"),
    (0, 256, bridge.ShapeRelationError, "group: expected a positive number"),
    (True, 256, bridge.ShapeRelationError, "group: expected a positive number"),
    (2, 256, bridge.ShapeRelationError, r"k: expected shape \(128, 64\) \(q's rows / group 2\)"),
])
def test_backward_refuses_bad_groups_and_writes_nothing(group, kv_rows, err, text):
    seq, d, rows = 64, 64, 256
    z = lambda n: np.zeros((n, d), np.float32)                    # noqa: E731
    dq, dk, dv, delta = nan(rows, d), nan(kv_rows, d), nan(kv_rows, d), nan(rows)
    with pytest.raises(err, match=text):
        BWD.launch_args(z(rows), z(kv_rows), z(kv_rows), z(rows), z(rows), np.zeros(rows, np.float32), delta,
                        dq, dk, dv, seq, True, group=group)
    for x in (dq, dk, dv, delta):
        assert np.isnan(x).all()


@pytest.mark.parametrize("group,kv_rows,text", [
    (3, 128, "group: expected a positive number"),
    (2, 256, r"k: expected shape \(128, 64\)"),
])
def test_forward_refuses_bad_groups_and_writes_nothing(group, kv_rows, text):
    seq, d, rows = 64, 64, 256
    out, lse = nan(rows, d), nan(rows)
    kv = np.zeros((kv_rows, d), np.float32)
    with pytest.raises(ValueError, match=text):
        FA.launch_args_lse(np.zeros((rows, d), np.float32), kv, kv, out, lse, seq, False, group=group)
    assert np.isnan(out).all() and np.isnan(lse).all()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_matches_torch_autograd_of_sdpa_with_enable_gqa(d, causal):
    """B2 H8 H_kv2 S256 bf16 against torch autograd of SDPA(enable_gqa=True) in float64 on the same
    rounded inputs, the error relative to the largest value: bound 1e-2 as the plain backward's."""
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    batch, heads, kv_heads, seq = 2, 8, 2, 256
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, dout = (torch.randn(batch, h, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for h in (heads, kv_heads, kv_heads, heads))
    o, *grads = BWD.forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), seq, causal,
                                         group=heads // kv_heads)
    assert_matches_sdpa_autograd(q, k, v, dout, o, grads, causal)
