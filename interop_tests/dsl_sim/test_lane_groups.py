"""Lane groups (`simt.warp.group(n)`, dsl/frontend/groups.py): each warp splits into 32 / n groups of n
lanes whose reductions, shuffles and votes stay inside the group, whose index owns a row the way a warp's
does, and whose `lanes(c)` loop strides by n. Checked in the simulator against NumPy (int reductions are
exact) for every width, and the same kernels on the GPU; a row-per-group kernel writes its outputs
without `unsafe`; bad widths and group operations where lanes diverge are compile errors."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import DslCompileError, f32, i32, simt

WIDTHS = (2, 4, 8, 16, 32)


def _group_ops(n: int):
    @simt.kernel(block=64)
    def ops(a: simt.Array[i32], out: simt.DisjointSlice[i32, 2]):
        i = simt.thread.index_1d()
        g = simt.warp.group(n)
        v = a[i] if i < len(a) else i32(0)
        s = g.sum(v)
        hi = g.max(v)
        lo = g.min(v)
        first = g.shfl(v, 0)
        down = g.shfl_down(v, 1)
        up = g.shfl_up(v, 1)
        x = g.shfl_xor(v, 1)
        bal = g.ballot(v > 0)
        anyp = g.any(v > 90)
        allp = g.all(v > -90)
        r = g.rank()
        with simt.unsafe():
            if i < len(a):
                out[i, 0] = s
                out[i, 1] = hi
                out[i, 2] = lo
                out[i, 3] = first
                out[i, 4] = down
                out[i, 5] = up
                out[i, 6] = x
                out[i, 7] = i32(bal)
                out[i, 8] = i32(anyp)
                out[i, 9] = i32(allp)
                out[i, 10] = i32(r)
    return ops


def _expected(a: np.ndarray, n: int) -> np.ndarray:
    pad = (-len(a)) % 64
    v = np.concatenate([a, np.zeros(pad, a.dtype)]).astype(np.int64).reshape(-1, n)
    rank = np.tile(np.arange(n), len(v))
    rows = np.repeat(np.arange(len(v)), n)
    e = np.zeros((v.size, 11), np.int64)
    e[:, 0] = np.repeat(v.sum(1), n)
    e[:, 1] = np.repeat(v.max(1), n)
    e[:, 2] = np.repeat(v.min(1), n)
    e[:, 3] = np.repeat(v[:, 0], n)
    flat = v.reshape(-1)
    e[:, 4] = np.where(rank + 1 < n, np.roll(flat, -1), flat)
    e[:, 5] = np.where(rank >= 1, np.roll(flat, 1), flat)
    e[:, 6] = v[rows, rank ^ 1] if n > 1 else flat
    bits = (v > 0).astype(np.int64) << np.arange(n)
    e[:, 7] = np.repeat(bits.sum(1), n).astype(np.uint32).astype(np.int32)
    e[:, 8] = np.repeat((v > 90).any(1), n)
    e[:, 9] = np.repeat((v > -90).all(1), n)
    e[:, 10] = rank
    return e[:len(a)]


@pytest.mark.parametrize("n", WIDTHS)
def test_group_reductions_shuffles_and_votes_stay_inside_the_group(rng, n):
    a = rng.integers(-100, 100, 150).astype(np.int32)
    out = np.full((150, 11), -7, np.int32)
    _group_ops(n).simulate(a, out, grid=3)
    np.testing.assert_array_equal(out, _expected(a, n))


@simt.kernel(block=128, requires=["x.shape == out.shape", "len(norm) == x.shape[0]"])
def rownorm_group8(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], norm: simt.DisjointSlice[f32]):
    g = simt.warp.group(8)
    r = g.index_1d()                         # 8 lanes own row r: 16 rows per block
    if r < x.shape[0]:                       # the same for the whole group
        s = f32(0.0)
        for c in g.lanes(x.shape[1]):
            s += x[r, c] * x[r, c]
        t = simt.sqrt(g.sum(s))
        for c in g.lanes(x.shape[1]):
            out[r, c] = x[r, c] / t
        norm[r] = t


def test_a_row_per_group_kernel_writes_without_unsafe_and_matches_float64(rng):
    x = rng.standard_normal((45, 13)).astype(np.float32)
    out = np.full_like(x, np.nan)
    norm = np.full(45, np.nan, np.float32)
    rownorm_group8.simulate(x, out, norm)
    ref = np.sqrt((x.astype(np.float64) ** 2).sum(1))
    np.testing.assert_allclose(norm, ref, rtol=1e-5)
    np.testing.assert_allclose(out, x / ref[:, None], rtol=1e-5, atol=1e-7)
    d = rownorm_group8.contract(x, out, norm).to_dict()
    assert d["grid_from"]["tile"][0] == 16


def test_a_group_width_that_does_not_divide_the_warp_is_a_compile_error():
    @simt.kernel(block=64)
    def bad(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        g = simt.warp.group(6)
        out[i] = a[i]

    a = np.ones(10, np.float32)
    with pytest.raises(DslCompileError, match="2, 4, 8, 16 or 32 lanes, got 6"):
        bad.build(a, a.copy())


def test_a_group_reduction_inside_its_lanes_loop_is_a_compile_error():
    @simt.kernel(block=64)
    def bad(x: simt.Array[f32, 2], norm: simt.DisjointSlice[f32]):
        g = simt.warp.group(4)
        r = g.index_1d()
        s = f32(0.0)
        for c in g.lanes(x.shape[1]):
            s += g.sum(x[r, c])
        norm[r] = s

    x = np.ones((4, 5), np.float32)
    with pytest.raises(DslCompileError, match="lanes run different numbers of iterations"):
        bad.build(x, np.ones(4, np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("n", WIDTHS)
def test_group_operations_on_the_gpu_match_numpy(rng, n):
    import cupy as cp
    a = rng.integers(-100, 100, 150).astype(np.int32)
    out = cp.full((150, 11), -7, cp.int32)
    _group_ops(n)(cp.asarray(a), out, grid=3)
    np.testing.assert_array_equal(out.get(), _expected(a, n))
    if n == 8:
        x = rng.standard_normal((1001, 77)).astype(np.float32)
        o, nrm = cp.full(x.shape, cp.nan, cp.float32), cp.full(1001, cp.nan, cp.float32)
        rownorm_group8(cp.asarray(x), o, nrm)
        ref = np.sqrt((x.astype(np.float64) ** 2).sum(1))
        np.testing.assert_allclose(nrm.get(), ref, rtol=1e-5)
        np.testing.assert_allclose(o.get(), x / ref[:, None], rtol=1e-5, atol=1e-7)


@simt.kernel(block=64)
def warp_extremes(a: simt.Array[f32], out: simt.DisjointSlice[f32, 2]):
    i = simt.thread.index_1d()
    v = a[i] if i < len(a) else f32(-1.0)
    hi = simt.warp.max(v)
    lo = simt.warp.min(v)
    with simt.unsafe():
        if i < len(a):
            out[i, 0] = hi
            out[i, 1] = lo


def test_full_warp_max_and_min_match_numpy(rng):
    a = rng.standard_normal(64).astype(np.float32)
    out = np.full((64, 2), np.nan, np.float32)
    warp_extremes.simulate(a, out, grid=1)
    w = a.reshape(2, 32)
    np.testing.assert_array_equal(out[:, 0], np.repeat(w.max(1), 32))
    np.testing.assert_array_equal(out[:, 1], np.repeat(w.min(1), 32))
