"""TMA-store epilogues (switch `tma_store`, dsl/tile/lower/store_tma.py): on sm_90 a GEMM's accumulator
tile is written into swizzled shared memory and stored by bulk tensor copies, one per 128-byte column
slab; edge tiles take the same path (the copy engine clips the box at the array's edges). Checked in
the lowered sm_90 simulator against float64 NumPy on ragged shapes, for the default loop, the
warp-specialised one and the persistent one (whose staging tile is its own and whose leader waits for
the previous tile's copies before the next writes: dropping that wait is caught), with the copies
reading shared memory at issue and at their wait; by ptxas for sm_90a; and on the GPU.

GPU part: python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_tma_store.py
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K
from attention_refs import attention64
from ptxas_kit import ptxas_verbose, spill_bytes

import bridge
import dsl.tile.lower.store_tma as store_tma
from dsl import tile
from dsl.sim.faults import SimulationError

ROOT = Path(__file__).resolve().parents[2]
BULK_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}
TMA_STORE = {"tma_store": True}


def kernel(which: str, persistent: bool = False, **lowering):
    return tile.kernel(getattr(K, which).pyfunc, persistent=persistent, lowering={**TMA_STORE, **lowering})


def operands(rng, dtype, m: int, k: int, n: int):
    a = rng.standard_normal((m, k)).astype(DTYPES[dtype])
    b = rng.standard_normal((k, n)).astype(DTYPES[dtype])
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def simulate(which, mode, a, b, c, tshape, bk, extra=()):
    """`mode`: "sync" (the default loop), "ws" (warp-specialised) or "pws" (persistent, warp-specialised;
    two blocks, so each walks several tiles)."""
    k = kernel(which, persistent=mode == "pws", gemm_pipeline="sync" if mode == "sync" else "ws")
    args = (a, b, *extra, tile.partition(c, tshape), bk)
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90", **({"blocks": 2} if mode == "pws" else {}))
    return k, args


@pytest.mark.parametrize("mode", ["sync", "ws", "pws"])
@pytest.mark.parametrize("which,out", [("gemm", np.float32), ("gemm_cast", "same")])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_a_tma_store_epilogue_matches_numpy_in_the_simulator(rng, mode, which, out, dtype):
    """136 x 264: ragged in both directions, so edge tiles are clipped by the copies, not the code."""
    a, b, ref = operands(rng, dtype, 136, 200, 264)
    odt = DTYPES[dtype] if out == "same" else out
    c = np.full((136, 264), np.nan, odt)
    tshape = (128, 128) if which == "gemm" and mode == "pws" else (128, 256)
    k, args = simulate(which, mode, a, b, c, tshape, 64)
    assert k.compile(args, "sm_90").ptx.count(BULK_STORE) == tshape[1] * np.dtype(odt).itemsize // 128
    tol = dict(rtol=1e-5, atol=1e-4) if odt == np.float32 else dict(rtol=2 ** -7, atol=2e-2)
    np.testing.assert_allclose(c.astype(np.float64), ref, **tol)


def test_the_tf32_mma_sync_loop_stores_through_tma_too(rng):
    """An f32 NN GEMM on sm_90 runs mma.sync over cp.async stages; its 128 x 256 f32 tile (128 KiB)
    is staged in those stages once the loop is done."""
    a = rng.standard_normal((136, 72)).astype(np.float32)
    b = rng.standard_normal((72, 264)).astype(np.float32)
    c = np.full((136, 264), np.nan, np.float32)
    k, args = simulate("gemm", "sync", a, b, c, (128, 256), 32)
    ptx = k.compile(args, "sm_90").ptx
    assert "mma.sync" in ptx and ptx.count(BULK_STORE) == 8 and "st.global" not in ptx
    tf32 = (lambda x: ((x.view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
            .astype(np.float64))
    np.testing.assert_allclose(c, tf32(a) @ tf32(b), rtol=1e-5, atol=1e-4)


def test_the_stores_write_nothing_past_the_arrays_edges(rng):
    """C is the first 136 rows of a larger buffer: the boxes of the last row of tiles reach past
    them, and the rows after must keep their poison."""
    a, b, ref = operands(rng, "bf16", 136, 64, 200)
    big = np.full((300, 200), -3.25, np.float32)
    c = big[:136]
    simulate("gemm", "sync", a, b, c, (128, 128), 64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    assert (big[136:] == -3.25).all()


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_the_persistent_epilogue_is_right_whenever_the_copies_read(monkeypatch, rng, landing):
    """KB_SIM_TMA_LANDING=wait reads each copy's box at the wait that completes it, the latest the copy
    engine may: the next tile's writes must come after that wait."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    a, b, ref = operands(rng, "bf16", 520, 136, 264)     # 15 tiles over 2 blocks
    c = np.full((520, 264), np.nan, ml_dtypes.bfloat16)
    simulate("gemm_cast", "pws", a, b, c, (128, 128), 64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2 ** -7, atol=2e-2)


def test_dropping_the_wait_before_the_next_tiles_writes_is_caught(monkeypatch, rng):
    """Without it a block's next tile overwrites the staging tile its last copies have not read yet."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    a, b, ref = operands(rng, "bf16", 520, 136, 264)
    c = np.full((520, 264), np.nan, np.float32)
    simulate("gemm", "pws", a, b, c, (128, 128), 64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    monkeypatch.setattr(store_tma, "await_reads", lambda L, leader: None)
    c = np.full((520, 264), np.nan, np.float32)
    simulate("gemm", "pws", a, b, c, (128, 128), 64)
    assert not np.allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_exiting_before_the_last_copies_are_waited_for_is_caught(monkeypatch, rng):
    monkeypatch.setattr(store_tma, "_drain", lambda L: None)
    a, b, _ = operands(rng, "bf16", 264, 72, 136)
    c = np.full((264, 136), np.nan, np.float32)
    with pytest.raises(SimulationError, match="never waited for"):
        simulate("gemm", "pws", a, b, c, (128, 128), 64)


def _compile_big(which: str, mode: str, dtype: str, out, tshape, bk: int, **lowering):
    """A compile at a large shape (nothing runs): 8192 x 1024 x 8192."""
    a = np.zeros((8192, 1024), DTYPES.get(dtype, np.float32))
    b = np.zeros((1024, 8192), a.dtype)
    c = np.zeros((8192, 8192), a.dtype if out == "same" else out)
    k = kernel(which, persistent=mode == "pws", gemm_pipeline="sync" if mode == "sync" else "ws", **lowering)
    return k.compile((a, b, tile.partition(c, tshape), bk), "sm_90")


@pytest.mark.parametrize("which,mode,out,stores", [("gemm", "sync", np.float32, 8), ("gemm_cast", "pws", "same", 4),
                                                   ("gemm_cast", "sync", "same", 4), ("gemm", "ws", np.float32, 8)])
def test_ptxas_assembles_the_tma_store_gemms_without_spills(tmp_path, which, mode, out, stores):
    """The 128 x 256 x 64 bf16 GEMMs the benchmarks time. The persistent one (its 64 KiB staging tile
    beside the stages) plans 3 stages, not 4."""
    ck = _compile_big(which, mode, "bf16", out, (128, 256), 64)
    assert ck.ptx.count(BULK_STORE) == stores and "st.global" not in ck.ptx
    assert "fence.proxy.async.shared::cta;" in ck.ptx and "cp.async.bulk.wait_group.read 0;" in ck.ptx
    assert spill_bytes(ptxas_verbose(ck.ptx, "sm_90a", tmp_path)) == 0
    if mode == "pws":
        assert 3 * 48 * 1024 + 64 * 1024 <= ck.dynamic_smem < 4 * 48 * 1024 + 64 * 1024


def test_the_persistent_f32_tile_is_staged_in_two_rounds_beside_three_stages(tmp_path, rng):
    """128 x 256 f32 is 128 KiB: beside 3 stages of 48 KiB only 4 of its 8 slabs fit at a time, so
    the leader waits for the first round's reads before the second round is written. ptxas: 24 bytes
    of spills (pinned; the pair stores: none)."""
    ck = _compile_big("gemm", "pws", "bf16", np.float32, (128, 256), 64)
    assert ck.ptx.count(BULK_STORE) == 8 and ck.ptx.count("cp.async.bulk.commit_group;") == 2
    assert 3 * 48 * 1024 + 64 * 1024 <= ck.dynamic_smem < 4 * 48 * 1024 + 64 * 1024
    assert spill_bytes(ptxas_verbose(ck.ptx, "sm_90a", tmp_path)) <= 24
    for landing in ("issue", "wait"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KB_SIM_TMA_LANDING", landing)
            a, b, ref = operands(rng, "bf16", 264, 72, 520)
            c = np.full((264, 520), np.nan, np.float32)
            simulate("gemm", "pws", a, b, c, (128, 256), 64)
            np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_staging_rounds_keep_the_rings_four_stages_and_store_the_tile_a_slab_a_round(tmp_path, rng):
    """Switch staging_rounds: the persistent 128 x 256 x 64 bf16 GEMM keeps the 4 stages of 48 KiB it
    has without TMA stores, and its 64 KiB tile goes out a 16 KiB slab at a time (what fits beside
    them), the leader waiting for each round's reads before the next is written; ragged shapes match
    float64 NumPy with the copies reading at issue and at their wait. Off, the same kernel plans 3."""
    ck = _compile_big("gemm_cast", "pws", "bf16", "same", (128, 256), 64, staging_rounds=True)
    assert 4 * 48 * 1024 <= ck.dynamic_smem < 5 * 48 * 1024 and ck.ptx.count("mbarrier.init") == 2 * 4
    assert ck.ptx.count(BULK_STORE) == 4 and ck.ptx.count("cp.async.bulk.commit_group;") == 4
    assert ck.ptx.count("cp.async.bulk.wait_group.read 0;") >= 4
    off = _compile_big("gemm_cast", "pws", "bf16", "same", (128, 256), 64)
    assert off.ptx.count("mbarrier.init") == 2 * 3 and off.ptx.count("cp.async.bulk.commit_group;") == 1
    assert spill_bytes(ptxas_verbose(ck.ptx, "sm_90a", tmp_path)) == 0
    for landing in ("issue", "wait"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KB_SIM_TMA_LANDING", landing)
            a, b, ref = operands(rng, "bf16", 264, 72, 520)
            c = np.full((264, 520), np.nan, ml_dtypes.bfloat16)
            k = kernel("gemm_cast", persistent=True, gemm_pipeline="ws", staging_rounds=True)
            k.simulate_lowered(a, b, tile.partition(c, (128, 256)), 64, tensor_cores=True, arch="sm_90", blocks=2)
            np.testing.assert_allclose(c.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("rounds", [False, True], ids=["at-once", "rounds"])
def test_persistent_warpgroups_storing_their_own_rows_never_wait_for_each_other(tmp_path, rng, rounds):
    """store_by_warpgroup on the persistent warp-specialised GEMM: each consumer warpgroup stages and stores its
    64 rows between barriers of its own 128 threads, and nothing after the main loop joins the two (the
    barrier of both that ends each tile's loop is gone: the staging tile is the kernel's own, never the
    operand stages the other warpgroup reads), so they may drift apart by up to the ring's depth. Ragged
    shapes over two blocks match float64 with the copies landing at issue and at their wait, free of shared
    races; ptxas: no spills. Without the switch the kernel keeps the barrier of both. With staging_rounds
    (4 stages, not 3) each warpgroup stores its rows a 128-byte slab a round, waiting for a round's reads
    before it writes the next."""
    ck = _compile_big("gemm_cast", "pws", "bf16", "same", (128, 256), 64, store_by_warpgroup=True,
                      staging_rounds=rounds)
    assert "bar.sync 4, 128;" in ck.ptx and "bar.sync 5, 128;" in ck.ptx and "bar.sync 1, 256;" not in ck.ptx
    assert ck.ptx.count(BULK_STORE) == 8          # each warpgroup's four 128-byte column slabs of its rows
    assert ck.ptx.count("mbarrier.init") == 2 * (4 if rounds else 3)
    assert ck.ptx.count("cp.async.bulk.commit_group;") == (8 if rounds else 2)
    assert "bar.sync 1, 256;" in _compile_big("gemm_cast", "pws", "bf16", "same", (128, 256), 64).ptx
    # lazy_barriers leaves an epilogue's shared-memory reads to the next barrier: the kernel keeps the one of both
    assert "bar.sync 1, 256;" in _compile_big("gemm_cast", "pws", "bf16", "same", (128, 256), 64, store_by_warpgroup=True,
                                              staging_rounds=rounds, lazy_barriers=True).ptx
    assert spill_bytes(ptxas_verbose(ck.ptx, "sm_90a", tmp_path)) == 0
    a, b, ref = operands(rng, "bf16", 392, 72, 520)          # 8 tiles over 2 blocks, ragged M and N
    for landing in ("issue", "wait"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KB_SIM_TMA_LANDING", landing)
            mp.setenv("KB_SIM_SHARED_RACES", "1")
            c = np.full((392, 520), np.nan, ml_dtypes.bfloat16)
            k = kernel("gemm_cast", persistent=True, gemm_pipeline="ws", store_by_warpgroup=True, staging_rounds=rounds)
            k.simulate_lowered(a, b, tile.partition(c, (128, 256)), 64, tensor_cores=True, arch="sm_90", blocks=2)
            np.testing.assert_allclose(c.astype(np.float64), ref, rtol=1e-2, atol=1e-2)
    if rounds:      # each round waits for the last one's reads: without that wait the copies read the next round
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("KB_SIM_TMA_LANDING", "wait")
            mp.setenv("KB_CACHE", "0")
            mp.setattr(store_tma, "await_reads", lambda L, leader: None)
            c = np.full((392, 520), np.nan, ml_dtypes.bfloat16)
            k = kernel("gemm_cast", persistent=True, gemm_pipeline="ws", store_by_warpgroup=True, staging_rounds=True)
            k.simulate_lowered(a, b, tile.partition(c, (128, 256)), 64, tensor_cores=True, arch="sm_90", blocks=2)
            assert not np.allclose(c.astype(np.float64), ref, rtol=1e-2, atol=1e-2)


def test_a_staging_tile_that_cannot_fit_falls_back_to_direct_stores_and_says_so(monkeypatch, tmp_path, rng):
    """With no room left beside 3 stages for even one slab (the slack set to take it all), the whole
    tile is staged, does not fit, and the kernel is lowered again with pair stores. (A cache of its
    own: the slack is no part of the compile keys.)"""
    monkeypatch.setattr(store_tma, "RESERVE_SLACK", 200 * 1024)
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    ck = _compile_big("gemm", "pws", "bf16", np.float32, (128, 256), 64)
    assert BULK_STORE not in ck.ptx and "st.global.v2.f32" in ck.ptx
    kinds = [p["kind"] for p in ck.metadata.get("slow_paths", [])]
    assert "tma-store-fallback" in kinds, kinds
    a, b, ref = operands(rng, "bf16", 264, 72, 264)
    c = np.full((264, 264), np.nan, np.float32)
    simulate("gemm", "pws", a, b, c, (128, 256), 64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_tma_stores_are_off_by_default_and_only_for_sm90(rng):
    a, b, _ = operands(rng, "bf16", 264, 64, 264)
    c = np.zeros((264, 264), np.float32)
    args = (a, b, tile.partition(c, (128, 128)), 64)
    assert BULK_STORE not in K.gemm.compile(args, "sm_90").ptx
    on = kernel("gemm")
    assert BULK_STORE in on.compile(args, "sm_90").ptx
    sm80 = on.compile(args, "sm_80").ptx
    assert BULK_STORE not in sm80 and "st.global.v2.f32" in sm80


def test_the_switch_comes_from_the_environment_too(monkeypatch, rng):
    monkeypatch.setenv("KB_TILE_TMA_STORE", "1")
    a, b, _ = operands(rng, "bf16", 136, 64, 136)
    c = np.zeros((136, 136), np.float32)
    fresh = tile.kernel(K.gemm.pyfunc)
    assert BULK_STORE in fresh.compile((a, b, tile.partition(c, (128, 128)), 64), "sm_90").ptx


# ------------------------------------------------------------------------------ attention's output
def _flash():
    spec = importlib.util.spec_from_file_location("flash_attention_example", ROOT / "examples" / "flash_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


ATTENTION_RUNGS = {"tma": ({"loop_pipeline": "tma"}, None, None),
                   "ws-128x128": ({"loop_pipeline": "ws", "setmaxnreg": "240/24"}, 8, (128, 128))}


def _flash_rung(fa, rung: str, d: int, q, k, v, out, seq: int, causal: bool):
    lowering, warps, tiles = ATTENTION_RUNGS[rung]
    kern = tile.kernel(fa.flash_fwd.pyfunc, num_warps=warps, lowering={**lowering, **TMA_STORE})
    if tiles is None:
        return kern, fa.launch_args(q, k, v, out, seq, causal)
    return kern, (q, k, v, tile.partition(out, (tiles[0], d)), seq, d ** -0.5, tiles[1], causal, 1)


@pytest.mark.parametrize("rung", list(ATTENTION_RUNGS))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_stores_its_output_through_tma_in_the_simulator(rng, tmp_path, rung, d, causal):
    """The forward's output tile (f32, BM x D) takes the same path, staged in the stages of its drained
    K/V ring (a closing store: store_tma._ring_span); ptxas: no spills, but for the causal ws D128
    rung's 8 bytes: one value of the prologue stored once and loaded once in the epilogue (SASS)."""
    fa = _flash()
    seq, heads = 256, 2
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    kern, args = _flash_rung(fa, rung, d, q, k, v, out, seq, causal)
    ck = kern.compile(args, "sm_90")
    assert ck.ptx.count(BULK_STORE) == d * 4 // 128 and "st.global" not in ck.ptx
    assert spill_bytes(ptxas_verbose(ck.ptx, "sm_90a", tmp_path)) <= (8 if (rung, d, causal) == ("ws-128x128", 128, True)
                                                                      else 0)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    ref = attention64(*(x.astype(np.float32) for x in (q, k, v)), seq, causal)
    np.testing.assert_allclose(out, ref, rtol=1e-2, atol=5e-3)


# ------------------------------------------------------------------------------ GPU
def _device_or_skip():
    dev = bridge.current_device()
    if dev.cc < (9, 0):
        pytest.skip("TMA stores: sm_90 or newer")
    return dev


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["sync", "ws", "pws", "pws by warpgroup", "pws rounds by warpgroup"])
@pytest.mark.parametrize("which", ["gemm", "gemm_cast"])
def test_gpu_tma_store_gemm_matches_numpy(monkeypatch, rng, mode, which):
    """Ragged M, N, K (N a multiple of 8: 16-byte rows), more tiles than SMs for the persistent kernel;
    C is the first rows of a larger poisoned buffer whose other rows must stay poisoned. "pws by
    warpgroup": persistent with store_by_warpgroup (the consumer warpgroups never wait for each other)."""
    dev = _device_or_skip()
    m, k, n = 2100, 200, 2104
    a, b, ref = operands(rng, "bf16", m, k, n)
    odt = np.float32 if which == "gemm" else ml_dtypes.bfloat16
    host = np.full((m + 100, n), -3.25, odt)
    big = bridge.from_host(host)
    c = big[:m]
    tshape = (128, 128) if which == "gemm" and mode.startswith("pws") else (128, 256)
    kern = kernel(which, persistent=mode.startswith("pws"), gemm_pipeline="sync" if mode == "sync" else "ws",
                  **({"store_by_warpgroup": True} if mode.endswith("warpgroup") else {}),
                  **({"staging_rounds": True} if "rounds" in mode else {}))
    args = (bridge.from_host(a), bridge.from_host(b), tile.partition(c, tshape), 64)
    assert kern.compile(args, dev.arch).ptx.count(BULK_STORE) > 0
    kern(*args)
    got = big.to_host()
    tol = dict(rtol=1e-4, atol=1e-3) if odt == np.float32 else dict(rtol=2 ** -7, atol=2e-2)
    np.testing.assert_allclose(got[:m].astype(np.float64), ref, **tol)
    assert (got[m:] == odt(-3.25)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("rung", list(ATTENTION_RUNGS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_flash_attention_with_a_tma_store_matches_float64(rng, rung, causal):
    dev = _device_or_skip()
    fa = _flash()
    seq, heads, d = 512, 3, 128
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = bridge.from_host(np.full((heads * seq, d), np.nan, np.float32))
    kern, args = _flash_rung(fa, rung, d, *(bridge.from_host(x) for x in (q, k, v)), out, seq, causal)
    assert BULK_STORE in kern.compile(args, dev.arch).ptx
    kern(*args)
    ref = attention64(*(x.astype(np.float32) for x in (q, k, v)), seq, causal)
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-2, atol=5e-3)


def test_two_accumulator_stores_of_one_kernel_wait_for_each_others_reads(monkeypatch, rng):
    """The two-kernel attention backward's dK/dV kernel stores dK and then dV through the one staging
    tile: before dV is written the leader waits for dK's copies and the block meets (a wait for
    the leader alone would let the others overwrite dK's tile under the copy). The lock-step simulator
    runs the leader's wait before anyone writes, so the test counts the waits in the PTX (before dK's
    writes, before dV's, before the exit) and checks the values."""
    import test_flash_attention_bwd as T
    bwd = T.BWD
    seq, d = 128, 64
    q, k, v, dout = T.inputs(rng, 2, seq, d, ml_dtypes.bfloat16)
    o, lse, delta = T.nan(2 * seq, d), T.nan(2 * seq), T.nan(2 * seq)
    bwd.fwd.flash_fwd_lse.simulate(*bwd.fwd.launch_args_lse(q, k, v, o, lse, seq, False))
    dq, dk, dv = (T.nan(2 * seq, d) for _ in range(3))
    steps = bwd.launch_args(q, k, v, o, dout, lse, delta, dq, dk, dv, seq, False, tensor_cores=True, wgmma=True)
    (pre, pre_args), (kv, kv_args), _ = steps
    pre.simulate(*pre_args)
    dkdv = tile.kernel(kv.pyfunc, lowering=TMA_STORE)
    ptx = dkdv.compile(kv_args, "sm_90").ptx
    assert ptx.count(BULK_STORE) == 2 * (d * 4 // 128) and ptx.count("cp.async.bulk.wait_group.read 0;") == 3
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    dkdv.simulate_lowered(*kv_args, tensor_cores=True, arch="sm_90")
    want = T.grads64(q, k, v, dout, seq, False)
    for name, got, w in zip(("dk", "dv"), (dk, dv), want[1:]):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-2 * np.abs(w).max(), err_msg=name)
