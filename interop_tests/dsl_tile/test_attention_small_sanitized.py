"""Attention kernels at small shapes, for the sanitizer passes (scripts/gpu_check.py lists this file in
SANITIZE_FILES, so memcheck, racecheck, synccheck and initcheck run every test here): the forward in its
default cp.async lowering, with K/V from TMA rings, and warp-specialised (a producer warpgroup, mbarrier
rings, setmaxnreg); the backward; the variable-length forward and backward. Each checks its results
against float64 NumPy on the same bf16-rounded inputs, so a test that passes under a sanitizer has also
computed the right answer there."""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge
from dsl import tile

from attention_refs import attention64, gqa64, varlen64

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_sanitized", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FA, BWD, VL = _load("flash_attention"), _load("flash_attention_bwd"), _load("flash_attention_varlen")
FUSED = _load("flash_attention_bwd_fused")
# name -> (lowering switches, warps, {head dim: (query rows, key rows)}); sm_90 only but the default
RUNGS = {"cp.async": ({}, None, None),
         "tma": ({"loop_pipeline": "tma"}, 4, {64: (64, 128), 128: (64, 64)}),
         "ws+setmaxnreg": ({"loop_pipeline": "ws", "setmaxnreg": "240/24"}, 8, {64: (128, 128), 128: (128, 64)})}


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="the inputs are torch CUDA tensors")


def _bf16(torch, shape, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=g)


def _np(t):
    return t.float().cpu().numpy().astype(np.float64)


def _close(got, want, bound, name):
    err = np.abs(_np(got) - want).max() / np.abs(want).max()
    assert err < bound, (name, err)


@pytest.mark.parametrize("rung", sorted(RUNGS))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_matches_float64(torch, rung, d, causal):
    lowering, warps, tiles = RUNGS[rung]
    if lowering and bridge.current_device().cc < (9, 0):
        pytest.skip("TMA rings and warp specialisation need sm_90")
    seq, heads = 256, 2
    q, k, v = (_bf16(torch, (heads * seq, d), 10 * d + i + causal) for i in range(3))
    out = torch.full((heads * seq, d), float("nan"), device="cuda")
    if not lowering:
        FA.flash_fwd(*FA.launch_args(q, k, v, out, seq, causal))
    else:
        bm, bn = tiles[d]
        kern = tile.kernel(FA.flash_fwd.pyfunc, num_warps=warps, lowering=lowering)
        kern(q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
    bridge.synchronize()
    _close(out, attention64(_np(q), _np(k), _np(v), seq, causal), 1e-2, rung)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_matches_float64(torch, causal):
    seq, d = 128, 64
    q, k, v, dout = (_bf16(torch, (2 * seq, d), 40 + i + causal) for i in range(4))
    o, dq, dk, dv = BWD.forward_and_backward(q, k, v, dout, seq, causal)
    bridge.synchronize()
    want_o, want = gqa64(*(_np(x) for x in (q, k, v, dout)), seq, causal, 1)
    _close(o, want_o, 1e-2, "o")
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        _close(got, ref, 1e-2, name)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_fused_backward_picks_match_float64(torch, d, causal):
    """The fused backward's picks (TMA rings, dQ by TMA reduce-adds, D64's deferred adds); full attention on a
    few slots, so its last wave is split: 5 key blocks whole and 1 in 4 parts at D128, 3 and 1 in halves at
    D64, the parts' f32 scratch and sum_parts under the sanitizers too. Not under initcheck, which does not
    track TMA stores (the parts store their dK / dV rows so, into fresh scratch, and it reports every read of
    them in sum_parts, 40960 at these shapes, though the sums match float64): there the picks run unsplit."""
    if bridge.current_device().cc < (9, 0):
        pytest.skip("the fused backward's picks run on sm_90 warpgroup MMA")
    seq = 384 if d == 128 else 256
    form = FUSED.pick_form(d, seq, True, causal)
    q, k, v, dout = (_bf16(torch, (2 * seq, d), 80 + i + causal) for i in range(4))
    options = {**FUSED.form_options(form), "slots": 5 if d == 128 else 3}
    if os.environ.get("KB_SANITIZER") == "initcheck":
        options["split"] = False
    o, dq, dk, dv = FUSED.forward_and_backward(q, k, v, dout, seq, causal, **options)
    bridge.synchronize()
    want_o, want = gqa64(*(_np(x) for x in (q, k, v, dout)), seq, causal, 1)
    _close(o, want_o, 1e-2, "o")
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        _close(got, ref, 1e-2, name)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_variable_length_forward_and_backward_match_float64(torch, causal):
    lengths, heads, kv_heads, d = [37, 1, 90, 0, 64], 2, 1, 64
    cu_host = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    cu = torch.tensor(cu_host, device="cuda")
    total = int(cu_host[-1])
    q, dout = (_bf16(torch, (total, heads * d), 60 + i + causal) for i in range(2))
    k, v = (_bf16(torch, (total, kv_heads * d), 70 + i + causal) for i in range(2))
    got = VL.forward_and_backward(q, k, v, dout, cu, heads, causal, kv_heads)
    bridge.synchronize()
    want = varlen64(*(_np(x) for x in (q, k, v, dout)), cu_host, heads, kv_heads, causal)
    for name, g, w in zip(("o", "dq", "dk", "dv"), got, want):
        _close(g, w, 1e-2, name)
