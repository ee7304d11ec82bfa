"""Arrival counters (`if tile.arrive(counter, index, count):`, tile.store_at; dsl/tile/arrivals.py): the last
block to add into a region finishes it in the same launch. Checked against float64 NumPy in the tile simulator,
in the lowered kernel on the SIMT simulator (portable, and sm_90 with the adds as TMA reduce-adds, whose
completion the arrival must wait for: dropping that wait is caught), by ptxas for sm_80 and sm_90a, and on the
GPU; the counters end at zero, so a second launch reuses them. What the rule refuses is refused at compile time
with the outputs untouched; what only a run shows (a count too small or too large, a counter not zeroed, a
block updating after its arrival) the simulator reports.

GPU part: python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_arrivals.py
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from refusal_kit import assert_refused_untouched
import tile_arrivals_lib as A

import bridge
import dsl.tile.lower.arrivals as lower_arrivals
from dsl import f32, i32, tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.sim.faults import SimulationError

POISON = -777.0
M, N = 100, 70                     # row sums: ragged against 32 x 16 tiles
GM, GK, GN = 136, 200, 264         # split-K GEMM: ragged against 64 x 128 tiles, K 200 in 3 parts of 32-steps
TILE = (64, 128)
SPLITS = 3


def row_sums_args(rng, dtype=np.float16):
    x = rng.standard_normal((M, N)).astype(np.float32)
    grid = tile.partition(np.empty((M, N), np.float32), (32, 16))
    out = np.full((M, 1), POISON, dtype)
    return (x, np.zeros((M, 1), np.float32), np.zeros(-(-M // 32), np.int32), out, grid), \
        x.astype(np.float64).sum(axis=1, keepdims=True)


def split_k_args(rng, splits=SPLITS):
    a = rng.standard_normal((GM, GK)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((GK, GN)).astype(ml_dtypes.bfloat16)
    tiles = (-(-GM // TILE[0]), -(-GN // TILE[1]))
    grid = tile.partition(np.empty((GM, tiles[1] * TILE[1] * splits), np.float32), TILE)
    c = np.full((GM, GN), POISON, ml_dtypes.bfloat16)
    args = (a, b, np.zeros((GM, GN), np.float32), np.zeros(tiles, np.int32), c, grid, splits, 32)
    return args, a.astype(np.float64) @ b.astype(np.float64)


def _close_bf16(got, want):
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2 ** -7, atol=2 ** -6)


# ------------------------------------------------------------------------------ simulator
def test_the_last_block_of_a_row_converts_the_row_sums_in_the_simulator(rng):
    args, want = row_sums_args(rng)
    A.row_sums.simulate(*args)
    np.testing.assert_allclose(args[3].astype(np.float64), want, rtol=1e-3, atol=1e-3)
    assert not args[2].any()                            # every counter back at zero


def test_a_split_k_gemm_finishes_its_tiles_in_one_launch_in_the_simulator(rng):
    args, want = split_k_args(rng)
    A.split_k_gemm.simulate(*args)
    _close_bf16(args[4], want)
    assert not args[3].any()


def test_an_arrival_in_a_loop_converts_every_row_block_it_walks(rng):
    x = rng.standard_normal((128, 48)).astype(np.float32)
    out = np.full((128, 1), POISON, np.float32)
    args = (x, np.zeros((128, 1), np.float32), np.zeros(8, np.int32), out,
            tile.partition(np.empty((64, 48), np.float32), (16, 16)), 2)      # 4 x 3 blocks, 2 row blocks each
    A.row_sums_each_step.simulate(*args)
    np.testing.assert_allclose(out, x.astype(np.float64).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert not args[2].any()


def test_zeroed_counters_serve_a_second_launch(rng):
    args, want = split_k_args(rng)
    A.split_k_gemm.simulate(*args)
    args[2][:] = 0
    args[4][:] = POISON
    A.split_k_gemm.simulate(*args)                     # the counters as the first launch left them
    _close_bf16(args[4], want)


# ------------------------------------------------------------------------------ lowered
@pytest.mark.parametrize("tc, arch", [(False, "sm_89"), (True, "sm_90")])
def test_the_lowered_row_sums_match_numpy(rng, tc, arch):
    args, want = row_sums_args(rng)
    A.row_sums.simulate_lowered(*args, tensor_cores=tc, arch=arch)
    np.testing.assert_allclose(args[3].astype(np.float64), want, rtol=1e-3, atol=1e-3)
    assert not args[2].any()


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_the_lowered_split_k_gemm_by_tma_reduce_adds_matches_numpy(monkeypatch, rng, landing):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    args, want = split_k_args(rng)
    k = tile.kernel(A.split_k_gemm.pyfunc, lowering={"tma_store": True})
    ptx = k.compile(args, "sm_90").ptx
    assert "cp.reduce.async.bulk.tensor" in ptx and "cp.async.bulk.wait_group 0;" in ptx
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    _close_bf16(args[4], want)
    assert not args[3].any()


def test_an_arrival_without_waiting_for_its_reduce_adds_is_caught(monkeypatch, rng):
    """The winner's own reduce-add lands only at a bulk wait (KB_SIM_TMA_LANDING=wait): without the arrival's
    wait it reads a sum that lacks it."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    monkeypatch.setattr(lower_arrivals, "complete_bulk_copies", lambda L: None)
    args, want = split_k_args(rng)
    k = tile.kernel(A.split_k_gemm.pyfunc, lowering={"tma_store": True})
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    assert not np.allclose(args[4].astype(np.float64), want, rtol=2 ** -7, atol=2 ** -6)


@pytest.mark.slow
@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptxas_assembles_the_arriving_kernels_without_spills(rng, arch):
    for kern, args in ((A.row_sums, row_sums_args(rng)[0]), (A.split_k_gemm, split_k_args(rng)[0]),
                       (tile.kernel(A.split_k_gemm.pyfunc, lowering={"tma_store": True}), split_k_args(rng)[0])):
        ptx = kern.compile(args, arch).ptx
        assert ptx.count("fence.acq_rel.gpu;") == 2 and "atom.global.add.u32" in ptx
        usage, _ = assemble(ptx, arch)
        assert usage and usage[0].spill_stores == 0, usage


# ------------------------------------------------------------------------------ refusals
@tile.kernel
def load_atomic_outside(x: tile.Partition[f32], acc: tile.Atomic[f32, 1], out: tile.Partition[f32]):
    tile.atomic_add(acc, 0, tile.sum(x.load()))
    out.store(tile.load(acc, 0, (1,)))


@tile.kernel
def store_at_outside(x: tile.Partition[f32], out: tile.Atomic[f32, 1]):
    tile.store_at(out, tile.bid(0), x.load())


@tile.kernel
def load_another_tile(x: tile.Partition[f32], acc: tile.Atomic[f32, 1], counts: tile.Atomic[i32, 1],
                      out: tile.Atomic[f32, 1]):
    i = tile.bid(0)
    tile.atomic_add(acc, i, x.load())
    if tile.arrive(counts, i, 1):
        tile.store_at(out, i, tile.load(acc, i + 1, x.tile_shape))


@tile.kernel
def arrive_as_a_value(x: tile.Partition[f32], counts: tile.Atomic[i32, 1]):
    last = tile.arrive(counts, tile.bid(0), 2)
    if last:
        x.store(1.0)


@tile.kernel
def float_counter(x: tile.Partition[f32], counts: tile.Atomic[f32, 1]):
    if tile.arrive(counts, tile.bid(0), 2):
        x.store(1.0)


@tile.kernel
def index_reassigned(x: tile.Partition[f32], acc: tile.Atomic[f32, 1], counts: tile.Atomic[i32, 1],
                     out: tile.Atomic[f32, 1]):
    i = tile.bid(0)
    tile.atomic_add(acc, i, x.load())
    if tile.arrive(counts, i, 1):
        i = i + 1
        tile.store_at(out, i, tile.load(acc, i, x.tile_shape))


@tile.kernel
def two_tile_shapes(x: tile.Partition[f32], counts: tile.Atomic[i32, 1], out: tile.Atomic[f32, 1]):
    i = tile.bid(0)
    if tile.arrive(counts, i, 1):
        tile.store_at(out, i, x.load())
        tile.store_at(out, i, tile.full((8,), 1.0))


@tile.kernel
def store_at_a_partition(x: tile.Partition[f32], counts: tile.Atomic[i32, 1]):
    if tile.arrive(counts, tile.bid(0), 1):
        tile.store_at(x, tile.bid(0), 1.0)


def _part(n=64):
    return tile.partition(np.full(n, POISON, np.float32), (16,))


@pytest.mark.parametrize("kernel, args, needle", [
    (load_atomic_outside, lambda: (_part(), np.full(1, POISON, np.float32), _part()),
     r"`acc` is a tile.Atomic array, which other blocks may be updating.*if tile.arrive\(counter, i, n\)"),
    (store_at_outside, lambda: (_part(), np.full(64, POISON, np.float32)),
     r"`out` is a tile.Atomic array, which other blocks may be updating"),
    (load_another_tile, lambda: (_part(), np.full(64, POISON, np.float32), np.zeros(4, np.int32),
                                 np.full(64, POISON, np.float32)),
     r"`acc`'s tile index must start with the arrival's index"),
    (arrive_as_a_value, lambda: (_part(), np.zeros(4, np.int32)),
     r"tile.arrive\(counter, index, count\) is the condition of an `if` and nothing else"),
    (float_counter, lambda: (_part(), np.zeros(4, np.float32)),
     r"`counter` must be a tile.Atomic\[i32, k\] \(or u32\) parameter.*`counts` \(Atomic\[f32, 1\]\)"),
    (index_reassigned, lambda: (_part(), np.full(64, POISON, np.float32), np.zeros(4, np.int32),
                                np.full(64, POISON, np.float32)),
     r"the branch assigns `i`, which the arrival's index reads"),
    (two_tile_shapes, lambda: (_part(), np.zeros(4, np.int32), np.full(64, POISON, np.float32)),
     r"`out` is stored in tiles of shape \(16,\) elsewhere in this kernel, here \(8,\)"),
    (store_at_a_partition, lambda: (_part(), np.zeros(4, np.int32)),
     r"`array` must be a tile.Atomic parameter \(a partition's tiles are stored with out.store\)"),
])
def test_what_the_arrival_rule_refuses_is_a_compile_error_and_the_outputs_stay_poisoned(kernel, args, needle):
    assert_refused_untouched(kernel, args(), needle)


# ------------------------------------------------------------------------------ what a run shows
@tile.kernel
def counted(x: tile.Partition[f32], acc: tile.Atomic[f32, 1], counts: tile.Atomic[i32, 1],
            out: tile.Atomic[f32, 1], n: i32):
    """Every block adds its tile's sum into acc[0] and arrives at counts[0] expecting `n` arrivals."""
    tile.atomic_add(acc, 0, tile.sum(x.load()))
    if tile.arrive(counts, 0, n):
        tile.store_at(out, 0, tile.load(acc, 0, (1,)))


@tile.kernel
def adds_after_arriving(x: tile.Partition[f32], acc: tile.Atomic[f32, 1], counts: tile.Atomic[i32, 1],
                        out: tile.Atomic[f32, 1]):
    if tile.arrive(counts, 0, tile.num_blocks(0)):
        tile.store_at(out, 0, tile.load(acc, 0, (1,)))
    tile.atomic_add(acc, 0, tile.sum(x.load()))


def _counted_args(n_blocks=4):
    x = np.arange(16 * n_blocks, dtype=np.float32)
    return (tile.partition(x, (16,)), np.zeros(1, np.float32), np.zeros(1, np.int32), np.full(1, POISON, np.float32))


def test_the_right_count_gives_the_whole_sum():
    a = _counted_args()
    counted.simulate(*a, 4)
    assert a[3][0] == np.arange(64).sum() and a[2][0] == 0


@pytest.mark.parametrize("n, needle", [
    (3, r"tile block 3 updated without arriving there|got 4 arrivals, tile.arrive's count says 3"),
    (5, r"`counts`\[0\] got 4 arrivals, tile.arrive's count says 5: no block won it"),
])
def test_a_wrong_count_is_reported_by_the_simulator(n, needle):
    with pytest.raises(SimulationError, match=needle):
        counted.simulate(*_counted_args(), n)


def test_a_counter_not_zeroed_is_reported():
    a = _counted_args()
    a[2][0] = 2
    with pytest.raises(SimulationError, match=r"`counts`\[0\] is 2 at its first arrival; counters start at zero"):
        counted.simulate(*a, 4)


def test_an_update_after_the_arrival_is_reported():
    with pytest.raises(SimulationError, match=r"read element 0 \(flat\) of `acc`, which tile block \d updated after "
                                              r"its arrival there"):
        adds_after_arriving.simulate(*_counted_args())


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
def test_gpu_split_k_gemm_finishes_its_tiles_and_leaves_the_counters_at_zero(rng):
    """2100 x 520 x 2104 in 4 parts of K: 33 x 17 tiles, each won by one of its 4 blocks; twice, the counters
    as the first launch left them; per-element atomics, and on sm_90 TMA reduce-adds."""
    dev = bridge.current_device()
    m, k, n, splits = 2100, 520, 2104, 4
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    tiles = (-(-m // TILE[0]), -(-n // TILE[1]))
    counts = bridge.from_host(np.zeros(tiles, np.int32))
    kernels = [A.split_k_gemm] + ([tile.kernel(A.split_k_gemm.pyfunc, lowering={"tma_store": True})]
                                  if dev.cc >= (9, 0) else [])
    for kern in kernels:
        for _ in range(2):
            acc = bridge.from_host(np.zeros((m, n), np.float32))
            c = bridge.from_host(np.full((m, n), POISON, ml_dtypes.bfloat16))
            grid = tile.partition(bridge.empty((m, tiles[1] * TILE[1] * splits), "float32"), TILE)
            kern(bridge.from_host(a), bridge.from_host(b), acc, counts, c, grid, splits, 32)
            np.testing.assert_allclose(c.to_host().astype(np.float64), want, rtol=2 ** -7, atol=2 ** -5)
            assert not counts.to_host().any()


@pytest.mark.gpu
def test_gpu_row_sums_convert_in_the_launch(rng):
    m, n = 5000, 3000
    x = rng.standard_normal((m, n)).astype(np.float32)
    counts = bridge.from_host(np.zeros(-(-m // 32), np.int32))
    out = bridge.from_host(np.full((m, 1), POISON, np.float16))
    A.row_sums(bridge.from_host(x), bridge.from_host(np.zeros((m, 1), np.float32)), counts, out,
               tile.partition(bridge.empty((m, n), "float32"), (32, 16)))
    np.testing.assert_allclose(out.to_host().astype(np.float64), x.astype(np.float64).sum(axis=1, keepdims=True),
                               rtol=2e-3, atol=0.05)
    assert not counts.to_host().any()

