"""The tile kernels of examples/gpt2/tile_kernels.py (the linear layer's GEMMs in the layouts the data
has: NT forward, TN weight gradient with and without split K, NN / transposed-weight input gradient;
the bias gradient, the head split / merge around flash attention, the clipping scale) against NumPy float64,
on the tile simulator and lowered as the sm_90 GPU build lowers them (tensor cores, run by the CPU
semantics of the inline PTX), at sizes that are not tile multiples (edge masking) and at the tiny
model's. GEMM tolerance: f32 inputs run as tf32 (10-bit mantissa), so |error| <= 2^-10 * sum_k |a||b|
(x3 for the rounding of both operands and the sum)."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.perf import from_metadata
from dsl.tile import compile as tile_compile
from examples.gpt2 import kernels_dsl
from examples.gpt2 import tile_kernels as K
from examples.gpt2.arrays import array_lib
from examples.gpt2.config import config
from examples.gpt2.runtime import SIM_SM_COUNT, Runtime

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
def test_transpose_and_the_bias_gradient_match_numpy(mode, rng):
    x = rng.standard_normal((100, 72)).astype(np.float32)
    xt = np.full((72, 100), np.nan, np.float32)
    run(K.transpose, mode, x, tile.partition(xt, (64, 64)))
    assert (xt == x.T).all()
    db = np.ones(72, np.float32)
    run(K.colsum_add, mode, x, tile.partition(db, (64,)), 32)
    np.testing.assert_allclose(db, 1 + x.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-5)


# (tokens N, OC, C, tile): ragged in every dimension; 128-row tiles are the sm_90 tf32 wgmma loop's
TN_CASES = [(200, 136, 72, (128, 128)), (100, 72, 40, (64, 64)), (520, 136, 200, (128, 128))]


def dw_kernel_args(layout, dy, x):
    """The operands of the weight-gradient GEMM in `layout` (kernels_dsl.DW_LAYOUTS): as stored, with
    X^T written, or with dY^T and X^T written; and its one-pass and split-K kernels."""
    t = np.ascontiguousarray
    return {"stored": ((dy, x), K.matmul_tn_acc, K.matmul_tn_split),
            "xt": ((dy, t(x.T)), K.matmul_tn_acc_xt, K.matmul_tn_split_xt),
            "tt": ((t(dy.T), t(x.T)), K.matmul_nt_acc, K.matmul_nt_split)}[layout]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n,oc,c,tile_mn", TN_CASES)
@pytest.mark.parametrize("layout", kernels_dsl.DW_LAYOUTS)
def test_the_weight_gradient_accumulates_in_every_operand_layout(mode, n, oc, c, tile_mn, layout, rng):
    """dW += dY^T X with A = dY^T stored K x M and B = X stored K x N (TN: no transposed copy), with X^T
    written first (B K-major), or with dY^T and X^T both written (the NT loop)."""
    dy, x = rng.standard_normal((n, oc)).astype(np.float32), rng.standard_normal((n, c)).astype(np.float32)
    dw0 = rng.standard_normal((oc, c)).astype(np.float32)
    dw = dw0.copy()
    ab, acc, _ = dw_kernel_args(layout, dy, x)
    run(acc, mode, *ab, tile.partition(dw, tile_mn), 32)
    want = dw0 + dy.T.astype(np.float64) @ x
    assert (np.abs(dw - want) <= tf32_bound(dy.T, x) + 1e-5 * np.abs(dw0)).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("splits", [2, 3])
@pytest.mark.parametrize("layout", kernels_dsl.DW_LAYOUTS)
def test_split_k_weight_gradient_sums_every_k_tile_once(mode, splits, layout, rng):
    """520 tokens = 17 k tiles of 32: splits of 9 + 8 (2) or 6 + 6 + 5 (3); the partial buffer's
    padding rows (OC 136 -> 256 a split) are never added into dW."""
    n, oc, c, bm = 520, 136, 72, 128
    dy, x = rng.standard_normal((n, oc)).astype(np.float32), rng.standard_normal((n, c)).astype(np.float32)
    partial = np.full((splits * 256, c), np.nan, np.float32)
    ab, _, split = dw_kernel_args(layout, dy, x)
    run(split, mode, *ab, tile.partition(partial, (bm, 128)), 32)
    dw0 = rng.standard_normal((oc, c)).astype(np.float32)
    dw = dw0.copy()
    run(K.add_splits, mode, partial, tile.partition(dw, (64, 64)), splits)
    want = dw0 + dy.T.astype(np.float64) @ x
    assert (np.abs(dw - want) <= tf32_bound(dy.T, x) + 1e-5 * np.abs(dw0)).all()


@pytest.mark.parametrize("dx_layout,dw_layout", [("wt", "stored"), ("nn", "stored"), ("wt", "xt"), ("wt", "tt")])
@pytest.mark.parametrize("n", [200, 520], ids=["one-k-range", "k-split-in-2"])
def test_the_linear_layers_backward_op_matches_float64(dx_layout, dw_layout, n, rng):
    """kernels_dsl.linear_backward (matmul_backward's body) as the step calls it: dX = dY W (W^T written then NT, or W as
    stored), dW += dY^T X (TN; at 520 tokens split in two over the 2 tiles of dW), db += rows of dY."""
    oc, c = 136, 72
    assert kernels_dsl.dw_splits(2, -(-n // 32), SIM_SM_COUNT) == (1 if n == 200 else 2)
    rt = Runtime(array_lib("numpy", "cpu"), config("tiny"), simulate=True)
    dy, x = rng.standard_normal((n, oc)).astype(np.float32), rng.standard_normal((n, c)).astype(np.float32)
    w = rng.standard_normal((oc, c)).astype(np.float32)
    dw0, db0 = rng.standard_normal((oc, c)).astype(np.float32), rng.standard_normal(oc).astype(np.float32)
    dx, dw, db = np.full((n, c), np.nan, np.float32), dw0.copy(), db0.copy()
    kernels_dsl.linear_backward(rt, dx, dw, db, dy, x, w, dx_layout, dw_layout)
    assert (np.abs(dx - dy.astype(np.float64) @ w) <= tf32_bound(dy, w)).all()
    assert (np.abs(dw - (dw0 + dy.T.astype(np.float64) @ x)) <= tf32_bound(dy.T, x) + 1e-5 * np.abs(dw0)).all()
    np.testing.assert_allclose(db, db0 + dy.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("out_tile", [(128, 128), (128, 256)], ids=["gemm_tile", "wide"])
@pytest.mark.parametrize("bias", [True, False])
def test_the_linear_forward_matches_float64_with_either_output_tile(out_tile, bias, rng):
    """kernels_dsl.linear_forward with the step's tiles and the wide ones benchmarks/gpt2_step.py's
    per-op table times beside them (WIDE_TILE), at sizes that are no multiple of either; lowered as the
    sm_90 build lowers it."""
    n, c, oc = 200, 96, 300
    x, w = rng.standard_normal((n, c)).astype(np.float32), rng.standard_normal((oc, c)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32) if bias else None
    out = np.full((n, oc), np.nan, np.float32)
    rt = Runtime(array_lib("numpy", "cpu"), config("tiny"), simulate=True)
    kernels_dsl.linear_forward(rt, out, x, w, b, out_tile)
    ref = x.astype(np.float64) @ w.T.astype(np.float64) + (0 if b is None else b)
    assert (np.abs(out - ref) <= tf32_bound(x, w.T)).all()
    wide = np.full((n, oc), np.nan, np.float32)
    (K.linear_bias if bias else K.linear_nobias).simulate_lowered(
        *((x, w) + ((b,) if bias else ()) + (tile.partition(wide, out_tile), 32)), tensor_cores=True, arch="sm_90")
    assert (np.abs(wide - ref) <= tf32_bound(x, w.T)).all()


def test_an_unknown_weight_gradient_layout_is_refused_before_any_launch(rng):
    rt = Runtime(array_lib("numpy", "cpu"), config("tiny"), simulate=True)
    dy, x = rng.standard_normal((200, 136)).astype(np.float32), rng.standard_normal((200, 72)).astype(np.float32)
    dw = np.full((136, 72), np.nan, np.float32)
    with pytest.raises(ValueError, match=r"layout: expected one of 'stored', 'xt', 'tt', got 'x'"):
        kernels_dsl.weight_grad(rt, dw, dy, x, "x")
    assert np.isnan(dw).all()


@pytest.mark.parametrize("layout", kernels_dsl.DW_LAYOUTS)
def test_a_weight_gradient_of_another_shape_is_refused_even_where_k_would_split(layout, rng):
    """At 520 tokens dW's K splits in two (the split kernels' contracts cannot relate dW to dY), so
    shapes that disagree go to the one-pass kernel as stored, whose contract names the relation;
    nothing runs (no transpose into scratch either)."""
    import bridge
    rt = Runtime(array_lib("numpy", "cpu"), config("tiny"), simulate=True)
    dy, x = rng.standard_normal((520, 136)).astype(np.float32), rng.standard_normal((520, 72)).astype(np.float32)
    dw = np.full((128, 72), np.nan, np.float32)                     # 8 rows short of dY's 136 columns
    assert kernels_dsl.dw_splits(2, 17, SIM_SM_COUNT) == 2
    with pytest.raises(bridge.ShapeRelationError) as err:
        kernels_dsl.weight_grad(rt, dw, dy, x, layout)
    assert err.value.kernel == "matmul_tn_acc" and "dout.shape[1] == out.shape[0]" in str(err.value)
    assert np.isnan(dw).all()
    assert not rt._scratch, list(rt._scratch)


GEMMS = {"linear_bias": "NT", "linear_nobias": "NT", "matmul_tn_acc": "TN", "matmul_tn_split": "TN",
         "matmul_tn_acc_xt": "TN", "matmul_tn_split_xt": "TN", "matmul_nt_acc": "NT", "matmul_nt_split": "NT",
         "matmul_nn": "NN"}


def _gemm_args(name):
    z = lambda *shape: np.zeros(shape, np.float32)          # noqa: E731
    out = tile.partition(z(512 if "_split" in name else 256, 256), (128, 128))
    return (z(256, 256), z(256, 256)) + ((z(256),) if name == "linear_bias" else ()) + (out, 32)


@pytest.mark.parametrize("name", GEMMS)
def test_the_linear_layers_gemms_lower_to_tf32_wgmma_on_sm_90_without_spills(name):
    """At the step's 128 x 128 tiles every GEMM but the NN one (mma.sync unless KB_TILE_TF32_TRANSPOSE)
    runs on tf32 warpgroup MMA: the TN ones through the transposing register stage, with no fma-product
    slow path; ptxas (when installed) assembles them without spills."""
    ck = getattr(K, name).compile(_gemm_args(name), "sm_90")
    on_wgmma = "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ck.ptx
    assert on_wgmma == (GEMMS[name] != "NN" or tile_compile.tf32_transpose_enabled()), name
    assert not [s for s in from_metadata(ck.metadata) if s.kind == "fma-product"]
    if find_ptxas() is not None:
        usage, _ = assemble(ck.ptx, ck.metadata["arch"])
        assert usage and usage[0].spill_stores == 0 and usage[0].spill_loads == 0, usage


def test_forward_gemms_take_wide_tiles_only_where_their_grid_fills_its_waves():
    """GPT-2 small on an H200 (132 SMs), N = 8192 tokens: OC 3072 (5.8 waves of 128 x 256) and the
    classifier (95.5) go wide; qkv's 2304 (4.4 waves: 87 % of the last) and 768 (1.5) stay 128 x 128;
    a side under 512 takes 64 x 64."""
    got = {oc: kernels_dsl.gemm_tile(8192, oc, 132) for oc in (768, 2304, 3072, 50304)}
    assert got == {768: (128, 128), 2304: (128, 128), 3072: (128, 256), 50304: (128, 256)}
    assert kernels_dsl.gemm_tile(8192, 500, 132) == kernels_dsl.gemm_tile(256, 8192, 132) == (64, 64)


def test_dw_split_counts_fill_an_h200s_waves_at_gpt2_small_shapes():
    """K = 8192 tokens = 256 k tiles, 128 x 128 tiles of dW, 132 SMs: the 768 x 768 weight's 36 tiles
    and the 3072 x 768 ones' 144 take 3 splits (108 / 432 blocks: 82% of their waves), qkv's 108 tiles
    fill 82% alone, the classifier's 2358 99%; a short K is never split below 8 k tiles a split."""
    tiles = {"attproj": 6 * 6, "fc": 24 * 6, "qkv": 18 * 6, "classifier": 393 * 6}
    got = {k: kernels_dsl.dw_splits(t, 256, 132) for k, t in tiles.items()}
    assert got == {"attproj": 3, "fc": 3, "qkv": 1, "classifier": 1}
    assert kernels_dsl.dw_splits(36, 15, 132) == 1 and kernels_dsl.dw_splits(1, 32, 132) == 4


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
