"""Scalar semantics of the typed IR on NumPy vectors: the GPU's arithmetic, not NumPy's or Python's.

Why a module of its own: these rules are what makes the simulator agree with the device bit for bit.
- Every op computes in the IR type's NumPy dtype (f32 stays float32; integers wrap modulo 2^bits).
- f16 / bf16 are widened to f32, computed, and rounded back once. For + - * / and sqrt this is the
  correctly rounded result (f32 has more than 2p+2 bits for both), i.e. what the device computes.
- Integer `//` and `%` truncate toward zero (C); float `%` is C `fmod` (libdevice __nv_fmod[f]); float
  `//` is floor(a / b) like Python. Integer division by zero gives 0 here (undefined on the device).
- Shifts clamp the amount like PTX `shl`/`shr`: an amount >= the bit width (or negative) shifts
  everything out (0, or -1 for a negative signed value shifted right).
- float -> int casts truncate and saturate like PTX `cvt.rzi` (NaN -> 0); int -> int wraps; a NaN
  cast to f16 / bf16 is 0x7fff, CUDA's canonical NaN (NumPy would keep payload bits).
- min / max (and fmin / fmax) on floats are the device's `min` / `max` (dsl/vocab/minmax.py): a NaN
  operand is ignored, -0 is below +0, two NaNs give the canonical NaN (f64: the second, quieted).
- Comparisons are ordered except `ne`.
- Math functions are the rows of dsl/vocab/math.py, evaluated by dsl/vocab/host.py with the rule the
  tile simulator uses too: in f64, rounded once to the operand type (f16/bf16 through f32); fma is
  rounded once like fma.rn. Exact ops stay correctly rounded; transcendentals agree with libdevice
  within its error bounds, not bit for bit.
"""
from __future__ import annotations

import numpy as np

from bridge import dtypes
from dsl.ir.types import F8_FORMATS, ScalarType
from dsl.vocab import host
from dsl.vocab import math as vocab
from dsl.vocab import minmax

# IR scalar name -> the NumPy dtype that stores it: the DSL rows of the one dtype table.
_NP: dict[str, np.dtype] = {row.name: dtypes.to_numpy(row.name) for row in dtypes.kernel_rows()}
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def np_dtype(t: ScalarType) -> np.dtype:
    """The NumPy dtype that stores IR scalar type `t`."""
    return _NP[t.name]


def ir_name_of(dtype: np.dtype) -> str | None:
    """IR scalar name of a NumPy dtype (None when the IR has no such type)."""
    for name, dt in _NP.items():
        if dt == dtype:
            return name
    return None


def const(value: object, t: ScalarType) -> np.generic:
    """A typed NumPy scalar for an IR constant."""
    dt = np_dtype(t)
    if t.kind == "bool":
        return np.bool_(bool(value))
    if t.is_int:
        return dt.type(int(value) % (1 << t.bits) if t.kind == "uint" else _wrap_signed(int(value), t.bits))
    if t.name == "bf16":
        return to_bf16(np.asarray(float(value)))[()]
    return np.asarray(float(value), dtype=_F64).astype(dt)[()]


def _wrap_signed(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def as_type(x, t: ScalarType):
    """`x` in dtype of `t` (no copy when it already is)."""
    dt = np_dtype(t)
    a = np.asarray(x)
    return a if a.dtype == dt else a.astype(dt)


def _narrow(t: ScalarType) -> bool:
    return t.is_float and t.bits == 16


# --------------------------------------------------------------------------------------- binary
def binop(op: str, a, b, t: ScalarType):
    """BinOp `op` on operands of type `t` (shifts: `b` any int type; pow: `b` may be an int)."""
    if op in ("lshift", "rshift"):
        return _shift(op, as_type(a, t), b, t)
    if op == "pow" and t.is_float and np.asarray(b).dtype.kind in "iub":
        return _powi(as_type(a, t), np.asarray(b).astype(np.int64), t)
    if op in minmax.OPS and t.is_float:     # selected in the operand type, never computed (no rounding)
        return minmax.minmax(op, as_type(a, t), as_type(b, t))
    if _narrow(t):
        r = _binop_core(op, as_type(a, t).astype(_F32), as_type(b, t).astype(_F32), _F32, True)
        return np.asarray(r).astype(np_dtype(t))
    dt = np_dtype(t)
    return _binop_core(op, as_type(a, t), as_type(b, t), dt, t.is_float, t)


def _binop_core(op, a, b, dt, is_float, t: ScalarType | None = None):
    if op == "add":
        return np.add(a, b, dtype=dt)
    if op == "sub":
        return np.subtract(a, b, dtype=dt)
    if op == "mul":
        return np.multiply(a, b, dtype=dt)
    if op in ("truediv", "floordiv", "mod") and not is_float:
        return _int_divmod(op, a, b, t)
    if op == "truediv":
        return np.divide(a, b, dtype=dt)
    if op == "floordiv":
        return np.floor(np.divide(a, b, dtype=dt))
    if op == "mod":
        return np.fmod(a, b, dtype=dt)
    if op == "pow":
        return _int_pow(a, b, t) if not is_float else np.power(a, b, dtype=dt)
    if op == "min":                         # integers only: float min/max leave in binop
        return np.minimum(a, b)
    if op == "max":
        return np.maximum(a, b)
    if op == "copysign":
        return np.copysign(a, b, dtype=dt)
    if op in ("and_", "or_", "xor"):
        if t is not None and t.kind == "bool":
            return {"and_": np.logical_and, "or_": np.logical_or, "xor": np.logical_xor}[op](a, b)
        return {"and_": np.bitwise_and, "or_": np.bitwise_or, "xor": np.bitwise_xor}[op](a, b)
    raise NotImplementedError(f"simulator: binary op {op!r} on {dt}")


def _int_divmod(op: str, a, b, t: ScalarType):
    """C division: quotient truncated toward zero, remainder takes the dividend's sign."""
    zero = b == 0
    safe_b = np.where(zero, np.ones_like(b), b) if np.any(zero) else b
    if t.kind == "uint" or t.kind == "bool":
        q, r = np.floor_divide(a, safe_b), np.remainder(a, safe_b)
    else:
        q = np.floor_divide(a, safe_b)
        r = np.fmod(a, safe_b)
        fix = (r != 0) & ((r < 0) != (safe_b < 0))
        q = np.where(fix, q + np.asarray(1, q.dtype), q).astype(q.dtype)
    res = r if op == "mod" else q
    if np.any(zero):
        res = np.where(zero, np.zeros_like(res), res)
    return np.asarray(res).astype(np_dtype(t))


def _int_pow(a, b, t: ScalarType):
    """Integer power with wrap-around; negative exponents give 0 unless |base| == 1 (C-like)."""
    a = np.asarray(a)
    b = np.asarray(b).astype(np.int64)
    shape = np.broadcast_shapes(a.shape, b.shape)
    base = np.broadcast_to(a, shape).copy()
    e = np.broadcast_to(b, shape).copy()
    res = np.ones(shape, a.dtype)
    neg = e < 0
    e[neg] = 0
    while np.any(e > 0):
        odd = (e & 1) == 1
        res = np.where(odd, res * base, res).astype(a.dtype)
        base = (base * base).astype(a.dtype)
        e >>= 1
    if np.any(neg):
        one = a == 1
        minus_one = (a == -1) if t.is_signed else np.zeros(shape, bool)
        alt = np.where(one | minus_one, np.where(minus_one & (b % 2 != 0), a, np.ones_like(a)), 0)
        res = np.where(neg, alt, res).astype(a.dtype)
    return res


def _powi(a, n, t: ScalarType):
    """float ** int (libdevice __nv_powi[f]: repeated squaring in the float type)."""
    work = a.astype(_F32) if _narrow(t) else a
    res = _int_pow_float(work, n)
    return np.asarray(res).astype(np_dtype(t))


def _int_pow_float(a, n):
    shape = np.broadcast_shapes(np.shape(a), np.shape(n))
    base = np.broadcast_to(a, shape).copy()
    e = np.abs(np.broadcast_to(n, shape)).astype(np.int64)
    res = np.ones(shape, base.dtype)
    while np.any(e > 0):
        odd = (e & 1) == 1
        res = np.where(odd, res * base, res).astype(base.dtype)
        base = (base * base).astype(base.dtype)
        e >>= 1
    neg = np.broadcast_to(n, shape) < 0
    return np.where(neg, np.asarray(1, base.dtype) / res, res).astype(base.dtype)


def _shift(op: str, a, b, t: ScalarType):
    amount = np.asarray(b)
    if amount.dtype.kind == "i":
        amount = np.where(amount < 0, t.bits, np.minimum(amount, t.bits))
    else:
        amount = np.minimum(amount, t.bits)
    amount = amount.astype(a.dtype)
    res = np.left_shift(a, amount) if op == "lshift" else np.right_shift(a, amount)
    return np.asarray(res).astype(a.dtype)


# ---------------------------------------------------------------------------------------- unary
def unary(op: str, a, t: ScalarType):
    a = as_type(a, t)
    if op == "neg":
        return np.negative(a)
    if op == "not_":
        return np.logical_not(a)
    if op == "invert":
        return np.logical_not(a) if t.kind == "bool" else np.invert(a)
    if op == "abs":
        return np.abs(a)
    raise NotImplementedError(f"simulator: unary op {op!r}")


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}


def compare(op: str, a, b, t: ScalarType):
    """Comparison with Python/IEEE NaN rules (only `ne` is true for NaN)."""
    if _narrow(t):
        a, b = as_type(a, t).astype(_F32), as_type(b, t).astype(_F32)
    else:
        a, b = as_type(a, t), as_type(b, t)
    return _CMP[op](a, b)


# ----------------------------------------------------------------------------------------- cast
def cast(x, src: ScalarType, dst: ScalarType):
    """IR Cast with C / PTX cvt semantics (see the module docstring)."""
    x = np.asarray(x)
    dt = np_dtype(dst)
    if dst.kind == "bool":
        return x != 0
    if src.is_float and dst.is_int:
        return _float_to_int(x, dst)
    if src.kind == "bool":
        return x.astype(np.uint8).astype(dt)
    if src.name == "bf16" and dst.is_float and dst.bits == 64:
        return x.astype(_F32).astype(dt)
    if dst.is_f8:   # through f32, round to nearest even, saturating to the largest finite (.satfinite)
        top = F8_FORMATS[dst.name].max
        return np.clip(x.astype(_F32), -top, top).astype(dt)
    if src.is_float and dst.is_float and dst.bits == 16 and src.name != dst.name:
        with np.errstate(invalid="ignore"):      # NaNs (signalling ones too) are replaced below
            r = to_bf16(x.astype(_F64)) if dst.name == "bf16" and src.name != "f32" else x.astype(dt)
        return _nan_is_canonical(x, r)
    return x.astype(dt)


# cvt.rn.{f16,bf16}.{f32,f64} of any NaN (payload and sign dropped): what CUDA's own emulation of the
# conversion (__internal_float2half / __internal_float2bfloat16 in cuda_fp16.hpp / cuda_bf16.hpp)
# returns; NumPy keeps payload bits (f16) and ml_dtypes gives 0x7fc0 (bf16).
_HALF_CVT_NAN_BITS = 0x7FFF


def _nan_is_canonical(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    nan = np.isnan(x)
    if not np.any(nan):
        return r
    return np.where(nan, np.asarray(_HALF_CVT_NAN_BITS, np.uint16).view(r.dtype), r)


def to_bf16(x: np.ndarray) -> np.ndarray:
    """f64 -> bf16 rounded once (ml_dtypes goes through f32 with round-to-nearest, rounding twice):
    round to f32 *to odd* first, which makes the second rounding exact (24 >= 8 + 2 bits)."""
    x = np.asarray(x, _F64)
    t = x.astype(_F32)
    away = np.abs(t.astype(_F64)) > np.abs(x)
    t = np.where(away & np.isfinite(x), np.nextafter(t, np.float32(0)), t).astype(_F32)
    inexact = (t.astype(_F64) != x) & ~np.isnan(x)
    bits = t.view(np.uint32) | inexact.astype(np.uint32)
    return bits.view(_F32).astype(_NP["bf16"])


def _float_to_int(x, dst: ScalarType):
    f = np.trunc(x.astype(_F64))
    lo = 0 if dst.kind == "uint" else -(2 ** (dst.bits - 1))
    hi_excl = 2 ** dst.bits if dst.kind == "uint" else 2 ** (dst.bits - 1)
    dt = np_dtype(dst)
    nan = np.isnan(f)
    over = f >= float(hi_excl)
    under = f < float(lo)
    ok = ~(nan | over | under)
    out = np.zeros(f.shape, dt)
    out[ok] = f[ok].astype(dt)
    out[over] = dt.type(hi_excl - 1)
    out[under] = dt.type(lo)
    return out


# ----------------------------------------------------------------------------------------- math
def math_fn(fn: str, args: list, t: ScalarType):
    """IR Math `fn`; `t` is the result type (bool for isnan / isinf). The row of the math table is
    evaluated by dsl.vocab.host: in f64, rounded once to `t` (f16/bf16 through f32), fma exactly."""
    row = vocab.get(fn)
    if row is None:
        raise NotImplementedError(f"simulator: math function {fn!r}")
    if row.typing == vocab.PREDICATE:
        return host.evaluate(fn, args, _F64)
    return host.evaluate(fn, [as_type(a, t) for a in args], np_dtype(t))
