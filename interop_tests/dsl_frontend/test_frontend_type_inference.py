"""Type inference: weak literals (int → i64 alone, float → f32 alone, both adopt a typed operand),
NumPy-like promotion between typed operands, explicit casts, C integer division, math types."""
from __future__ import annotations

import numpy as np

from dsl import bf16, f16, f32, f64, i32, i64, simt, u32
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from interop_tests.dsl_frontend.frontend_helpers import nodes_of


def stored(kernel, *args) -> ir.Expr:
    """The value expression of the kernel's first store."""
    return nodes_of(kernel.build(*args), ir.Store)[0].value


def var(kernel, name, *args) -> ir.Var:
    return next(v for v in kernel.build(*args).locals if v.name == name)


def arr(dtype, n=37):
    return (np.arange(n) % 7 + 1).astype(dtype)


@simt.kernel
def k_int_literal(a: simt.Array[i32], out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    n = 5
    n = n + 1
    out[i] = a[i] + 1


def test_int_literal_alone_is_i64_and_adopts_the_typed_operand():
    a = arr(np.int32)
    assert var(k_int_literal, "n", a, a.copy()).type == irt.I64
    v = stored(k_int_literal, a, a.copy())
    assert isinstance(v, ir.BinOp) and v.type == irt.I32
    assert isinstance(v.rhs, ir.Const) and v.rhs.type == irt.I32 and v.rhs.value == 1


@simt.kernel
def k_float_literal(a: simt.Array[f64], out: simt.DisjointSlice[f64]):
    i = simt.thread.index_1d()
    y = 2.5
    y = y * 2
    out[i] = a[i] * 0.5


def test_float_literal_alone_is_f32_and_adopts_a_float_operand():
    a = arr(np.float64)
    assert var(k_float_literal, "y", a, a.copy()).type == irt.F32
    v = stored(k_float_literal, a, a.copy())
    assert v.type == irt.F64 and v.rhs.type == irt.F64 and v.rhs.value == 0.5


@simt.kernel
def k_int_times_float_literal(a: simt.Array[i32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.5


def test_float_literal_with_an_int_operand_computes_in_f32():
    v = stored(k_int_times_float_literal, arr(np.int32), arr(np.float32))
    assert v.type == irt.F32
    assert isinstance(v.lhs, ir.Cast) and v.lhs.type == irt.F32 and v.lhs.operand.type == irt.I32


@simt.kernel
def k_mixed(a: simt.Array[i32], b: simt.Array[i64], out: simt.DisjointSlice[i64]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@simt.kernel
def k_signed_unsigned(a: simt.Array[i32], b: simt.Array[u32], out: simt.DisjointSlice[i64]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@simt.kernel
def k_halves(a: simt.Array[f16], b: simt.Array[bf16], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


def test_typed_operands_promote_like_numpy():
    v = stored(k_mixed, arr(np.int32), arr(np.int64), arr(np.int64))
    assert v.type == irt.I64 and isinstance(v.lhs, ir.Cast) and v.lhs.operand.type == irt.I32
    v = stored(k_signed_unsigned, arr(np.int32), arr(np.uint32), arr(np.int64))
    assert v.type == irt.I64
    import ml_dtypes
    v = stored(k_halves, arr(np.float16), arr(ml_dtypes.bfloat16), arr(np.float32))
    assert v.type == irt.F32


@simt.kernel
def k_f16_scale(a: simt.Array[f16], out: simt.DisjointSlice[f16]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0


def test_f16_with_a_float_literal_stays_f16():
    v = stored(k_f16_scale, arr(np.float16), arr(np.float16))
    assert v.type == irt.F16 and v.rhs.type == irt.F16


@simt.kernel
def k_truediv(a: simt.Array[i32], b: simt.Array[i64], out: simt.DisjointSlice[f64]):
    i = simt.thread.index_1d()
    x = a[i] / 2
    out[i] = b[i] / 3


def test_true_division_of_ints_gives_f32_or_f64_for_64_bit():
    fn = k_truediv.build(arr(np.int32), arr(np.int64), arr(np.float64))
    assert next(v for v in fn.locals if v.name == "x").type == irt.F32
    v = nodes_of(fn, ir.Store)[0].value
    assert v.type == irt.F64 and v.op == "truediv"


@simt.kernel
def k_cdiv(a: simt.Array[i32], out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    out[i] = a[i] // (-7 // 2) + a[i] % 3 + (-7 % 2)


def test_integer_floordiv_and_mod_are_c_semantics_also_when_folded():
    v = stored(k_cdiv, arr(np.int32), arr(np.int32))
    consts = [n.value for n in _walk(v) if isinstance(n, ir.Const)]
    assert -3 in consts          # C: -7 / 2 truncates to -3 (Python would give -4)
    assert -1 in consts          # C: -7 % 2 == -1 (Python would give 1)
    ops = {n.op for n in _walk(v) if isinstance(n, ir.BinOp)}
    assert {"floordiv", "mod"} <= ops


def _walk(e):
    from dsl.ir.verify import walk
    return list(walk(e))


@simt.kernel
def k_casts(a: simt.Array[f32], out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    out[i] = i32(a[i]) + i32(f32(3))


def test_casts_are_explicit_nodes_and_constants_fold():
    v = stored(k_casts, arr(np.float32), arr(np.int32))
    assert isinstance(v.lhs, ir.Cast) and v.lhs.type == irt.I32
    assert isinstance(v.rhs, ir.Const) and v.rhs.value == 3 and v.rhs.type == irt.I32


@simt.kernel
def k_widen(a: simt.Array[f32], out: simt.DisjointSlice[f64]):
    i = simt.thread.index_1d()
    acc: f64 = 0
    for j in range(len(a)):
        acc += a[j]
    out[i] = acc


def test_annotated_local_accepts_widening_updates():
    fn = k_widen.build(arr(np.float32), arr(np.float64))
    assert next(v for v in fn.locals if v.name == "acc").type == irt.F64
    upd = [s for s in nodes_of(fn, ir.Assign) if s.var.name == "acc"][-1]
    assert upd.value.type == irt.F64 and isinstance(upd.value.rhs, ir.Cast)


@simt.kernel
def k_compare(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = 1.0 if 0 < a[i] < 3 else 2.0


def test_chained_comparison_is_a_short_circuit_and():
    v = stored(k_compare, arr(np.float32), arr(np.float32))
    assert isinstance(v, ir.IfExp) and isinstance(v.cond, ir.Logical) and v.cond.op == "and"
    assert all(isinstance(x, ir.Compare) for x in (v.cond.lhs, v.cond.rhs))
    assert v.cond.lhs.lhs.type == irt.F32          # the literal 0 took the array's type


@simt.kernel
def k_math(a: simt.Array[i32], h: simt.Array[f16], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    x = simt.sqrt(a[i])
    y = simt.exp(h[i])
    out[i] = x


def test_math_computes_in_f32_f64_and_converts_halves_back():
    fn = k_math.build(arr(np.int32), arr(np.float16), arr(np.float32))
    x = next(s for s in nodes_of(fn, ir.Assign) if s.var.name == "x").value
    assert isinstance(x, ir.Math) and x.fn == "sqrt" and x.type == irt.F32
    y = next(s for s in nodes_of(fn, ir.Assign) if s.var.name == "y").value
    assert isinstance(y, ir.Cast) and y.type == irt.F16
    assert isinstance(y.operand, ir.Math) and y.operand.type == irt.F32


@simt.kernel
def k_thread_arith(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    j = i * 2
    j = j + 1
    out[i] = a[i]


def test_thread_index_arithmetic_gives_a_plain_int():
    fn = k_thread_arith.build(arr(np.float32), arr(np.float32))
    j = next(v for v in fn.locals if v.name == "j")
    assert j.type == irt.I64
    first = next(s for s in nodes_of(fn, ir.Assign) if s.var is j)
    assert isinstance(first.value, ir.BinOp)
    assert isinstance(first.value.lhs, ir.TupleGet)          # the component, read as an int
    assert isinstance(first.value.lhs.value, ir.ThreadIndexValue)


def test_constant_folding_of_integer_division_matches_c_and_the_simulator():
    """Folded `//` and `%` (front end) and run-time `//` and `%` (simulator) agree with C."""
    from hypothesis import given, settings, strategies as st

    from dsl.frontend.typing_rules import c_floordiv, c_mod

    @settings(max_examples=300, deadline=None)
    @given(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1).filter(lambda b: b != 0))
    def check(a, b):
        q = int(np.trunc(np.float64(a) / np.float64(b))) if abs(a) < 2**52 else None
        assert c_floordiv(a, b) * b + c_mod(a, b) == a
        assert abs(c_mod(a, b)) < abs(b) and (c_mod(a, b) == 0 or (c_mod(a, b) < 0) == (a < 0))
        if q is not None and abs(a) < 2**50:
            assert c_floordiv(a, b) == q
    check()
    rng = np.random.default_rng(7)
    a = rng.integers(-1000, 1000, 301).astype(np.int32)
    b = rng.integers(1, 50, 301).astype(np.int32) * rng.choice([-1, 1], 301).astype(np.int32)
    out = np.full(301, 12345, np.int32)
    k_divmod.simulate(a, b, out)
    ref = np.array([c_floordiv(int(x), int(y)) * 1000 + c_mod(int(x), int(y)) for x, y in zip(a, b)])
    np.testing.assert_array_equal(out, ref)


@simt.kernel
def k_divmod(a: simt.Array[i32], b: simt.Array[i32], out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    out[i] = (a[i] // b[i]) * 1000 + a[i] % b[i]
