"""fma on the host, rounded once like PTX `fma.rn`: the fma row's `host` in the math table
(dsl/vocab/math.py), so both simulators give the GPU's bits (a float64 `x * y + z` would round twice).

It imports nothing of the DSL: the table names it, and dsl/vocab/host.py (the evaluator of every row,
which reads the table) calls it through the row.
"""
from __future__ import annotations

from typing import Any

import numpy as np

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _two_prod(a, b):
    """a*b = p + e exactly (Dekker/Veltkamp; exact unless the product over- or underflows)."""
    p = a * b
    split = 134217729.0                       # 2^27 + 1
    ta, tb = split * a, split * b
    ah, bh = ta - (ta - a), tb - (tb - b)
    al, bl = a - ah, b - bh
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _round_to_odd_sum(x, y):
    """x + y rounded to odd (truncate toward zero, then set the last bit when inexact)."""
    s, e = _two_sum(x, y)
    away = (e != 0) & (np.sign(e) != np.sign(s)) & np.isfinite(s)
    s = np.where(away, np.nextafter(s, 0.0), s)
    odd = s.view(np.uint64) | ((e != 0) & np.isfinite(s)).astype(np.uint64)
    return odd.view(_F64)


def fma(args: list, dtype: Any) -> np.ndarray:
    """Fused multiply-add rounded once, like PTX fma.rn. f32: the f64 product is exact, the f64 sum is
    rounded to odd, so rounding it to f32 is correct (f16/bf16: that f32 result, rounded back). f64:
    exact product by Dekker's TwoProduct, then the Boldo-Melquiond correctly rounded 3-term sum (exact
    barring over/underflow)."""
    dtype = np.dtype(dtype)
    a, b, c = (np.asarray(x) for x in args)
    with np.errstate(all="ignore"):
        if dtype != _F64:
            a, b, c = (x.astype(_F32).astype(_F64) for x in (a, b, c))
            shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
            prod = np.broadcast_to(a * b, shape)
            r = _round_to_odd_sum(prod, np.broadcast_to(c, shape)).astype(_F32)
            return r if dtype == _F32 else r.astype(dtype)
        a, b, c = (x.astype(_F64) for x in (a, b, c))
        ph, pl = _two_prod(a, b)
        uh, ul = _two_sum(c, pl)
        th, tl = _two_sum(ph, uh)
        r = th + _round_to_odd_sum(tl, ul)
        plain = a * b + c
        return np.where(np.isfinite(r) & np.isfinite(plain), r, plain)
