"""Edge semantics through real kernels: batching blocks changes nothing, partial warps, early return
before a barrier, shared-memory atomics per block, uninitialised shared memory, once-rounded fma and
bf16 casts, math functions within a few ulp."""
from __future__ import annotations

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from bridge.errors import KernelFault
from dsl import bf16, f32, f64, i32, i64, simt
from dsl.ir.types import SCALARS
from dsl.sim import arith, launch


@simt.kernel(block=(96, 1, 1))
def shared_hist(data: simt.Array[i32], hist: simt.DisjointSlice[i32],
                first_old: simt.DisjointSlice[i32]):
    """Per-block histogram in shared memory (shared atomics), merged with global atomics."""
    with simt.unsafe():
        local = simt.shared.array((16,), i32)
        t = simt.threadIdx.x
        if t < 16:
            local[t] = 0
        simt.sync_threads()
        i = simt.blockIdx.x * simt.blockDim.x + t
        if i < len(data):
            old = simt.atomic.add(local, data[i] % 16, 1)
            first_old[i] = old
        simt.sync_threads()
        if t < 16:
            simt.atomic.add(hist, t, local[t])


def test_shared_memory_atomics_are_per_block_and_batching_changes_nothing(rng, monkeypatch):
    n = 5000
    data = rng.integers(0, 1000, n).astype(np.int32)
    results = []
    for lanes in (launch.MAX_LANES, 96 * 3, 96):      # many blocks per batch ... one block per batch
        monkeypatch.setattr(launch, "MAX_LANES", lanes)
        hist, old = np.zeros(16, np.int32), np.zeros(n, np.int32)
        shared_hist.simulate(data, hist, old, grid=-(-n // 96), block=96)
        results.append((hist.copy(), old.copy()))
    np.testing.assert_array_equal(results[0][0], np.bincount(data % 16, minlength=16))
    for hist, old in results[1:]:
        np.testing.assert_array_equal(hist, results[0][0])
        np.testing.assert_array_equal(old, results[0][1])
    blocks = (np.arange(n) // 96) * 16 + data % 16       # old values: 0..k-1 per (block, bin)
    for key in np.unique(blocks)[:50]:
        assert sorted(results[0][1][blocks == key].tolist()) == list(range((blocks == key).sum()))


@simt.kernel(block=(40, 1, 1))
def partial_warp_sum(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        t = simt.threadIdx.x
        out[simt.blockIdx.x * 40 + t] = simt.warp.sum(a[simt.blockIdx.x * 40 + t])


def test_warp_sum_over_a_partial_last_warp_sums_the_threads_that_exist(rng):
    a = rng.integers(-50, 50, 80).astype(np.float32)
    out = np.zeros(80, np.float32)
    partial_warp_sum.simulate(a, out, grid=2, block=40)
    for b in range(2):
        seg = a[b * 40:(b + 1) * 40]
        np.testing.assert_array_equal(out[b * 40:b * 40 + 32], seg[:32].sum())
        np.testing.assert_array_equal(out[b * 40 + 32:(b + 1) * 40], seg[32:].sum())


@simt.kernel(block=(64, 1, 1))
def early_exit_then_barrier(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        buf = simt.shared.array((64,), f32)
        t = simt.threadIdx.x
        if t >= len(a):
            return
        buf[t] = a[t]
        simt.sync_threads()
        out[t] = buf[len(a) - 1 - t]


def test_threads_that_returned_do_not_block_a_later_barrier(rng):
    a = rng.standard_normal(50).astype(np.float32)
    out = np.zeros(50, np.float32)
    early_exit_then_barrier.simulate(a, out, grid=1, block=64)
    np.testing.assert_array_equal(out, a[::-1])


@simt.kernel(block=(32, 1, 1))
def read_uninitialised(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        buf = simt.shared.array((32,), f32)
        out[simt.threadIdx.x] = buf[simt.threadIdx.x]


def test_uninitialised_shared_memory_reads_as_nan():
    out = np.zeros(32, np.float32)
    read_uninitialised.simulate(out, grid=1, block=32)
    assert np.isnan(out).all()


@simt.kernel(block=(64, 1, 1))
def fma_f32(a: simt.Array[f32], b: simt.Array[f32], c: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = simt.fma(a[i], b[i], c[i])


def _round_exact(x: Fraction, dtype) -> float:
    f = dtype(float(x))
    cands = [np.nextafter(f, dtype(-np.inf)), f, np.nextafter(f, dtype(np.inf))]
    return min(cands, key=lambda v: (abs(Fraction(float(v)) - x), int(np.asarray(v).view(np.uint32)) & 1))


def test_fma_is_rounded_once(rng):
    n = 700
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = (-(a.astype(np.float64) * b) * (1 + rng.standard_normal(n) * 1e-7)).astype(np.float32)
    out = np.zeros(n, np.float32)
    fma_f32.simulate(a, b, c, out, grid=11, block=64)
    ref = [_round_exact(Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z)), np.float32)
           for x, y, z in zip(a, b, c)]
    np.testing.assert_array_equal(out, np.array(ref, np.float32))
    assert (out != (a * b + c)).any()          # the unfused result differs somewhere: the test can fail


@simt.kernel(block=(64, 1, 1))
def to_bf16(x: simt.Array[f64], out: simt.DisjointSlice[bf16]):
    i = simt.thread.index_1d()
    out[i] = bf16(x[i])


def test_f64_to_bf16_cast_rounds_once(rng):
    x = 1.0 + rng.integers(0, 2**7, 300) * 2.0**-7 + 2.0**-8 + rng.choice([-1, 1], 300) * 2.0**-30
    out = np.zeros(300, ml_dtypes.bfloat16)
    to_bf16.simulate(x, out, grid=5, block=64)
    exact = np.where(x > 1.0 + np.floor((x - 1.0) * 128) / 128 + 2.0**-8,
                     1.0 + np.ceil((x - 1.0) * 128) / 128, 1.0 + np.floor((x - 1.0) * 128) / 128)
    np.testing.assert_array_equal(out.astype(np.float64), exact)


@simt.kernel(block=(128, 1, 1))
def transcendental(x: simt.Array[f32], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        if i < len(x):
            v = x[i]
            out[0, i] = simt.exp(v)
            out[1, i] = simt.log(abs(v) + 1.0)
            out[2, i] = simt.sin(v)
            out[3, i] = simt.tanh(v)
            out[4, i] = simt.erf(v)
            out[5, i] = simt.rsqrt(abs(v) + 0.5)


def test_math_functions_agree_with_float64_within_a_few_ulp(rng):
    x = (rng.standard_normal(1000) * 3).astype(np.float32)
    out = np.zeros((6, 1000), np.float32)
    transcendental.simulate(x, out, grid=8, block=128)
    from math import erf
    v = x.astype(np.float64)
    plus1 = (np.abs(x) + np.float32(1)).astype(np.float64)        # the kernel rounds these in f32
    plus_half = (np.abs(x) + np.float32(0.5)).astype(np.float64)
    ref = np.stack([np.exp(v), np.log(plus1), np.sin(v), np.tanh(v), np.array([erf(t) for t in v]),
                    1.0 / np.sqrt(plus_half)])
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    assert (np.abs(out - ref) <= 2 * ulp).all()


@simt.kernel(block=(64, 1, 1))
def gather_late(a: simt.Array[f32], ix: simt.Array[i64], o: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    o[i] = a[ix[i]]


def test_fault_in_a_later_batch_is_still_reported(rng, monkeypatch):
    monkeypatch.setattr(launch, "MAX_LANES", 128)
    x = rng.standard_normal(1000).astype(np.float32)
    out = np.zeros(1000, np.float32)
    idx = np.arange(1000)
    idx[999] = 4000
    with pytest.raises(KernelFault, match="index 4000 out of bounds for array 'a' with extent 1000"):
        gather_late.simulate(x, idx, out, grid=16, block=64)
    np.testing.assert_array_equal(out[:999], x[:999])


def test_bf16_constants_round_once():
    assert float(arith.const(1 + 2**-8 + 2**-30, SCALARS["bf16"])) == 1 + 2**-7
