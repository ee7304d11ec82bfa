"""The fused variable-length attention backward (examples/flash_attention_varlen.py
`flash_bwd_varlen_fused`): dK, dV and dQ in one pass over the keys, dQ added atomically into a
tile.Atomic f32 (total, H*D) array (per element, or TMA reduce-adds under `tma_store` on sm_90). The
simulator and the lowered sm_90 simulator against float64 one sequence at a time (attention_refs.varlen64),
ragged and one-row sequences, grouped heads, refusals, ptxas for sm_90a and sm_80, and the GPU. Its
simulator test against float64 is test_flash_attention_varlen.py's, parametrised over both backwards."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from ptxas_kit import ptxas_verbose, spill_bytes
from test_flash_attention_varlen import VL, close, lowered_forward, nan, offsets, packed, want64

import bridge

REDUCE = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add"
TMA = {"tma_store": True}


@pytest.mark.slow
@pytest.mark.parametrize("lowering", [None, TMA], ids=["atomics", "tma-reduce"])
@pytest.mark.parametrize("d", [64, 128])
def test_the_lowered_sm90_fused_varlen_backward_matches_float64(rng, lowering, d):
    """bf16, causal, grouped heads; query blocks straddling two sequences add zeros into the other's rows."""
    lengths, heads, kv_heads = [70, 3, 60], 2, 1
    q, k, v, dout = packed(rng, lengths, heads, kv_heads, d, ml_dtypes.bfloat16)
    cu = offsets(lengths)
    starts, ends, o, lse, delta, dq, dk, dv = lowered_forward(q, k, cu, heads, kv_heads, d, v)
    steps = VL.fused_backward_launch_args(q, k, v, o, dout, lse, delta, starts, ends, dq, dk, dv, heads, True,
                                          kv_heads, tensor_cores=True, lowering=lowering)
    assert (REDUCE in steps[1][0].compile(steps[1][1], "sm_90").ptx) == (lowering is not None)
    for kern, args in steps:
        kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    for name, g, w in zip(("o", "dq", "dk", "dv"), (o, dq, dk, dv), want64(q, k, v, dout, cu, heads, kv_heads, True)):
        close(g, w, 1e-2, name)


def test_a_dq_that_is_not_float32_is_refused_and_nothing_is_written():
    total, heads, d = 100, 2, 64
    x = np.zeros((total, heads * d), np.float32)
    s = np.zeros(total, np.int32)
    dq = np.full((total, heads * d), np.nan, np.float16)
    dk, dv, delta = nan(total, heads * d), nan(total, heads * d), nan(total, heads)
    with pytest.raises(bridge.DTypeError, match="dq: expected float32"):
        VL.fused_backward_launch_args(x, x, x, x, x, np.zeros((total, heads), np.float32), delta, s, s, dq, dk, dv,
                                      heads, False)
    assert np.isnan(dq).all() and np.isnan(dk).all() and np.isnan(dv).all() and np.isnan(delta).all()


# spill bytes ptxas 13.0 gives (pinned: a change shows here)
FUSED_SPILLS = {("sm_90", 64): 0, ("sm_90", 128): 0, ("sm_90", 256): 0, ("sm_80", 64): 48, ("sm_80", 128): 0,
                ("sm_80", 256): 0}


@pytest.mark.slow
@pytest.mark.parametrize("arch,d", list(FUSED_SPILLS))
@pytest.mark.parametrize("lowering", [None, TMA], ids=["atomics", "tma-reduce"])
def test_both_launches_assemble(tmp_path, arch, d, lowering):
    total, heads, hk = 1000, 8, 2
    bf = lambda c: np.zeros((total, c), ml_dtypes.bfloat16)        # noqa: E731
    f = lambda *s: np.zeros(s, np.float32)                          # noqa: E731
    s = np.zeros(total, np.int32)
    steps = VL.fused_backward_launch_args(bf(heads * d), bf(hk * d), bf(hk * d), f(total, heads * d), bf(heads * d),
                                          f(total, heads), f(total, heads), s, s, f(total, heads * d),
                                          f(total, hk * d), f(total, hk * d), heads, True, hk, tensor_cores=True,
                                          lowering=lowering)
    for kern, args in steps:
        ptx = kern.compile(args, arch).ptx
        if kern.name == "flash_bwd_varlen_fused":
            assert (REDUCE in ptx) == (lowering is not None and arch == "sm_90")
        assert spill_bytes(ptxas_verbose(ptx, arch, tmp_path)) <= FUSED_SPILLS[arch, d], (kern.name, arch, d)


@pytest.mark.gpu
@pytest.mark.parametrize("lowering", [None, TMA], ids=["atomics", "tma-reduce"])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_fused_varlen_backward_matches_torch_autograd_of_sdpa(lowering, d):
    pytest.importorskip("torch", reason="the autograd reference needs torch")
    VL.run_gpu([300, 1, 1000, 64, 517], 8, 2, d, fused=True, lowering=lowering)
