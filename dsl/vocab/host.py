"""Host evaluation of the math table (dsl/vocab/math.py), shared by the SIMT and the tile simulator.

ONE numerics rule, so both simulators give the same bits for the same math: every row's reference is
computed in float64 and rounded once to the operand type; f16 and bf16 go through f32 first (CUDA
computes their scalar math in f32 and rounds back). Exact functions (sqrt, floor, fmod, copysign, ...)
stay correctly rounded; transcendentals land within libdevice's error bounds (NumPy's own f32 kernels
can be 2+ ulp off, which is why nothing is computed in f32). fma has its own correctly rounded
`host` (a float64 sum would round twice): dsl/vocab/fma.py.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dsl.vocab import math as vocab

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def round_to(r: Any, dtype: np.dtype) -> np.ndarray:
    """A float64 result rounded to `dtype` (2-byte floats through f32, like the GPU)."""
    r = np.asarray(r, dtype=_F64)
    if dtype == _F64:
        return r
    if dtype == _F32:
        return r.astype(_F32)
    return r.astype(_F32).astype(dtype)


def evaluate(fn: str, args: list, dtype: Any) -> np.ndarray:
    """Row `fn` on NumPy operands whose (float) type is `dtype`: a bool array for predicates, else an
    array of `dtype`."""
    row = vocab.get(fn)
    if row is None:
        raise NotImplementedError(f"simulator: math function {fn!r} is not in the math table "
                                  "(dsl/vocab/math.py)")
    dtype = np.dtype(dtype)
    with np.errstate(all="ignore"):
        if row.host is not None:
            return np.asarray(row.host(list(args), dtype))
        xs = [np.asarray(a).astype(_F64) for a in args]
        r = row.reference(*xs)
        if row.typing == vocab.PREDICATE:
            return np.asarray(r, dtype=bool)
        return round_to(r, dtype)
