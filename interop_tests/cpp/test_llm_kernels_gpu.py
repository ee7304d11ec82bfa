"""cpp/kernels/llm/ on the GPU, launched through their embedded contracts: each kernel against a NumPy
float64 reference (llm_kit) on random inputs whose sizes are not multiples of the block (rows not a
multiple of the 8 warps a block, channels not a multiple of 32, lengths not a multiple of the packed
width), under the derived grid and under a smaller striding grid; and each kernel refusing a wrong
dtype or shape with its typed error, the poisoned output left unchanged. The CPU half (builds,
contracts) is test_llm_kernels.py."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import bridge
from interop_tests.cpp import llm_kit

pytestmark = pytest.mark.gpu
BF16 = ml_dtypes.bfloat16


def K(name: str):
    return llm_kit.kernel(name)


def _dev(a: np.ndarray) -> bridge.Array:
    return bridge.from_host(np.ascontiguousarray(a))


def _poisoned(rng, shape, dtype=np.float32) -> tuple[bridge.Array, np.ndarray]:
    poison = (rng.standard_normal(shape) * 1e3 + 12345.0).astype(dtype)
    return _dev(poison), poison


def _refused(launch, error, out: bridge.Array, poison: np.ndarray, *needles: str) -> None:
    with pytest.raises(error) as info:
        launch()
    for needle in needles:
        assert needle in str(info.value), str(info.value)
    np.testing.assert_array_equal(out.to_host(), poison)


def _close(got, ref, rtol: float, atol) -> None:
    """|got - ref| <= atol + rtol * |ref| elementwise; `atol` may be an array (an error bound per element:
    numpy's assert_allclose formats atol as a scalar, so it cannot take one)."""
    got = np.asarray(got).astype(np.float64)
    err = np.abs(got - ref)
    bad = err > np.asarray(atol) + rtol * np.abs(ref)
    assert got.shape == np.shape(ref), (got.shape, np.shape(ref))
    if bad.any():
        k = np.unravel_index(int(np.argmax(np.where(bad, err, -1))), got.shape)
        raise AssertionError(f"{int(bad.sum())} of {got.size} elements off; worst at {k}: got {got[k]!r}, "
                             f"expected {np.asarray(ref)[k]!r}, allowed {np.broadcast_to(atol, got.shape)[k]!r}")


def test_every_kernel_carries_its_contract():
    for kernels in bridge.cpp_kernels.LLM_KERNELS.values():
        for name in kernels:
            assert K(name).contract is not None and K(name).contract.kernel == name


# ---- layernorm ----------------------------------------------------------------------------------------
def _ln_inputs(rng, n, c):
    x = (rng.standard_normal((n, c)) * 2.0 + 0.5).astype(np.float32)
    w = rng.uniform(0.5, 1.5, c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize("n,c", [(1003, 100), (37, 768), (1, 1), (9, 4096)])
def test_layernorm_forward_matches_numpy(rng, n, c):
    x, w, b = _ln_inputs(rng, n, c)
    ref_out, ref_mean, ref_rstd = llm_kit.layernorm_forward(x, w, b)
    for grid in ((math.ceil(n / 8),), (5,)):          # a block per 8 rows, and 5 blocks striding
        out = _dev(np.full((n, c), np.nan, np.float32))
        mean, rstd = _dev(np.full(n, np.nan, np.float32)), _dev(np.full(n, np.nan, np.float32))
        K("layernorm_forward")[grid, 256](out, mean, rstd, _dev(x), _dev(w), _dev(b), n, c)
        _close(mean.to_host(), ref_mean, 1e-5, 1e-6)
        _close(rstd.to_host(), ref_rstd, 1e-4, 0)
        _close(out.to_host(), ref_out, 1e-4, 1e-4)


@pytest.mark.parametrize("n,c", [(1003, 100), (64, 768), (9, 4096), (1, 33)])
def test_layernorm_backward_accumulates_like_numpy(rng, n, c):
    x, w, _ = _ln_inputs(rng, n, c)
    _, mean, rstd = llm_kit.layernorm_forward(x, w, w)
    mean, rstd = mean.astype(np.float32), rstd.astype(np.float32)
    g = rng.standard_normal((n, c)).astype(np.float32)
    dinp0, dw0, db0 = (rng.standard_normal(s).astype(np.float32) for s in ((n, c), c, c))
    d_inp, d_w, d_b = llm_kit.layernorm_backward(g, x, w, mean, rstd)
    xhat_g = np.abs((x - mean[:, None]) * rstd[:, None] * g).astype(np.float64)
    for grid in ((math.ceil(n / 8),), (3,)):
        dinp, dw, db = _dev(dinp0), _dev(dw0), _dev(db0)
        K("layernorm_backward")[grid, 256](dinp, dw, db, _dev(g), _dev(x), _dev(w), _dev(mean), _dev(rstd), n, c)
        _close(dinp.to_host(), dinp0 + d_inp, 1e-4, 1e-4)
        _close(dw.to_host(), dw0 + d_w, 0, 1e-5 * (xhat_g.sum(axis=0) + np.abs(dw0)) + 1e-6)
        _close(db.to_host(), db0 + d_b, 0, 1e-5 * (np.abs(g).sum(axis=0) + np.abs(db0)) + 1e-6)


def test_layernorm_forward_refuses_float64_input(rng):
    n, c = 20, 40
    out, poison = _poisoned(rng, (n, c))
    x = _dev(rng.standard_normal((n, c)))
    vec = _dev(np.ones(c, np.float32))
    stats = _dev(np.zeros(n, np.float32)), _dev(np.zeros(n, np.float32))
    _refused(lambda: K("layernorm_forward")[(3,), 256](out, *stats, x, vec, vec, n, c), bridge.DTypeError, out,
             poison, "layernorm_forward: argument 'inp' (#3)")
    x32 = _dev(rng.standard_normal((n, c)).astype(np.float32))
    _refused(lambda: K("layernorm_forward")[(3,), 128](out, *stats, x32, vec, vec, n, c), bridge.BlockSizeError,
             out, poison, "layernorm_forward")


def test_layernorm_backward_refuses_more_channels_than_its_shared_sums(rng):
    n, c = 3, 4097
    dinp, poison = _poisoned(rng, (n, c))
    vec, rows = _dev(np.ones(c, np.float32)), _dev(np.ones(n, np.float32))
    x = _dev(rng.standard_normal((n, c)).astype(np.float32))
    grads = _dev(np.zeros(c, np.float32)), _dev(np.zeros(c, np.float32))
    _refused(lambda: K("layernorm_backward")[(1,), 256](dinp, *grads, x, x, vec, rows, rows, n, c),
             bridge.ShapeRelationError, dinp, poison, "C <= 4096")


# ---- GELU ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 8 * 333 + 5, 100_003])
def test_gelu_bf16_forward_and_backward_match_numpy(rng, n):
    x = (rng.standard_normal(n) * 2.5).astype(BF16)
    g = rng.standard_normal(n).astype(BF16)
    ref_y, ref_d = llm_kit.gelu(x), llm_kit.gelu_grad(x) * llm_kit.f64(g)
    for launch in ((None, None), ((2,), 64)):          # derived grid, and 2 blocks striding
        y, d = _dev(np.full(n, np.nan, BF16)), _dev(np.full(n, np.nan, BF16))
        fwd, bwd = K("gelu_forward_bf16"), K("gelu_backward_bf16")
        if launch[0] is None:
            fwd(y, _dev(x), n)
            bwd(d, _dev(x), _dev(g), n)
        else:
            fwd[launch](y, _dev(x), n)
            bwd[launch](d, _dev(x), _dev(g), n)
        _close(y.to_host(), ref_y, 2.0**-7, 2e-6)       # one bf16 rounding (2^-8) plus f32 math
        _close(d.to_host(), ref_d, 2.0**-7, 2e-6 + llm_kit.gelu_grad_f32_error(x, g))   # gelu' cancels


@pytest.mark.parametrize("n", [1, 1000, 100_003])
def test_gelu_f32_forward_and_backward_match_numpy(rng, n):
    x = (rng.standard_normal(n) * 2.5).astype(np.float32)
    g = rng.standard_normal(n).astype(np.float32)
    y, d = _dev(np.full(n, np.nan, np.float32)), _dev(np.full(n, np.nan, np.float32))
    K("gelu_forward_f32")(y, _dev(x), n)
    K("gelu_backward_f32")[(3,), 96](d, _dev(x), _dev(g), n)
    _close(y.to_host(), llm_kit.gelu(x), 1e-5, 2e-6)
    _close(d.to_host(), llm_kit.gelu_grad(x) * llm_kit.f64(g), 1e-5, 2e-6 + llm_kit.gelu_grad_f32_error(x, g))


def test_gelu_bf16_refuses_float32_input_and_a_misaligned_view(rng):
    n = 1001
    out, poison = _poisoned(rng, n, BF16)
    _refused(lambda: K("gelu_forward_bf16")(out, _dev(np.ones(n, np.float32)), n), bridge.DTypeError, out, poison,
             "gelu_forward_bf16: argument 'inp' (#1)")
    shifted = _dev(np.ones(n + 1, BF16))[1:]            # 2 bytes past a 16-byte boundary
    _refused(lambda: K("gelu_forward_bf16")(out, shifted, n), bridge.AlignmentError, out, poison,
             "gelu_forward_bf16: argument 'inp' (#1)")


def test_gelu_backward_bf16_refuses_a_shorter_dout(rng):
    n = 1001
    dinp, poison = _poisoned(rng, n, BF16)
    _refused(lambda: K("gelu_backward_bf16")(dinp, _dev(np.ones(n, BF16)), _dev(np.ones(n - 8, BF16)), n),
             bridge.ShapeRelationError, dinp, poison, "len(dout) == N")


def test_gelu_f32_refuses_bf16_input_and_a_shorter_dout(rng):
    n = 333
    out, poison = _poisoned(rng, n)
    _refused(lambda: K("gelu_forward_f32")(out, _dev(np.ones(n, BF16)), n), bridge.DTypeError, out, poison,
             "gelu_forward_f32: argument 'inp' (#1)")
    _refused(lambda: K("gelu_backward_f32")(out, _dev(np.ones(n, np.float32)), _dev(np.ones(n - 1, np.float32)), n),
             bridge.ShapeRelationError, out, poison, "len(dout) == N")


# ---- residual ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 3, 4 * 777 + 2, 100_003])
def test_residual_forward_is_the_rounded_float64_sum(rng, n):
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    ref = (a.astype(np.float64) + b).astype(np.float32)   # one f32 rounding of the exact sum
    for launch in (None, ((2,), 32)):
        out = _dev(np.full(n, np.nan, np.float32))
        kern = K("residual_forward") if launch is None else K("residual_forward")[launch]
        kern(out, _dev(a), _dev(b), n)
        np.testing.assert_array_equal(out.to_host(), ref)


def test_residual_forward_refuses_a_shorter_input_and_a_misaligned_output(rng):
    n = 1000
    out, poison = _poisoned(rng, n)
    a = _dev(np.ones(n, np.float32))
    _refused(lambda: K("residual_forward")(out, a, _dev(np.ones(n - 1, np.float32)), n), bridge.ShapeRelationError,
             out, poison, "len(inp2) == N")
    big, big_poison = _poisoned(rng, n + 1)
    _refused(lambda: K("residual_forward")(big[1:], a, a, n), bridge.AlignmentError, big, big_poison,
             "residual_forward: argument 'out' (#0)")


# ---- encoder -----------------------------------------------------------------------------------------------
def _tokens(rng, b, t, v, bad: bool) -> np.ndarray:
    ids = rng.integers(0, v, (b, t)).astype(np.int32)
    if bad:
        ids[0, 0], ids[-1, -1] = -1, v                  # outside [0, V): NaN rows, no dwte update
    return ids


ENCODER_SHAPES = [(3, 17, 100, 50, 20), (2, 5, 37, 11, 5), (1, 1, 1, 1, 1)]   # B, T, C, V, maxT


@pytest.mark.parametrize("b,t,c,v,max_t", ENCODER_SHAPES)
def test_encoder_forward_matches_numpy_and_marks_bad_tokens(rng, b, t, c, v, max_t):
    ids = _tokens(rng, b, t, v, bad=b * t > 1)
    wte, wpe = rng.standard_normal((v, c)).astype(np.float32), rng.standard_normal((max_t, c)).astype(np.float32)
    ref = llm_kit.encoder_forward(ids, wte, wpe).astype(np.float32)      # an f32 sum is correctly rounded
    for grid in ((math.ceil(b * t * c / 4 / 128),), (1,)):
        out = _dev(np.full((b, t, c), 7.0, np.float32))
        K("encoder_forward")[grid, 128](out, _dev(ids), _dev(wte), _dev(wpe), b, t, c, v)
        np.testing.assert_array_equal(out.to_host(), ref)


@pytest.mark.parametrize("b,t,c,v,max_t", ENCODER_SHAPES)
def test_encoder_backward_accumulates_like_numpy(rng, b, t, c, v, max_t):
    ids = _tokens(rng, b, t, v, bad=b * t > 1)
    ids[:, 0] = ids[0, 1] if t > 1 else ids[0, 0]       # a repeated token: atomics must add, not overwrite
    g = rng.standard_normal((b, t, c)).astype(np.float32)
    dwte0, dwpe0 = rng.standard_normal((v, c)).astype(np.float32), rng.standard_normal((max_t, c)).astype(np.float32)
    add_wte, add_wpe = llm_kit.encoder_backward(g, ids, v, max_t)
    dwte, dwpe = _dev(dwte0), _dev(dwpe0)
    K("encoder_backward")[(math.ceil(b * t * c / 256),), 256](dwte, dwpe, _dev(g), _dev(ids), b, t, c, v)
    bound = 1e-6 * (b * t) * (1 + np.abs(dwte0))
    _close(dwte.to_host(), dwte0 + add_wte, 0, bound)
    _close(dwpe.to_host(), dwpe0 + add_wpe, 0, 1e-6 * b * (1 + np.abs(dwpe0)))


def test_encoder_forward_refuses_int64_tokens_and_too_few_positions(rng):
    b, t, c, v = 2, 9, 16, 30
    out, poison = _poisoned(rng, (b, t, c))
    wte = _dev(np.ones((v, c), np.float32))
    ids = rng.integers(0, v, (b, t))
    _refused(lambda: K("encoder_forward")[(2,), 64](out, _dev(ids), wte, _dev(np.ones((t, c), np.float32)), b, t, c, v),
             bridge.DTypeError, out, poison, "encoder_forward: argument 'inp' (#1)")
    _refused(lambda: K("encoder_forward")[(2,), 64](out, _dev(ids.astype(np.int32)), wte,
                                                     _dev(np.ones((t - 1, c), np.float32)), b, t, c, v),
             bridge.ShapeRelationError, out, poison, "wpe.shape[0] >= T")


def test_encoder_backward_refuses_a_gradient_of_other_width(rng):
    b, t, c, v = 2, 9, 16, 30
    dwte, poison = _poisoned(rng, (v, c))
    ids = _dev(rng.integers(0, v, (b, t)).astype(np.int32))
    _refused(lambda: K("encoder_backward")[(2,), 64](dwte, _dev(np.zeros((t, c), np.float32)),
                                                      _dev(np.ones((b, t, c + 1), np.float32)), ids, b, t, c, v),
             bridge.ShapeRelationError, dwte, poison, "dout.shape[2] == C")


# ---- fused softmax + cross-entropy -------------------------------------------------------------------------
CE_SHAPES = [(37, 3001, 3008), (3, 50257, 50304), (5, 1, 1), (2, 1025, 1030)]   # N, V, Vp


def _ce_inputs(rng, n, v, vp):
    logits = (rng.standard_normal((n, vp)) * 4).astype(np.float32)
    logits[::2] += np.float32(300.0)                    # exp(300) overflows f32: only a max-shifting kernel survives
    logits[:, v:] = np.float32(1e4)                     # padding columns: must be ignored
    targets = rng.integers(0, v, n).astype(np.int32)
    if n > 2:
        targets[1] = v                                  # outside [0, V): NaN
    return logits, targets


@pytest.mark.parametrize("n,v,vp", CE_SHAPES)
def test_crossentropy_forward_matches_numpy(rng, n, v, vp):
    logits, targets = _ce_inputs(rng, n, v, vp)
    ref = llm_kit.crossentropy_forward(logits, targets, v)
    for grid in ((n,), (2,)):
        losses = _dev(np.full(n, 7.0, np.float32))
        K("crossentropy_forward")[grid, 1024](losses, _dev(logits), _dev(targets), n, v, vp)
        _close(losses.to_host(), ref, 1e-5, 1e-5)


@pytest.mark.parametrize("n,v,vp", CE_SHAPES)
def test_crossentropy_backward_matches_numpy(rng, n, v, vp):
    logits, targets = _ce_inputs(rng, n, v, vp)
    dlosses = rng.uniform(0.1, 2.0, n).astype(np.float32)
    ref = llm_kit.crossentropy_backward(logits, dlosses, targets, v)
    for grid in ((n,), (2,)):
        dlogits = _dev(np.full((n, vp), 7.0, np.float32))
        K("crossentropy_backward")[grid, 1024](dlogits, _dev(logits), _dev(dlosses), _dev(targets), n, v, vp)
        _close(dlogits.to_host(), ref, 1e-4, 1e-7)


def test_crossentropy_forward_refuses_int64_targets_and_a_vocabulary_wider_than_the_row(rng):
    n, vp = 4, 64
    losses, poison = _poisoned(rng, n)
    logits = _dev(np.zeros((n, vp), np.float32))
    _refused(lambda: K("crossentropy_forward")[(n,), 1024](losses, logits, _dev(np.zeros(n, np.int64)), n, 10, vp),
             bridge.DTypeError, losses, poison, "crossentropy_forward: argument 'targets' (#2)")
    _refused(lambda: K("crossentropy_forward")[(n,), 1024](losses, logits, _dev(np.zeros(n, np.int32)), n, vp + 1, vp),
             bridge.ShapeRelationError, losses, poison, "V <= Vp")


def test_crossentropy_backward_refuses_dlogits_of_another_shape(rng):
    n, vp = 4, 64
    dlogits, poison = _poisoned(rng, (n, vp - 1))
    _refused(lambda: K("crossentropy_backward")[(n,), 1024](dlogits, _dev(np.zeros((n, vp), np.float32)),
                                                             _dev(np.ones(n, np.float32)), _dev(np.zeros(n, np.int32)),
                                                             n, 10, vp),
             bridge.ShapeRelationError, dlogits, poison, "dlogits.shape == logits.shape")


# ---- AdamW and the global norm ------------------------------------------------------------------------------
def _f32(x: float) -> float:
    return float(np.float32(x))                         # the value the kernel receives


@pytest.mark.parametrize("n,t", [(1, 1), (100_003, 1), (4099, 7)])
def test_adamw_update_matches_numpy(rng, n, t):
    p0, g = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    m0 = (rng.standard_normal(n) * 0.1).astype(np.float32)
    v0 = rng.uniform(0.0, 0.05, n).astype(np.float32)
    hp = dict(lr=_f32(3e-4), beta1=_f32(0.9), beta2=_f32(0.95), eps=_f32(1e-8), weight_decay=_f32(0.1),
              grad_scale=_f32(0.5))
    ref_p, ref_m, ref_v = llm_kit.adamw(p0, m0, v0, g, t=t, **hp)
    p, m, v = _dev(p0), _dev(m0), _dev(v0)
    K("adamw_update")(p, m, v, _dev(g), n, *hp.values(), t)
    _close(m.to_host(), ref_m, 1e-5, 1e-7)
    _close(v.to_host(), ref_v, 1e-5, 1e-9)
    _close(p.to_host(), ref_p, 1e-6, 1e-6)
    assert not np.array_equal(p.to_host(), p0)          # the step moved the parameters


def test_adamw_update_refuses_step_zero_and_float64_gradients(rng):
    n = 500
    p, poison = _poisoned(rng, n)
    m, v = _dev(np.zeros(n, np.float32)), _dev(np.ones(n, np.float32))
    hp = (1e-3, 0.9, 0.999, 1e-8, 0.0, 1.0)
    _refused(lambda: K("adamw_update")(p, m, v, _dev(np.ones(n, np.float32)), n, *hp, 0), bridge.ShapeRelationError,
             p, poison, "t >= 1")
    _refused(lambda: K("adamw_update")(p, m, v, _dev(np.ones(n)), n, *hp, 1), bridge.DTypeError, p, poison,
             "adamw_update: argument 'grads' (#3)")
    np.testing.assert_array_equal(m.to_host(), np.zeros(n, np.float32))


@pytest.mark.parametrize("n", [1, 1000, 1_000_003])
def test_global_norm_squared_accumulates_the_sum_of_squares(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    start = np.float32(rng.uniform(0, 10))
    ref = float(start) + float(np.sum(x.astype(np.float64) ** 2))
    for grid in (None, (3,)):                           # derived (16 values a thread), and 3 blocks striding
        out = _dev(np.array([start], np.float32))
        kern = K("global_norm_squared") if grid is None else K("global_norm_squared")[grid, 512]
        kern(out, _dev(x), n)
        assert abs(float(out.to_host()[0]) - ref) <= 1e-5 * ref


def test_global_norm_squared_refuses_a_wide_output_and_another_block(rng):
    out, poison = _poisoned(rng, 2)
    x = _dev(np.ones(300, np.float32))
    _refused(lambda: K("global_norm_squared")(out, x, 300), bridge.ShapeRelationError, out, poison, "len(out) == 1")
    one, one_poison = _poisoned(rng, 1)
    _refused(lambda: K("global_norm_squared")[(3,), 256](one, x, 300), bridge.BlockSizeError, one, one_poison,
             "global_norm_squared")
