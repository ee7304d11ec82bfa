"""Float min / max on the host, as the GPU's `min` / `max` instructions compute them.

Why a module of its own: NumPy's np.fmin/np.fmax leave the sign of a zero result to the code path
(`np.fmin(+0.0, -0.0)` is -0.0 on scalars and +0.0 on arrays) and keep whichever NaN payload they
meet, so a simulator built on them disagrees with the device, and with itself, on (+0, -0) and on
(NaN, NaN). Every simulator min/max goes through `minmax`: the SIMT `min`/`max` operators and
`fmin`/`fmax` rows (dsl/sim/arith.py, dsl/vocab/host.py through the rows' `host`), the tile
simulator's element-wise min/max and its max/min reductions (dsl/tile/sim.py).

What the back end emits: `llvm.minnum` / `llvm.maxnum`, which NVPTX lowers to `min.f32`, `min.f64`,
`min.f16`, `min.bf16` (sm_80+; `max` alike; f16/bf16 math computed in f32 comes back through `cvt`,
which gives the same canonical NaN). The PTX ISA (9.7.3.11/12, 9.7.4.7) says for them: a NaN operand
is ignored (the other operand is the result); "+0.0 > -0.0", so min(+0, -0) = min(-0, +0) = -0 and
max of the two = +0, whatever the operand order; two NaN operands give "NaN" (canonical NaN for the
half types). What the H200 returns for two NaNs (measured 2026-12-03, quiet and signalling, any sign
and payload, by interop_tests/dsl_sim/test_sim_agrees_with_gpu.py and probes like it): the canonical
NaN for f16, bf16 (0x7fff) and f32 (0x7fffffff); for f64 the SECOND operand, its quiet bit set.
A signalling NaN beside a number is ignored like a quiet one.

The settings below are that, in one place: if a device disagrees (the GPU test compares bit patterns),
change them here and the pinned table of interop_tests/dsl_sim/minmax_cases.py.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

# -0.0 orders below +0.0 (PTX: "+0.0 > -0.0"); False would return the first operand on equal zeros.
NEGATIVE_ZERO_IS_LESS = True

SECOND_QUIETED = "second"    # two NaNs: the second operand with its quiet bit set (f64 on the H200)
# What min/max return when both operands are NaN, by NumPy dtype name ("bfloat16" is ml_dtypes' bf16):
# the bits of one NaN (CUDA's CUDART_NAN_F, CUDART_NAN_FP16, CUDART_NAN_BF16), or SECOND_QUIETED.
TWO_NANS: dict[str, int | str] = {
    "float16": 0x7FFF,
    "bfloat16": 0x7FFF,
    "float32": 0x7FFF_FFFF,
    "float64": SECOND_QUIETED,
}

_UINT = {2: np.uint16, 4: np.uint32, 8: np.uint64}
OPS = ("min", "max")


def two_nans(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What min/max return where both `a` and `b` are NaN (TWO_NANS), broadcast like them."""
    dtype = a.dtype
    rule = TWO_NANS.get(dtype.name)
    uint = _UINT.get(dtype.itemsize)
    if rule == SECOND_QUIETED and uint is not None:
        quiet = uint(1 << (ml_dtypes.finfo(dtype).nmant - 1))     # the top mantissa bit
        second = np.broadcast_to(b, np.broadcast_shapes(a.shape, b.shape))
        return (second.view(uint) | quiet).view(dtype)
    if not isinstance(rule, int) or uint is None:         # a float type the table does not name
        return np.asarray(np.nan, np.float32).astype(dtype)
    return np.asarray(rule, uint).view(dtype)


def minmax(op: str, a: Any, b: Any) -> np.ndarray:
    """`op` ("min" or "max") of float operands `a` and `b` (broadcast; same float dtype), bit for
    bit what the device's min/max return: NaN ignored, -0 below +0, two NaNs as TWO_NANS says.
    Deterministic for scalars and arrays alike (only comparisons and selections, no NumPy fmin)."""
    if op not in OPS:
        raise ValueError(f"minmax: op must be 'min' or 'max', got {op!r}")
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype:
        raise TypeError(f"minmax: operands must have one float dtype, got {a.dtype} and {b.dtype}")
    # comparisons in f32 or wider (exact for every 2-byte float); the result is selected, not computed
    with np.errstate(invalid="ignore"):                   # signalling NaNs widen to NaNs
        wa, wb = (a.astype(np.float32), b.astype(np.float32)) if a.dtype.itemsize < 4 else (a, b)
    nan_a, nan_b = np.isnan(wa), np.isnan(wb)
    take_b = (wb < wa) if op == "min" else (wb > wa)
    if NEGATIVE_ZERO_IS_LESS:
        zeros = (wa == 0) & (wb == 0)
        b_neg, a_neg = np.signbit(wb), np.signbit(wa)
        take_b = take_b | (zeros & ((b_neg & ~a_neg) if op == "min" else (a_neg & ~b_neg)))
    take_b = (take_b | nan_a) & ~nan_b
    out = np.where(take_b, b, a)
    both = nan_a & nan_b
    return np.where(both, two_nans(a, b), out) if np.any(both) else out


def reduce(op: str, x: Any, axis: int | None = None) -> np.ndarray:
    """`minmax` over `axis` of `x` (every element for None), combined pairwise in a tree (log2(n)
    vectorised steps). The device's tree depends on the layout; where a lane holds a number,
    `minmax` is commutative and associative, so every order gives these bits (NaNs alone: not pinned,
    see docs/tile.md)."""
    acc = np.asarray(x)
    if axis is None:
        acc, axis = acc.reshape(-1), 0
    acc = np.moveaxis(acc, axis, 0)
    if acc.shape[0] == 0:
        raise ValueError(f"minmax.reduce: {op} over an empty axis")
    while acc.shape[0] > 1:
        half = acc.shape[0] // 2
        pairs = minmax(op, acc[:half], acc[half:2 * half])
        acc = np.concatenate([pairs, acc[2 * half:]]) if acc.shape[0] % 2 else pairs
    return acc[0]


def host_minmax(op: str, args: list, dtype: Any) -> np.ndarray:
    """The fmin / fmax rows' `host` (dsl/vocab/math.py): `minmax` in the operand type `dtype`."""
    a, b = (np.asarray(x).astype(dtype) for x in args)
    return minmax(op, a, b)
