"""When the simulator lands a TMA copy (dsl/tile/ptx/sm90.py, KB_SIM_TMA_LANDING): at issue (the default,
the earliest the hardware may: a stage overwritten while a product still reads it gives the new data)
or at the first mbarrier wait on its barrier (the latest a synchronised reader may observe: a stage read
without its wait gives the old data). The TMA rings tutorial 06's bars are met with (a ring fed by the
block's leader, one fed by a producer warpgroup, m64 slices on 4 warps) and the GEMM loop's TMA stages
match float64 under both; a ring whose consumers skip their wait is caught by landing at the wait only."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import tile
from dsl.tile.lower.matmul import ring as R
from interop_tests.dsl_tile.tutorial_kit import tutorial

LANDING = "KB_SIM_TMA_LANDING"
T = tutorial("06_fused_attention")
FTZ = {"fp_fusion": True, "ftz": True}
RINGS = {"64x64-tma": (64, 64, None, {"loop_pipeline": "tma"} | FTZ),
         "128x128-ws": (128, 128, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24"} | FTZ),
         "128x64-w4-slices-tma": (128, 64, 4, {"wgmma_slices": True, "loop_pipeline": "tma"} | FTZ)}


def _attention_error(ring: str, causal: bool, n_ctx: int = 256, seed: int = 3) -> float:
    bm, bn, warps, lowering = RINGS[ring]
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2 * n_ctx, 64)).astype(np.float16) for _ in range(3))
    out = np.full((2 * n_ctx, 64), np.nan, np.float16)
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)
    kern.simulate_lowered(*T.launch_args(q, k, v, out, n_ctx, causal, bm, bn), tensor_cores=True, arch="sm_90")
    return float(np.abs(out.astype(np.float64) - T.reference(q, k, v, n_ctx, causal)).max())


@pytest.mark.slow
@pytest.mark.parametrize("landing", ["issue", "wait"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("ring", RINGS)
def test_tutorial_attention_rings_match_float64_whenever_the_copies_land(ring, causal, landing, monkeypatch):
    monkeypatch.setenv(LANDING, landing)
    assert _attention_error(ring, causal) < 2e-2


@pytest.mark.slow
@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_the_gemm_loops_tma_stages_match_float64_whenever_the_copies_land(landing, monkeypatch):
    monkeypatch.setenv(LANDING, landing)
    mm = tutorial("03_matmul")
    rng = np.random.default_rng(4)
    m, n, k = 200, 136, 320                       # edges in every dimension
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (k, n)))
    c = np.full((m, n), np.nan, np.float16)
    kern = tile.kernel(mm.matmul_kernel.pyfunc, lowering={"gemm_pipeline": "ws"})
    args = mm.launch_args(a, b, c, leaky_relu=False)
    assert "cp.async.bulk.tensor" in kern.compile(args, "sm_90").ptx
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=1e-2, atol=5e-2)


@pytest.mark.slow
def test_a_ring_read_without_its_wait_is_caught_by_landing_at_the_wait_only(monkeypatch):
    """Mutation: consumers that skip the full barrier's wait read a stage whose copies may not have
    landed. Landing at issue hides it (the data is there already); landing at the wait shows it: the
    copies nobody waited for are still in flight when the block ends (dsl/sim/interp.py at_exit)."""
    from dsl.sim.faults import SimulationError

    def no_wait(L, ring, i, n):
        stage, _ = R.stage_of(L, ring, n)
        return R.stage_address(L, ring, i, stage)
    monkeypatch.setattr(R, "wait_full", no_wait)
    monkeypatch.setenv(LANDING, "issue")
    assert _attention_error("64x64-tma", False, seed=8) < 2e-2
    monkeypatch.setenv(LANDING, "wait")
    with pytest.raises(SimulationError, match=r"ended with an mbarrier .* still expecting \d+ bytes of TMA copies"):
        _attention_error("64x64-tma", False, seed=8)


def test_an_unknown_landing_is_refused_naming_the_variable_and_the_output_is_untouched(monkeypatch):
    from bridge.errors import ConfigurationError
    monkeypatch.setenv(LANDING, "later")
    bm, bn, warps, lowering = RINGS["64x64-tma"]
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((256, 64)).astype(np.float16) for _ in range(3))
    out = np.full((256, 64), np.nan, np.float16)
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=lowering)
    with pytest.raises(ConfigurationError, match="KB_SIM_TMA_LANDING.*issue, wait"):
        kern.simulate_lowered(*T.launch_args(q, k, v, out, 128, False, bm, bn), tensor_cores=True, arch="sm_90")
    assert np.isnan(out).all()


def test_asynchronous_work_left_at_the_end_of_a_block_is_named():
    """The states the simulator checks when a kernel ends (dsl/sim/interp.py): a cp.async copy never
    waited for, an mbarrier still expecting TMA bytes, a wgmma group never waited for."""
    from dsl.sim.addresses import AsyncCopies
    from dsl.tile.ptx import sm90
    copies = AsyncCopies(4)
    assert copies.at_exit() is None
    copies.issue(np.array([2]), np.array([0]), np.array([64]), np.zeros((1, 16), np.uint8))
    assert "1 thread(s) ended with cp.async copies never waited for (first: lane 2)" == copies.at_exit()
    bars = sm90._Bars()
    bars[0, 128] = sm90._Barrier(1, 0)
    assert bars.at_exit() is None
    bars[0, 128].tx = 4096
    assert "still expecting 4096 bytes" in bars.at_exit()
    groups = sm90._Groups()
    groups[0] = sm90._Wgmma(groups=[[]])
    assert "1 wgmma group(s) never waited for" in groups.at_exit()
