"""Front-end constructs simulate as written: get_mut slots, 3-D thread indices, while/break, generic
bf16 kernels, chained comparisons, warp ballots."""
from __future__ import annotations

import ml_dtypes
import numpy as np

import dsl
from dsl import f32, i32, i64, simt, u32


@simt.kernel(block=(64, 1, 1))
def shift_copy(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: i64):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    if slot is not None:
        slot.set(a[i - s] if i >= s and i - s < len(a) else f32(-1))


def test_get_mut_slot_and_lazy_conditional_load(rng):
    a = rng.standard_normal(100).astype(np.float32)
    out = np.zeros(110, np.float32)
    shift_copy.simulate(a, out, 5, grid=2, block=64)
    np.testing.assert_array_equal(out[5:105], a)
    assert (out[:5] == -1).all() and (out[105:] == -1).all()


@simt.kernel(domain=3, block=(4, 4, 4))
def coords3(out: simt.DisjointSlice[i32, 3]):
    ijk = simt.thread.index_3d()
    out[ijk] = i32(ijk[0] * 10000 + ijk[1] * 100 + ijk[2])


def test_3d_thread_index_is_depth_row_col():
    out = np.zeros((5, 6, 7), np.int32)
    coords3.simulate(out, grid=(2, 2, 2), block=(4, 4, 4))
    d, r, c = np.indices(out.shape)
    np.testing.assert_array_equal(out, d * 10000 + r * 100 + c)


@simt.kernel(block=(32, 1, 1))
def first_below(a: simt.Array[f32], limit: simt.Array[f32], out: simt.DisjointSlice[i64]):
    i = simt.thread.index_1d()
    k = 0
    found = -1
    if i < len(limit):
        while k < len(a):
            if a[k] < limit[i]:
                found = k
                break
            k += 1
    out[i] = found


def test_while_with_break_has_a_trip_count_per_thread(rng):
    a = rng.standard_normal(200).astype(np.float32)
    limit = rng.standard_normal(70).astype(np.float32) - 1.5
    out = np.zeros(70, np.int64)
    first_below.simulate(a, limit, out, grid=3, block=32)
    ref = [int(np.argmax(a < t)) if (a < t).any() else -1 for t in limit]
    assert out.tolist() == ref


T = dsl.TypeVar("T")


@simt.kernel(block=(64, 1, 1))
def scale(x: simt.Array[T], out: simt.DisjointSlice[T], a: T):
    i = simt.thread.index_1d()
    if 0 <= i < len(x):
        out[i] = x[i] * a


def test_generic_kernel_specialised_for_bf16_rounds_like_the_device(rng):
    x = rng.standard_normal(77).astype(ml_dtypes.bfloat16)
    out = np.zeros(77, ml_dtypes.bfloat16)
    scale.simulate(x, out, ml_dtypes.bfloat16(1.375), grid=2, block=64)
    ref = (x.astype(np.float32) * np.float32(1.375)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(out.view(np.uint16), ref.view(np.uint16))


@simt.kernel(block=(64, 1, 1))
def ballots(p: simt.Array[i32], out: simt.DisjointSlice[u32]):
    i = simt.thread.index_1d()
    b = simt.warp.ballot(i < len(p) and p[i] > 0)   # every lane votes, also those past the end
    out[i] = b


def test_ballot_collects_one_bit_per_lane(rng):
    p = rng.integers(-5, 5, 64).astype(np.int32)
    out = np.zeros(64, np.uint32)
    ballots.simulate(p, out, grid=1, block=64)
    for w in range(2):
        want = sum(1 << k for k in range(32) if p[32 * w + k] > 0)
        assert (out[32 * w:32 * (w + 1)] == want).all()


@simt.kernel(block=(128, 1, 1), shared_mem=("max", 4096))
def reverse_dynamic(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        buf = simt.shared.dynamic(f32)
        t = simt.threadIdx.x
        n = len(buf)
        base = simt.blockIdx.x * n
        if t < n and base + t < len(a):
            buf[t] = a[base + t]
        simt.sync_threads()
        if t < n and base + t < len(a):
            out[base + t] = buf[n - 1 - t]


def test_dynamic_shared_memory_sized_by_the_launch(rng):
    n = 100 * 7 + 13
    a = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    reverse_dynamic.simulate(a, out, grid=8, block=128, shared_mem=100 * 4 + 3)   # 100 f32 per block
    for b in range(7):
        np.testing.assert_array_equal(out[b * 100:(b + 1) * 100], a[b * 100:(b + 1) * 100][::-1])
    assert np.isnan(out[700:]).all()   # the tail block reverses into shared memory nobody wrote: NaN
