"""Type rules of the SIMT language: weak literals, binary promotion, implicit conversions.

- An int literal alone is i64; next to a typed operand it takes that operand's type (it must fit).
- A float literal alone is f32; next to a float operand it takes that type; next to an int, f32.
- Two typed operands promote like NumPy (dsl.ir.types.promote).
- Implicit conversion (assignment, store, argument) only widens: `promote(target, value) == target`.
"""
from __future__ import annotations

import math

import numpy as np

from dsl.errors import DslCompileStageError
from dsl.frontend.values import Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt

INT_RANGES = {t: ((-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.kind == "int"
                  else (0, (1 << t.bits) - 1))
              for t in irt.SCALARS.values() if t.is_int}


class TypeRuleError(DslCompileStageError):
    """Raised by these rules; the lowering turns it into a DslCompileError at the right node."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message, self.hint = message, hint


def fits(value: object, t: irt.ScalarType) -> bool:
    if t.is_int:
        lo, hi = INT_RANGES[t]
        return isinstance(value, (int, bool)) and lo <= int(value) <= hi
    return True


def const_of(value: object, t: irt.ScalarType, loc: ir.Loc) -> ir.Const:
    """A typed constant holding `value` converted to `t` (caller checked it fits)."""
    if t.kind == "bool":
        return ir.Const(bool(value), t, loc)
    if t.is_int:
        if isinstance(value, float):
            value = math.trunc(value)
        return ir.Const(int(value), t, loc)
    if t.name == "f32":
        return ir.Const(float(np.float32(value)), t, loc)
    if t.name == "f16":
        return ir.Const(float(np.float16(value)), t, loc)
    return ir.Const(float(value), t, loc)


def retype_weak(v: Val, t: irt.ScalarType) -> ir.Expr:
    """A weak literal adopting type `t` (error when an int literal does not fit an int type)."""
    value = v.const_value
    if t.is_int and isinstance(value, float):
        raise TypeRuleError(f"float literal {value!r} used where {t} is expected",
                            "write an integer, or cast the other operand: f32(...)")
    if not fits(value, t):
        raise TypeRuleError(f"literal {value!r} does not fit in {t}",
                            "use a wider type, e.g. i64(...), for the other operand")
    return const_of(value, t, v.expr.loc)


def cast(expr: ir.Expr, t: irt.ScalarType, loc: ir.Loc) -> ir.Expr:
    """Explicit conversion (no-op when already `t`); constants are folded."""
    if expr.type == t:
        return expr
    if isinstance(expr, ir.Const):
        value = expr.value
        if t.is_int and isinstance(value, float):
            if math.isfinite(value):
                value = math.trunc(value)
            else:
                return ir.Cast(expr, t, loc)
        if t.is_int and fits(int(value), t) or not t.is_int:
            return const_of(value, t, loc)
    return ir.Cast(expr, t, loc)


def unify(a: Val, b: Val) -> irt.ScalarType:
    """The common type of two operands of an arithmetic/comparison op (weak rules above)."""
    ta, tb = a.scalar, b.scalar
    if ta is None or tb is None:
        raise TypeRuleError("operand is not a number")
    if a.weak and b.weak:
        return irt.F32 if (ta.is_float or tb.is_float) else irt.I64
    if a.weak or b.weak:
        weak, typed = (a, b) if a.weak else (b, a)
        tt = typed.scalar
        assert tt is not None
        if tt.kind == "bool":
            return weak.scalar  # type: ignore[return-value]
        if weak.scalar.is_float and not tt.is_float:  # type: ignore[union-attr]
            return irt.F32
        return irt.compute_type(tt)
    return irt.promote(ta, tb)


def convert(v: Val, t: irt.ScalarType, loc: ir.Loc) -> ir.Expr:
    """Operand conversion to the unified type `t` (weak literal retype or value cast)."""
    if v.weak:
        return retype_weak(v, t) if t.is_int or t.kind == "bool" else const_of(v.const_value, t, loc)
    return cast(v.expr, t, loc)


def implicit(v: Val, t: irt.ScalarType, loc: ir.Loc, what: str) -> ir.Expr:
    """Conversion for assignment/store/argument: weak literals adapt, typed values only widen."""
    vt = v.scalar
    if vt is None:
        raise TypeRuleError(f"{what} needs a {t} value, got {v.type!r}")
    if v.weak:
        return retype_weak(v, t) if t.is_int else const_of(v.const_value, t, loc)
    if vt == t:
        return v.expr
    if t.kind != "bool" and irt.promote(t, vt) == t and not (vt.is_float and t.is_int):
        return cast(v.expr, t, loc)
    raise TypeRuleError(f"{what} has type {t}, but the value has type {vt}",
                        f"convert explicitly, e.g. {t.name if t.name != 'bool' else 'boolean'}(...)")


def division_float_type(t: irt.ScalarType) -> irt.ScalarType:
    """`/` on integers: f64 for 64-bit ints, f32 otherwise."""
    return irt.F64 if t.bits == 64 else irt.F32




def math_arg_type(t: irt.ScalarType) -> irt.ScalarType:
    """Math functions compute in f32/f64; ints convert like `/`; f16/bf16 compute in f32."""
    if t.is_float:
        return t if t.bits >= 32 else irt.F32
    return division_float_type(t)


def c_floordiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def c_mod(a: int, b: int) -> int:
    return a - b * c_floordiv(a, b)
