"""The tile kernels of examples/gpt2/tile_kernels.py (the linear layer's GEMMs, transposes, the bias
gradient, the head split / merge around flash attention, the clipping scale) against NumPy float64,
on the tile simulator and lowered as the sm_90 GPU build lowers them (tensor cores, run by the CPU
semantics of the inline PTX), at sizes that are not tile multiples (edge masking) and at the tiny
model's. GEMM tolerance: f32 inputs run as tf32 (10-bit mantissa), so |error| <= 2^-10 * sum_k |a||b|
(x3 for the rounding of both operands and the sum)."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import tile
from examples.gpt2 import tile_kernels as K

MODES = ["simulate", "lowered-sm_90"]


def run(kernel, mode, *args):
    if mode == "simulate":
        kernel.simulate(*args)
    else:
        kernel.simulate_lowered(*args, tensor_cores=True, arch="sm_90")


def tf32_bound(a, b):
    return 3 * 2.0 ** -10 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))


@pytest.fixture
def rng():
    return np.random.default_rng(30)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("m,k,n,tile_mn", [(100, 40, 72, (64, 64)), (128, 64, 192, (64, 64)), (130, 64, 136, (128, 128))])
def test_linear_layer_gemms_match_float64(mode, m, k, n, tile_mn, rng):
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    b, dy = rng.standard_normal(n).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    run(K.linear_bias, mode, x, w, b, tile.partition(out, tile_mn), 32)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + b
    assert (np.abs(out - ref) <= tf32_bound(x, w.T)).all()
    run(K.linear_nobias, mode, x, w, tile.partition(out, tile_mn), 32)
    assert (np.abs(out - (ref - b)) <= tf32_bound(x, w.T)).all()
    dx = np.full((m, k), np.nan, np.float32)
    run(K.matmul_nn, mode, dy, w, tile.partition(dx, (64, 64)), 32)
    assert (np.abs(dx - dy.astype(np.float64) @ w) <= tf32_bound(dy, w)).all()


@pytest.mark.parametrize("mode", MODES)
def test_transposes_and_the_bias_gradient_match_numpy(mode, rng):
    x = rng.standard_normal((100, 72)).astype(np.float32)
    xt = np.full((72, 100), np.nan, np.float32)
    run(K.transpose, mode, x, tile.partition(xt, (64, 64)))
    assert (xt == x.T).all()
    acc = rng.standard_normal((100, 72)).astype(np.float32)
    want = acc + x                       # out += src^T with src = x^T
    run(K.add_transposed, mode, np.ascontiguousarray(x.T), tile.partition(acc, (64, 64)))
    assert (acc == want).all()
    db = np.ones(72, np.float32)
    run(K.colsum_add, mode, x, tile.partition(db, (64,)), 32)
    np.testing.assert_allclose(db, 1 + x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_head_split_and_merge_are_the_bhtd_permutation(mode, rng):
    B, T, H, D = 2, 128, 2, 64
    C = H * D
    qkv = rng.standard_normal((B * T, 3 * C)).astype(np.float32)
    heads = qkv.reshape(B, T, 3, H, D).transpose(2, 0, 3, 1, 4).reshape(3, B * H * T, D)   # q, k, v stacks
    for which in range(3):
        got = np.zeros((B * H * T, D), np.float16)
        run(K.heads_from, mode, qkv, tile.partition(got, (64, D)), H, T, which * H)
        assert (got == heads[which].astype(np.float16)).all(), which
    merged = np.full((B * T, C), np.nan, np.float32)
    run(K.heads_to, mode, heads[2].copy(), tile.partition(merged, (64, D)), H, T)
    assert (merged == qkv[:, 2 * C:]).all()
    back = np.full_like(qkv, np.nan)
    run(K.heads_to_qkv, mode, *(h.copy() for h in heads), tile.partition(back, (64, D)), H, T)
    assert (back == qkv).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("norm,max_norm", [(4.0, 1.0), (0.5, 1.0)])
def test_clipping_scales_by_max_norm_over_the_norm_and_never_up(mode, norm, max_norm, rng):
    g = rng.standard_normal(5000).astype(np.float32)
    g0 = g.copy()
    run(K.clip_by_norm, mode, tile.partition(g, (2048,)), np.array([norm * norm], np.float32), max_norm)
    np.testing.assert_allclose(g, g0 * min(1.0, max_norm / (norm + 1e-6)), rtol=1e-6)
