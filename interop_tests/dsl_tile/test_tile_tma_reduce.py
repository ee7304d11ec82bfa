"""tile.atomic_add of a region of accumulators through TMA reduce-adds (switch `tma_store`, sm_90;
dsl/tile/lower/store_tma.py reduce_tma): the tile is staged in swizzled shared memory and added into the
tile.Atomic array by one cp.reduce.async.bulk.tensor .add per 128-byte slab, atomically, elements past
the array's edges skipped. Checked in the lowered sm_90 simulator against float64 NumPy: many blocks
adding into one region at once, and one block adding into its region once a k step (the staging tile
rewritten in a loop: the leader's wait for the previous reads is what keeps it right, and dropping it
is caught when the copies read late); by ptxas for sm_90a; on the GPU.

GPU part: python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_tma_reduce.py
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_reduce_lib as R
from ptxas_kit import ptxas_verbose, spill_bytes

import bridge
import dsl.tile.lower.store_tma as store_tma
from dsl import tile

REDUCE = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
M, K, N = 136, 200, 264            # ragged against 64 x 128 tiles in both directions
TILE = (64, 128)


def kernel(which: str, **lowering):
    return tile.kernel(getattr(R, which).pyfunc, lowering={"tma_store": True, **lowering})


def operands(rng):
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    return a, b, a.astype(np.float64) @ b.astype(np.float64)


def column_sum_args(rng, a, b):
    c = np.full((M, N), np.nan, np.float32)
    total = rng.standard_normal((TILE[0], N)).astype(np.float32)
    return (a, b, tile.partition(c, TILE), total, 64), c, total.astype(np.float64)


def column_sum_want(ref, start):
    rows = -(-M // TILE[0]) * TILE[0]
    padded = np.pad(ref, ((0, rows - M), (0, 0)))
    return start + padded.reshape(-1, TILE[0], N).sum(axis=0)


def by_k_args(rng, a, b):
    marks = np.zeros((M, N), np.float32)
    c = rng.standard_normal((M, N)).astype(np.float32)
    return (a, b, tile.partition(marks, TILE), c, 64), marks, c.astype(np.float64)


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_blocks_adding_into_one_region_match_numpy_in_the_simulator(monkeypatch, rng, landing):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    a, b, ref = operands(rng)
    args, c, start = column_sum_args(rng, a, b)
    k = kernel("gemm_and_column_sum")
    ptx = k.compile(args, "sm_90").ptx
    assert ptx.count(REDUCE) == TILE[1] * 4 // 128 and "atom.global" not in ptx
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(args[3], column_sum_want(ref, start), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_a_region_updated_every_k_step_matches_numpy_in_the_simulator(monkeypatch, rng, landing):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    a, b, ref = operands(rng)
    args, marks, start = by_k_args(rng, a, b)
    kernel("gemm_by_k_updates").simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(args[3], start + 0.5 * ref, rtol=1e-5, atol=1e-4)
    assert (marks == 1.0).all()


def test_dropping_the_wait_before_the_staging_tile_is_rewritten_is_caught(monkeypatch, rng):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    monkeypatch.setattr(store_tma, "await_reads", lambda L, leader: None)
    a, b, ref = operands(rng)
    args, _, start = by_k_args(rng, a, b)
    kernel("gemm_by_k_updates").simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    assert not np.allclose(args[3], start + 0.5 * ref, rtol=1e-5, atol=1e-4)


def test_exiting_before_the_last_reduce_is_waited_for_is_caught(monkeypatch, rng):
    from dsl.sim.faults import SimulationError
    monkeypatch.setattr(store_tma, "_drain", lambda L: None)
    a, b, _ = operands(rng)
    args, _, _ = by_k_args(rng, a, b)
    with pytest.raises(SimulationError, match="never waited for"):
        kernel("gemm_by_k_updates").simulate_lowered(*args, tensor_cores=True, arch="sm_90")


def test_without_the_switch_or_before_sm90_the_adds_stay_per_element(rng):
    a, b, _ = operands(rng)
    args, _, _ = column_sum_args(rng, a, b)
    for ptx in (R.gemm_and_column_sum.compile(args, "sm_90").ptx, kernel("gemm_and_column_sum").compile(args, "sm_80").ptx):
        assert REDUCE not in ptx and ("red.global.add.f32" in ptx or "atom.global.add.f32" in ptx)


def test_ptxas_assembles_the_reducing_kernels_without_spills(rng, tmp_path):
    a, b, _ = operands(rng)
    for which, make in (("gemm_and_column_sum", column_sum_args), ("gemm_by_k_updates", by_k_args)):
        args = make(rng, a, b)[0]
        ptx = kernel(which).compile(args, "sm_90").ptx
        assert "cp.async.bulk.wait_group.read 0;" in ptx
        assert spill_bytes(ptxas_verbose(ptx, "sm_90a", tmp_path)) == 0


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("which", ["gemm_and_column_sum", "gemm_by_k_updates"])
def test_gpu_tma_reduce_adds_match_numpy(rng, which):
    """2100 x 200 x 2104: 33 blocks add into each region of `total` at once (column sums), or each
    block adds four times into its own (k steps); the arrays start random."""
    dev = bridge.current_device()
    if dev.cc < (9, 0):
        pytest.skip("TMA reduce-adds: sm_90 or newer")
    m, k, n = 2100, 200, 2104
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    da, db = bridge.from_host(a), bridge.from_host(b)
    kern = kernel(which)
    if which == "gemm_and_column_sum":
        c = bridge.from_host(np.full((m, n), np.nan, np.float32))
        start = rng.standard_normal((TILE[0], n)).astype(np.float32)
        total = bridge.from_host(start)
        args = (da, db, tile.partition(c, TILE), total, 64)
        rows = -(-m // TILE[0]) * TILE[0]
        want = start + np.pad(ref, ((0, rows - m), (0, 0))).reshape(-1, TILE[0], n).sum(axis=0)
        out = total
    else:
        marks = bridge.from_host(np.zeros((m, n), np.float32))
        start = rng.standard_normal((m, n)).astype(np.float32)
        out = bridge.from_host(start)
        args = (da, db, tile.partition(marks, TILE), out, 64)
        want = start + 0.5 * ref
    assert REDUCE in kern.compile(args, dev.arch).ptx
    kern(*args)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-4, atol=2e-3)
