"""Warpgroups that own more than 64 rows (lowering switch wgmma_slices, dsl/tile/lower/frags.py
warpgroup_rows; off by default until the GPU has measured it): on sm_90 a product
whose warps split M only, in warpgroups, with more than 16 rows a warp runs as one m64 wgmma per
slice of the warpgroup's rows (warp w holds rows 16 w .. 16 w + 15 of each slice), instead of falling
back to mma.sync. That is Triton's tutorial-06 configuration at head dim 64, 128 x 64 with 4 warps:
one warpgroup, 128 query rows, two m64 slices. Checked through the CPU semantics of the sm_90 PTX
(the simulator's wgmma wait adds each product to its slice's registers) against float64, at a
sequence length that is not a power of two, causal and not, under each loop pipeline; and on the
GPU against SDPA in float64, in a child process with a deadline (a new wgmma form that hung would
otherwise stop the suite)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from interop_tests.dsl_tile.tutorial_kit import attention_on_gpu, tutorial

T = tutorial("06_fused_attention")

SL = {"wgmma_slices": True}
LOWERINGS = {"cp.async": SL, "tma": dict(SL, loop_pipeline="tma"),
             "tma-overlap": dict(SL, loop_pipeline="tma", product_overlap=True),
             "tma-fp-fusion": dict(SL, loop_pipeline="tma", fp_fusion=True)}


def _args(d: int, n_ctx: int, causal: bool, rng, bm: int = 128, bn: int = 64):
    q, k, v = (rng.standard_normal((2 * n_ctx, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * n_ctx, d), np.nan, np.float16)
    return (q, k, v, out), T.launch_args(q, k, v, out, n_ctx, causal, bm, bn)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_128_rows_on_4_warps_run_as_two_wgmma_slices_a_step(causal):
    """Head dim 64: QK^T is 4 k-steps and PV 4 (64 keys), each issued once a slice: 16 wgmmas a
    key block (twice that for the causal kernel's two loops), no mma.sync; no spills."""
    _, args = _args(64, 4096, causal, np.random.default_rng(0))
    ck = tile.kernel(T.attn_fwd.pyfunc, num_warps=4, lowering=LOWERINGS["tma"]).compile(args, "sm_90")
    assert len(re.findall(r"wgmma\.mma_async", ck.ptx)) == (32 if causal else 16)
    assert "mma.sync" not in ck.ptx
    assert not [s for s in ck.metadata.get("slow_paths", []) if s["kind"] == "fma-product"]
    if find_ptxas() is not None:
        usage, _ = assemble(ck.ptx, ck.metadata["arch"])
        assert usage[0].spill_stores == 0 and usage[0].spill_loads == 0, usage


def test_without_the_switch_128_rows_on_4_warps_stay_on_mma_sync():
    """wgmma_slices is off by default (unmeasured on the GPU): the old lowering, unchanged."""
    _, args = _args(64, 4096, False, np.random.default_rng(0))
    ck = tile.kernel(T.attn_fwd.pyfunc, num_warps=4, lowering={"loop_pipeline": "tma"}).compile(args, "sm_90")
    assert "wgmma.mma_async" not in ck.ptx and "mma.sync" in ck.ptx


@pytest.mark.parametrize("lowering", LOWERINGS, ids=list(LOWERINGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_two_slice_attention_matches_float64_in_the_lowered_simulator(lowering, causal):
    """Three query blocks of 128 rows a head (N_CTX 384), two heads."""
    (q, k, v, out), args = _args(64, 384, causal, np.random.default_rng(5))
    tile.kernel(T.attn_fwd.pyfunc, num_warps=4, lowering=LOWERINGS[lowering]).simulate_lowered(
        *args, tensor_cores=True, arch="sm_90")
    want = T.reference(q, k, v, 384, causal)
    assert np.abs(out.astype(np.float64) - want).max() < 2e-2


def test_two_warpgroups_of_two_slices_each_match_float64_in_the_lowered_simulator():
    """256 query rows on 8 warps: each warpgroup owns 128 rows (rows 128 g .. 128 g + 127)."""
    (q, k, v, out), args = _args(64, 256, True, np.random.default_rng(6), bm=256)
    tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=LOWERINGS["tma"]).simulate_lowered(
        *args, tensor_cores=True, arch="sm_90")
    assert np.abs(out.astype(np.float64) - T.reference(q, k, v, 256, True)).max() < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("lowering", LOWERINGS, ids=list(LOWERINGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_two_slice_attention_matches_sdpa(lowering, causal):
    done = attention_on_gpu(LOWERINGS[lowering], 128, 64, 4, 64, 1024, causal, batch=2, heads=3, seed=7)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 2e-2
