"""Three-buffer cp.async loops (`loop_stages=3` with the default cp.async loop pipeline,
dsl/tile/lower/pipeline.py): when every copied load of a loop is a warpgroup-MMA B operand, each load
keeps three buffers in dynamic shared memory and its copies run two iterations ahead, without a barrier
after each product -- Triton's cp.async pipeline at num_stages=3, the one its tutorial 06 wins with at
head dim 64 (128 x 64 on 4 warps). Checked through the CPU semantics of the sm_90 PTX against float64
with the copies landing at their wait (a wait that completes too little reads stale data) and at their
issue (a buffer overwritten while a product still reads it reads the new data), on loops shorter than
the copies run ahead; the default (2) lowers as before; and on the GPU against SDPA."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.tile.lower import pipeline as P
from interop_tests.dsl_tile.tutorial_kit import attention_on_gpu, tutorial

T = tutorial("06_fused_attention")
LANDING = "KB_SIM_CP_ASYNC_LANDING"     # the simulator's cp.async landing: "wait" or "issue"

# (query rows, key rows, warps, lowering) of tutorial 06 at head dim 64
SLICED = (128, 64, 4, {"wgmma_slices": True, "loop_stages": 3})
SQUARE = (64, 64, None, {"loop_stages": 3})
SHAPES = {"128x64-w4": SLICED, "64x64": SQUARE}


def _args(d: int, n_ctx: int, causal: bool, bm: int, bn: int, seed: int = 5):
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2 * n_ctx, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * n_ctx, d), np.nan, np.float16)
    return (q, k, v, out), T.launch_args(q, k, v, out, n_ctx, causal, bm, bn)


def _kernel(warps, lowering):
    return tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)


def _ptx(shape: str, d: int = 64, causal: bool = False):
    bm, bn, warps, lowering = SHAPES[shape]
    return _kernel(warps, lowering).compile(_args(d, 4096, causal, bm, bn)[1], "sm_90")


@pytest.mark.parametrize("shape", SHAPES)
def test_three_buffers_wait_for_all_but_the_three_newest_groups_and_drop_the_barrier_after_products(shape):
    """Two loads (K, V) copied two iterations ahead: each product waits with wait_group 2*2-1 = 3, and
    the loop holds one barrier per product (before it), none after; 3 x 8 KiB a load in dynamic shared
    memory; no spills."""
    ck = _ptx(shape)
    assert re.findall(r"cp\.async\.wait_group (\d)", ck.ptx) == ["3", "3", "0"]
    assert len(re.findall(r"bar\.sync", ck.ptx)) == 2
    assert ck.metadata["dynamic_smem"] >= 2 * 3 * 64 * 64 * 2
    if find_ptxas() is not None:
        usage = assemble(ck.ptx, ck.metadata["arch"])[0][0]
        assert usage.spill_stores == 0 and usage.spill_loads == 0, usage


def test_the_default_two_stages_keep_one_buffer_refilled_after_its_product():
    """loop_stages 2 (the default): the old lowering, one buffer a load, a barrier on each side of a
    product, wait_group 1."""
    bm, bn, warps, _ = SLICED
    ck = _kernel(warps, {"wgmma_slices": True}).compile(_args(64, 4096, False, bm, bn)[1], "sm_90")
    assert re.findall(r"cp\.async\.wait_group (\d)", ck.ptx) == ["1", "1", "0"]
    assert len(re.findall(r"bar\.sync", ck.ptx)) == 4


def test_stages_past_the_budget_keep_one_buffer():
    """Head dim 128, 64 x 64: three buffers of K and V would take 98 KiB, over MULTI_BUDGET, so the loop
    keeps one buffer a load (wait_group 1), as with the default."""
    ck = _ptx("64x64", d=128)
    assert 2 * (3 * 64 * 128 * 2 + 1024) > P.MULTI_BUDGET
    assert re.findall(r"cp\.async\.wait_group (\d)", ck.ptx) == ["1", "1", "0"]


@pytest.mark.parametrize("landing", ["wait", "issue"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES)
def test_three_buffer_attention_matches_float64_whenever_the_copies_land(shape, causal, landing, monkeypatch):
    """Two heads; N_CTX 3 query blocks (more iterations than the copies run ahead) and one block of
    128 (a causal first block has one key block: fewer than the two copied ahead)."""
    monkeypatch.setenv(LANDING, landing)
    bm, bn, warps, lowering = SHAPES[shape]
    for n_ctx in (3 * bm, 128):
        (q, k, v, out), args = _args(64, n_ctx, causal, bm, bn)
        _kernel(warps, lowering).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
        assert np.abs(out.astype(np.float64) - T.reference(q, k, v, n_ctx, causal)).max() < 2e-2, n_ctx


def test_copies_landing_at_issue_catch_a_buffer_overwritten_while_it_is_read(monkeypatch):
    """The simulator's earliest landing is what makes the test above able to fail: with every copy
    and read through the first buffer (one buffer, copied two iterations ahead), the result is right
    when copies land at their wait and wrong when they land at issue."""
    from dsl.tile.lower.matmul import wgmma_products
    bm, bn, warps, lowering = SLICED
    for module in (P, wgmma_products):              # the copies, and the products' reads
        monkeypatch.setattr(module, "stage_base", lambda L, pipe, st, at=None: P.aligned_base(L, st.buf, "swz"))
    errors = {}
    for landing in ("wait", "issue"):
        monkeypatch.setenv(LANDING, landing)
        (q, k, v, out), args = _args(64, 384, False, bm, bn)
        _kernel(warps, lowering).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
        errors[landing] = np.abs(out.astype(np.float64) - T.reference(q, k, v, 384, False)).max()
    assert errors["wait"] < 2e-2 and not errors["issue"] < 0.1, errors


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES)
def test_gpu_three_buffer_attention_matches_sdpa(shape, causal):
    bm, bn, warps, lowering = SHAPES[shape]
    done = attention_on_gpu(lowering, bm, bn, warps or 4, 64, 1024, causal, batch=2, heads=3, seed=11)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 2e-2


def test_an_unknown_landing_is_refused_naming_the_variable_and_the_output_is_untouched(monkeypatch):
    from bridge.errors import ConfigurationError
    monkeypatch.setenv(LANDING, "sometimes")
    bm, bn, warps, lowering = SLICED
    (_, _, _, out), args = _args(64, 128, False, bm, bn)
    with pytest.raises(ConfigurationError, match="KB_SIM_CP_ASYNC_LANDING.*wait, issue"):
        _kernel(warps, lowering).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    assert np.isnan(out).all()
