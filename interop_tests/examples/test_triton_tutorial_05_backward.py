"""Triton tutorial 05's layer-norm backward (examples/triton_tutorials/05_layer_norm.py): a block owns
R rows, keeps their dw and db in registers and writes its own partial row, with no atomics. dx, dw and
db match NumPy float64 (each row's explicit Jacobian for small sizes, the closed form, checked
against it, for the large ones) on both simulators with M not a multiple of R; the partial rows are
each block's own sums; rows past M write nothing; the PTX moves x, dy and dx in 16-byte runs with
one scalar load each of mean and rstd a row; and the GPU runs match the same references."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest

import bridge

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("triton_tutorial_05_bwd",
                                               ROOT / "examples" / "triton_tutorials" / "05_layer_norm.py")
LN = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(LN)
RUNNERS = ["simulate", "simulate_lowered"]


def np_layer_norm_bwd(x, w, dy, eps=1e-5):
    """(dx, dw, db) in float64: dx row by row as J^T dy with J the row's explicit Jacobian dy_j/dx_i."""
    xd, wd, g = (a.astype(np.float64) for a in (x, w, dy))
    n = x.shape[1]
    dx = np.empty_like(xd)
    xhat = np.empty_like(xd)
    for r in range(x.shape[0]):
        mu = xd[r].sum() / n
        rs = 1.0 / np.sqrt(((xd[r] - mu) ** 2).sum() / n + eps)
        xhat[r] = (xd[r] - mu) * rs
        jac = wd[:, None] * rs * (np.eye(n) - 1.0 / n - np.outer(xhat[r], xhat[r]) / n)   # [j, i]
        dx[r] = jac.T @ g[r]
    return dx, (g * xhat).sum(0), g.sum(0)


def np_xhat(x, eps=1e-5):
    xd = x.astype(np.float64)
    mu = xd.mean(1, keepdims=True)
    return (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(1, keepdims=True) + eps)


def np_layer_norm_bwd_closed(x, w, dy, eps=1e-5):
    """(dx, dw, db) in float64 by the closed form dx = rstd * (w*dy - mean(w*dy) - xhat * mean(w*dy*xhat))
    (the Jacobian form costs rows * n^2: minutes at n = 8199); checked against the Jacobian form below."""
    xd, wd, g = (a.astype(np.float64) for a in (x, w, dy))
    rs = 1.0 / np.sqrt(xd.var(1, keepdims=True) + eps)
    xhat = np_xhat(x, eps)
    wg = wd * g
    dx = rs * (wg - wg.mean(1, keepdims=True) - xhat * (wg * xhat).mean(1, keepdims=True))
    return dx, (g * xhat).sum(0), g.sum(0)


def test_the_closed_form_reference_equals_the_jacobian_one(rng):
    x = rng.standard_normal((7, 37)) * 2 + 0.5
    w, dy = rng.standard_normal(37), rng.standard_normal((7, 37))
    for a, b in zip(np_layer_norm_bwd_closed(x, w, dy), np_layer_norm_bwd(x, w, dy)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def bwd_case(rows, n, dtype, rng, r=None):
    """Inputs, the forward's f32 statistics, NaN outputs and a NaN (never zeroed) partial buffer."""
    x = (rng.standard_normal((rows, n)) * 2 + 0.5).astype(dtype)
    w, dy = rng.standard_normal(n).astype(dtype), rng.standard_normal((rows, n)).astype(dtype)
    xd = x.astype(np.float64)
    mean = xd.mean(1).astype(np.float32)
    rstd = (1.0 / np.sqrt(xd.var(1) + 1e-5)).astype(np.float32)
    outs = (np.full_like(x, np.nan), np.full(n, np.nan, dtype), np.full(n, np.nan, dtype))
    return (x, dy, w, mean, rstd), outs, np.full(LN.partials_shape(rows, n, r), np.nan, np.float32)


def assert_matches(got, want, rows, tol):
    np.testing.assert_allclose(got[0].astype(np.float64), want[0], rtol=tol, atol=tol)
    for g, ref in zip(got[1:], want[1:]):                # sums over the rows: the error grows with them
        np.testing.assert_allclose(g.astype(np.float64), ref, rtol=tol, atol=tol * np.sqrt(rows))


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,n,dtype,how,tol", [
    (37, 300, np.float32, {"rows": 8}, 1e-4),                  # 5 blocks, the last with 5 rows
    (37, 300, np.float32, {}, 1e-4),                           # the default R (1 at this size)
    (9, 1000, np.float16, {"rows": 4, "num_warps": 1}, 1e-2),  # f16 in and out, f32 partials, one warp
    (21, 200, np.float32, {"rows": 2, "block_m": 4, "block_n": 64}, 1e-4),   # dwdb: 11 partial rows in 3 chunks
    (21, 300, np.float16, {"rows": 8, "ahead": True}, 1e-2),   # the next row loaded ahead, past M at the end
])
def test_layer_norm_backward_matches_the_jacobian_in_float64(runner, rows, n, dtype, how, tol, rng):
    ins, outs, partials = bwd_case(rows, n, dtype, rng, how.get("rows"))
    for kernel, args in LN.backward_args(*ins, *outs, partials, **how):
        getattr(kernel, runner)(*args)
    assert_matches(outs, np_layer_norm_bwd(ins[0], ins[2], ins[1]), rows, tol)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,n,dtype,how,tol", [
    (1151, 1000, np.float32, {}, 1e-4),                        # R = 2 (rows_per_block)
    (1151, 1000, np.float16, {"rows": 32, "num_warps": 4}, 1e-2),   # 36 blocks, the last with 31 rows
    (300, 5003, np.float32, {"rows": 16}, 1e-4),               # N above 4096, not a multiple of 8
    (300, 5000, np.float16, {"rows": 64, "ahead": True}, 1e-2),
])
def test_layer_norm_backward_of_large_ragged_shapes_matches_float64(runner, rows, n, dtype, how, tol, rng):
    ins, outs, partials = bwd_case(rows, n, dtype, rng, how.get("rows"))
    for kernel, args in LN.backward_args(*ins, *outs, partials, **how):
        getattr(kernel, runner)(*args)
    assert_matches(outs, np_layer_norm_bwd_closed(ins[0], ins[2], ins[1]), rows, tol)


@pytest.mark.parametrize("ahead", [False, True])
def test_each_block_writes_its_own_rows_sums_into_its_own_partial_row(ahead, rng):
    rows, n, r = 27, 100, 8                              # blocks of rows 0-7, 8-15, 16-23, 24-26
    ins, outs, partials = bwd_case(rows, n, np.float32, rng, r)
    (kdx, args), _ = LN.backward_args(*ins, *outs, partials, rows=r, ahead=ahead)
    kdx.simulate_lowered(*args)
    g = ins[1].astype(np.float64)
    gx = g * np_xhat(ins[0])
    for b in range(4):
        np.testing.assert_allclose(partials[0, b], gx[b * r:(b + 1) * r].sum(0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(partials[1, b], g[b * r:(b + 1) * r].sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ahead", [False, True])
def test_rows_past_m_write_nothing(ahead, rng):
    """dx is a view of the first 13 rows of a NaN buffer of 16: the last block's tile covers rows 8-15,
    its chunk stores of rows 13-15 must leave the buffer's rows past the view untouched."""
    rows, n, r = 13, 64, 8
    ins, _, partials = bwd_case(rows, n, np.float32, rng, r)
    buf = np.full((16, n), np.nan, np.float32)
    dw, db = np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    (kdx, args), _ = LN.backward_args(*ins, buf[:rows], dw, db, partials, rows=r, ahead=ahead)
    kdx.simulate_lowered(*args)
    assert not np.isnan(buf[:rows]).any() and np.isnan(buf[rows:]).all()


def test_rows_per_block_fills_the_sms_registers_with_rows():
    """About 132 SMs x (8192 // N rounded up) blocks, R a power of two (rows_per_block's docstring)."""
    assert LN.rows_per_block(4096, 8192) == 32                 # 128 blocks
    assert LN.rows_per_block(4096, 1024) == 4                  # 1024 blocks: 8 rows of 1024 an SM
    assert LN.rows_per_block(4096, 16384) == 32                # one row an SM at most
    assert LN.rows_per_block(1151, 1000) == 2 and LN.rows_per_block(5, 1000) == 1
    assert LN.partials_shape(4096, 8192) == (2, 128, 8192) and LN.partials_shape(1151, 1000, 32) == (2, 36, 1000)
    assert [LN.dwdb_block_n(n) for n in (100, 1024, 4096, 8192, 16384)] == [32, 32, 128, 128, 128]


@pytest.mark.parametrize("change,needle", [
    ({"dy": np.zeros((4, 9), np.float32)}, r"dy: expected shape \(4, 10\)"),
    ({"mean": np.zeros(3, np.float32)}, r"mean: expected shape \(4,\)"),
    ({"partials": np.zeros((2, 3, 10), np.float32)}, r"partials: expected shape \(2, 4, 10\)"),
    ({"partials": np.zeros((2, 4, 10), np.float32), "rows": 2}, r"partials: expected shape \(2, 2, 10\)"),
    ({"rows": 3}, "rows: expected a power of two, got 3"),
    ({"x": np.zeros((4, LN.MAX_WHOLE_ROW + 1), np.float32)}, "x: expected 1 to 16384 columns"),
    ({"block_n": 100}, "block_n: expected a power of two"),
    ({"num_warps": 33}, "num_warps: expected 1 to 32 warps"),
])
def test_layer_norm_backward_refuses_bad_arguments_naming_them(change, needle):
    z = np.zeros
    kw = {"x": z((4, 10), np.float32), "dy": z((4, 10), np.float32), "w": z(10, np.float32),
          "mean": z(4, np.float32), "rstd": z(4, np.float32), "dx": z((4, 10), np.float32), "dw": z(10, np.float32),
          "db": z(10, np.float32), "partials": z((2, 4, 10), np.float32), **change}
    with pytest.raises(ValueError, match=needle):
        LN.backward_args(**kw)


def dx_ptx(n: int, **how) -> tuple:
    z = np.zeros
    h = [z((64, n), np.float16) for _ in range(3)]
    (k, args), _ = LN.backward_args(h[0], h[1], z(n, np.float16), z(64, np.float32), z(64, np.float32), h[2],
                                    z(n, np.float16), z(n, np.float16),
                                    z(LN.partials_shape(64, n, how.get("rows")), np.float32), **how)
    return k.compile(args, "sm_90"), k.ptx(*args, arch="sm_90")


@pytest.mark.parametrize("n,how,runs", [(1024, {}, 2), (8192, {"rows": 32}, 2), (1024, {"ahead": True}, 2)])
def test_dx_kernel_moves_rows_in_16_byte_runs_without_atomics(n, how, runs):
    """16 f16 a thread: x, dy and w in two v4 loads each (the kernel that loads ahead: x and dy twice,
    before and in the loop), dx in two v4 stores and the f32 partial rows in four each; mean and rstd
    one scalar load each a row; two block sums a row (two barriers each), no slow path."""
    from dsl.perf import from_metadata
    ck, ptx = dx_ptx(n, **how)
    loads = 3 * runs + (2 * runs if how.get("ahead") else 0)
    assert ptx.count("ld.global.nc.v4.b32") == loads and ptx.count("st.global.v4.b32") == runs
    assert ptx.count("st.global.v4.f32") == 2 * 2 * runs
    assert len(re.findall(r"ld\.global\.nc\.(?:b32|f32)\s", ptx)) == 2
    assert "b16" not in "".join(re.findall(r"(?:ld|st)\.global\S*", ptx))
    assert not re.search(r"^\s*(?:@\S+\s+)?(?:atom|red)\.", ptx, re.M) and ptx.count("bar.sync") == 4
    assert from_metadata(ck.metadata) == []


@pytest.mark.gpu
@pytest.mark.parametrize("rows,n,dtype,how,tol", [
    (1151, 1000, np.float32, {}, 1e-4),
    (1151, 1000, np.float16, {"rows": 32, "ahead": True}, 1e-2),
    (4096, 8192, np.float16, {}, 2e-2),
    (513, 8199, np.float16, {}, 2e-2),                     # 16384 wide: more state than registers (spills)
])
def test_gpu_layer_norm_backward_matches_float64(rows, n, dtype, how, tol, rng):
    ins, outs, partials = bwd_case(rows, n, dtype, rng, how.get("rows"))
    dev_outs = [bridge.from_host(a) for a in outs]
    LN.layer_norm_bwd(*(bridge.from_host(a) for a in ins), *dev_outs, bridge.from_host(partials), **how)
    assert_matches([d.to_host() for d in dev_outs], np_layer_norm_bwd_closed(ins[0], ins[2], ins[1]), rows, tol)


@pytest.mark.gpu
def test_gpu_layer_norm_backward_is_deterministic(rng):
    """No atomics: two runs give the same bits."""
    ins, outs, partials = bwd_case(4096, 1024, np.float16, rng)
    got = []
    for _ in range(2):
        dev_outs = [bridge.from_host(a) for a in outs]
        LN.layer_norm_bwd(*(bridge.from_host(a) for a in ins), *dev_outs, bridge.from_host(partials))
        got.append([d.to_host() for d in dev_outs])
    for a, b in zip(*got):
        assert np.array_equal(a, b)
