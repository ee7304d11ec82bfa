"""Arithmetic in the simulator is the GPU's: C-semantics integer // and %, wrap-around, PTX shift
clamping, saturating float->int casts, f16/bf16 rounded once from f32, NaN-ignoring min/max."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from sim_irkit import R, arr, bop, gid, guarded, kernel, load, params, store

from dsl.ir import nodes as N
from dsl.ir.types import BF16, F16, F32, F64, I8, I32, I64, U8, U32, ScalarType
from dsl.sim import arith, run


def binop_kernel(op: str, t: ScalarType, rt: ScalarType | None = None) -> N.Function:
    rt = rt or t
    a, b, out = params(("a", arr(t)), ("b", arr(rt)), ("out", arr(t, writable=True)))
    i = N.Var("i", I64)
    return kernel(f"k_{op}", [a, b, out], [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], bop(op, load(a, [R(i)], t), load(b, [R(i)], rt), t), mode="guarded")])])


def sim_binop(op, t, x, y, rt=None):
    out = np.zeros_like(x)
    run(binop_kernel(op, t, rt), [x, y, out], grid=-(-len(x) // 96), block=96)
    return out


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@pytest.mark.parametrize("t", [I32, I64, I8])
def test_int_floordiv_and_mod_truncate_toward_zero_bit_exact(rng, t):
    dt = arith.np_dtype(t)
    info = np.iinfo(dt)
    x = rng.integers(info.min + 1, info.max, 3001, dtype=dt)
    y = rng.integers(-50, 50, 3001, dtype=dt)
    y[y == 0] = 7
    q = sim_binop("floordiv", t, x, y)
    r = sim_binop("mod", t, x, y)
    ref_q = [c_div(int(a), int(b)) for a, b in zip(x, y)]
    ref_r = [int(a) - c_div(int(a), int(b)) * int(b) for a, b in zip(x, y)]
    assert q.tolist() == ref_q
    assert r.tolist() == ref_r
    assert (np.sign(r[r != 0]) == np.sign(x[r != 0])).all()     # remainder has the dividend's sign


def test_integer_add_mul_wrap_like_the_gpu(rng):
    x = rng.integers(-2**31, 2**31 - 1, 2000, dtype=np.int32)
    y = rng.integers(-2**31, 2**31 - 1, 2000, dtype=np.int32)
    wrap = [((int(a) * int(b) + 2**31) % 2**32) - 2**31 for a, b in zip(x, y)]
    assert sim_binop("mul", I32, x, y).tolist() == wrap
    u = rng.integers(0, 256, 500, dtype=np.uint8)
    v = rng.integers(0, 256, 500, dtype=np.uint8)
    assert sim_binop("add", U8, u, v).tolist() == [(int(a) + int(b)) % 256 for a, b in zip(u, v)]


def test_shifts_clamp_amounts_like_ptx(rng):
    x = rng.integers(-2**31, 2**31 - 1, 400, dtype=np.int32)
    s = rng.integers(-5, 45, 400, dtype=np.int32)
    left = sim_binop("lshift", I32, x, s)
    right = sim_binop("rshift", I32, x, s)
    for a, k, lv, rv in zip(x.tolist(), s.tolist(), left.tolist(), right.tolist()):
        k_eff = 32 if k < 0 or k >= 32 else k
        assert lv == (((a << k_eff) + 2**31) % 2**32) - 2**31
        assert rv == (a >> k_eff if k_eff < 32 else (-1 if a < 0 else 0))
    ux = rng.integers(0, 2**32 - 1, 300, dtype=np.uint32)
    us = rng.integers(0, 40, 300, dtype=np.uint32)
    assert sim_binop("rshift", U32, ux, us).tolist() == [
        (a >> k) if k < 32 else 0 for a, k in zip(ux.tolist(), us.tolist())]


def test_float_mod_is_fmod_and_floordiv_is_floor(rng):
    x = (rng.standard_normal(500) * 100).astype(np.float64)
    y = (rng.standard_normal(500) * 7).astype(np.float64)
    np.testing.assert_array_equal(sim_binop("mod", F64, x, y), [math.fmod(a, b) for a, b in zip(x, y)])
    np.testing.assert_array_equal(sim_binop("floordiv", F64, x, y), np.floor(x / y))


@pytest.mark.parametrize("t,dt", [(F16, np.float16), (BF16, ml_dtypes.bfloat16)])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv"])
def test_half_precision_ops_round_once_from_f32(rng, t, dt, op):
    x = (rng.standard_normal(700) * 30).astype(dt)
    y = (rng.standard_normal(700) * 3 + 0.1).astype(dt)
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.divide}[op]
    with np.errstate(over="ignore"):          # quotients beyond the f16 range round to inf
        exact = f(x.astype(np.float64), y.astype(np.float64))   # exact, or rounded once to 53 bits
        ref = exact.astype(np.float16) if t == F16 else arith.to_bf16(exact)   # then once to 11 / 8
    got = sim_binop(op, t, x, y)
    np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16))


def test_min_max_ignore_nan_like_ptx(rng):
    x = rng.standard_normal(200).astype(np.float32)
    y = rng.standard_normal(200).astype(np.float32)
    x[::7] = np.nan
    np.testing.assert_array_equal(sim_binop("min", F32, x, y), np.fmin(x, y))
    np.testing.assert_array_equal(sim_binop("max", F32, x, y), np.fmax(x, y))


def cast_kernel(src: ScalarType, dst: ScalarType) -> N.Function:
    a, out = params(("a", arr(src)), ("out", arr(dst, writable=True)))
    i = N.Var("i", I64)
    return kernel("cast", [a, out], [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], N.Cast(load(a, [R(i)], src), dst), mode="guarded")])])


def test_float_to_int_truncates_and_saturates_nan_to_zero(rng):
    x = np.concatenate([rng.standard_normal(300) * 1e10, [np.nan, np.inf, -np.inf, -2.9, 2.9, -0.5]])
    x = x.astype(np.float32)
    out = np.zeros(len(x), np.int32)
    run(cast_kernel(F32, I32), [x, out], grid=4, block=100)
    for v, got in zip(x.tolist(), out.tolist()):
        ref = 0 if math.isnan(v) else max(-2**31, min(2**31 - 1, int(v) if math.isfinite(v)
                                                      else (2**31 - 1 if v > 0 else -2**31)))
        assert got == ref, v
    u = np.zeros(len(x), np.uint8)
    run(cast_kernel(F32, U8), [x, u], grid=4, block=100)
    assert u[x < 0].max() == 0 and (u[x > 255] == 255).all()


def test_int_to_int_cast_wraps(rng):
    x = rng.integers(-2**40, 2**40, 300)
    out = np.zeros(300, np.int8)
    run(cast_kernel(I64, I8), [x, out], grid=3, block=128)
    assert out.tolist() == [((int(v) + 128) % 256) - 128 for v in x]


def test_sqrt_is_correctly_rounded_in_f32(rng):
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)
    fn = kernel("sq", [a, out], [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], N.Math("sqrt", [load(a, [R(i)])], F32), mode="guarded")])])
    x = (rng.random(1000) * 1e6).astype(np.float32)
    y = np.zeros_like(x)
    run(fn, [x, y], grid=8, block=128)
    np.testing.assert_array_equal(y, np.sqrt(x.astype(np.float64)).astype(np.float32))
