"""Warp-per-row and block-per-row kernels written without `unsafe` for their outputs (the ownership forms
of dsl/frontend/ownership.py) give the NumPy float64 answer in the simulator and on the GPU, with the
grid derived from the contract (one row per warp / block), sizes that are not multiples of the warps per
block or of 32 columns, and launches the contract refuses leave every output untouched."""
from __future__ import annotations

import numpy as np
import pytest

from kernels_zoo import LN_EPS as EPS
from kernels_zoo import layernorm_warp

import bridge
from dsl import f32, simt


@simt.kernel(launch_bounds=256, requires=["x.shape == out.shape"])
def softmax_block(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r = simt.block.index_1d()                # this block owns row `r`
    with simt.unsafe():                      # shared scratch stays the author's to vouch for
        red = simt.shared.array(32, f32)
    lane = simt.threadIdx.x % 32
    wid = simt.threadIdx.x // 32
    nw = (simt.blockDim.x + 31) // 32
    m = f32(-3.0e38)
    for c in simt.block.threads(x.shape[1]):
        m = max(m, x[r, c])
    off = 16
    while off > 0:
        m = max(m, simt.warp.shfl_xor(m, off))
        off //= 2
    with simt.unsafe():
        if lane == 0:
            red[wid] = m
        simt.sync_threads()
        m = red[0]
        for k in range(1, nw):
            m = max(m, red[k])
        simt.sync_threads()
    s = f32(0.0)
    for c in simt.block.threads(x.shape[1]):
        s += simt.exp(x[r, c] - m)
    s = simt.warp.sum(s)
    with simt.unsafe():
        if lane == 0:
            red[wid] = s
        simt.sync_threads()
        s = f32(0.0)
        for k in range(nw):
            s += red[k]
    for c in simt.block.threads(x.shape[1]):
        out[r, c] = simt.exp(x[r, c] - m) / s


def _ln_inputs(rng, n=37, c=70):
    x = rng.standard_normal((n, c)).astype(np.float32) * 3 + 1
    w = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    return x, w, b


def _ln_reference(x, w, b):
    xd = x.astype(np.float64)
    m = xd.mean(1)
    r = 1 / np.sqrt(xd.var(1) + EPS)
    return (xd - m[:, None]) * r[:, None] * w + b, m, r


def _softmax_reference(x):
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("n, c", [(37, 70), (4, 32), (1, 5), (9, 300)])
def test_warp_per_row_layernorm_matches_float64_with_the_derived_grid(rng, n, c):
    x, w, b = _ln_inputs(rng, n, c)
    out, mean, rstd = (np.full(s, np.nan, np.float32) for s in ((n, c), n, n))
    layernorm_warp.simulate(x, w, b, out, mean, rstd)
    ref, m, r = _ln_reference(x, w, b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd, r, rtol=1e-4)


def test_a_grid_wider_than_the_rows_leaves_the_extra_warps_idle(rng):
    x, w, b = _ln_inputs(rng, 10, 33)
    out, mean, rstd = (np.full(s, np.nan, np.float32) for s in ((10, 33), 10, 10))
    layernorm_warp.simulate(x, w, b, out, mean, rstd, grid=7)      # 28 warps for 10 rows
    np.testing.assert_allclose(out, _ln_reference(x, w, b)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, c, block", [(6, 1000, 256), (3, 77, 96), (5, 31, 32)])
def test_block_per_row_softmax_matches_float64_for_any_block_size(rng, n, c, block):
    x = rng.standard_normal((n, c)).astype(np.float32) * 4
    out = np.full((n, c), np.nan, np.float32)
    softmax_block.simulate(x, out, block=block)
    np.testing.assert_allclose(out, _softmax_reference(x), rtol=2e-5, atol=1e-7)


def test_a_block_other_than_the_exact_one_is_refused_and_nothing_is_written(rng):
    x, w, b = _ln_inputs(rng)
    out, mean, rstd = (np.full(s, 7.0, np.float32) for s in ((37, 70), 37, 37))
    with pytest.raises(bridge.LaunchContractError, match="block"):
        layernorm_warp.simulate(x, w, b, out, mean, rstd, block=96)
    assert (out == 7.0).all() and (mean == 7.0).all() and (rstd == 7.0).all()


def test_a_row_count_mismatch_is_refused_and_nothing_is_written(rng):
    x, w, b = _ln_inputs(rng)
    out, mean, rstd = np.full((37, 70), 7.0, np.float32), np.full(36, 7.0, np.float32), \
        np.full(37, 7.0, np.float32)
    with pytest.raises(bridge.LaunchContractError, match="mean"):
        layernorm_warp.simulate(x, w, b, out, mean, rstd)
    assert (out == 7.0).all() and (mean == 7.0).all() and (rstd == 7.0).all()


def test_a_2d_launch_of_a_warp_owned_kernel_is_refused(rng):
    x, w, b = _ln_inputs(rng)
    out, mean, rstd = (np.full(s, 7.0, np.float32) for s in ((37, 70), 37, 37))
    with pytest.raises(bridge.LaunchContractError, match="along y"):
        layernorm_warp.simulate(x, w, b, out, mean, rstd, grid=(10, 2))
    assert (out == 7.0).all()


@pytest.mark.gpu
def test_warp_and_block_owned_kernels_on_the_gpu_match_float64(rng):
    import cupy as cp
    x, w, b = _ln_inputs(rng, 1003, 770)
    out, mean, rstd = (cp.full(s, cp.nan, cp.float32) for s in ((1003, 770), 1003, 1003))
    layernorm_warp(cp.asarray(x), cp.asarray(w), cp.asarray(b), out, mean, rstd)
    ref, m, r = _ln_reference(x, w, b)
    np.testing.assert_allclose(out.get(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(mean.get(), m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(rstd.get(), r, rtol=1e-4)
    xs = rng.standard_normal((257, 5003)).astype(np.float32)
    so = cp.full(xs.shape, cp.nan, cp.float32)
    softmax_block(cp.asarray(xs), so, block=224)
    np.testing.assert_allclose(so.get(), _softmax_reference(xs), rtol=2e-5, atol=1e-7)
    bad = cp.full((1003, 770), 7.0, cp.float32)
    with pytest.raises(bridge.LaunchContractError):
        layernorm_warp(cp.asarray(x), cp.asarray(w), cp.asarray(b), bad, mean[:5], rstd)
    assert bool((bad == 7.0).all())


@simt.kernel(block=128, requires=["x.shape == out.shape", "len(mean) == x.shape[0]"])
def center_warp_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], mean: simt.DisjointSlice[f32]):
    for r in simt.warp.rows(x.shape[0]):     # warps stride over the rows: any grid is correct
        s = f32(0.0)
        for c in simt.warp.lanes(x.shape[1]):
            s += x[r, c]
        m = simt.warp.sum(s) / f32(x.shape[1])
        for c in simt.warp.lanes(x.shape[1]):
            out[r, c] = x[r, c] - m
        mean[r] = m


@simt.kernel(launch_bounds=256, requires=["x.shape == out.shape"])
def double_block_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    for r in simt.block.rows(x.shape[0]):
        for c in simt.block.threads(x.shape[1]):
            out[r, c] = x[r, c] * 2.0


@simt.kernel(block=64, requires=["x.shape == out.shape"])
def negate_group_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    g = simt.warp.group(4)
    for r in g.rows(x.shape[0]):
        for c in g.lanes(x.shape[1]):
            out[r, c] = -x[r, c]


@pytest.mark.parametrize("grid", [None, 1, 2, 7, 40])
def test_rows_loops_give_every_row_one_owner_for_any_grid(rng, grid):
    x = rng.standard_normal((37, 70)).astype(np.float32)
    launch = {} if grid is None else {"grid": grid}
    out, mean = np.full_like(x, np.nan), np.full(37, np.nan, np.float32)
    center_warp_rows.simulate(x, out, mean, **launch)
    m = x.astype(np.float64).mean(1)
    np.testing.assert_allclose(out, x - m[:, None], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mean, m, rtol=1e-5, atol=1e-6)
    out2 = np.full_like(x, np.nan)
    double_block_rows.simulate(x, out2, block=96, **launch)
    np.testing.assert_array_equal(out2, x * 2)
    out3 = np.full_like(x, np.nan)
    negate_group_rows.simulate(x, out3, **launch)
    np.testing.assert_array_equal(out3, -x)


@pytest.mark.gpu
def test_rows_loops_on_the_gpu_for_a_small_and_the_derived_grid(rng):
    import cupy as cp
    x = rng.standard_normal((1001, 333)).astype(np.float32)
    m = x.astype(np.float64).mean(1)
    for launch in ({}, {"grid": 3}):
        out, mean = cp.full(x.shape, cp.nan, cp.float32), cp.full(1001, cp.nan, cp.float32)
        center_warp_rows(cp.asarray(x), out, mean, **launch)
        np.testing.assert_allclose(out.get(), x - m[:, None], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mean.get(), m, rtol=1e-5, atol=1e-6)
        out2 = cp.full(x.shape, cp.nan, cp.float32)
        double_block_rows(cp.asarray(x), out2, block=224, **launch)
        np.testing.assert_array_equal(out2.get(), x * 2)
