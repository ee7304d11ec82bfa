"""Element-wise comparison of two kernels' outputs: exact by default, or within rtol/atol or ulps."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Mismatch:
    """The first differing element of one argument, and how many differ."""
    index: tuple[int, ...]
    expected: object
    actual: object
    count: int
    total: int


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or (a.dtype.kind == "V" and a.dtype.itemsize <= 2) or \
        type(a.dtype).__module__.startswith("ml_dtypes") or a.dtype.type.__module__.startswith("ml_dtypes")


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bit patterns mapped to integers that are adjacent for adjacent floats (as float64, so
    differences cannot overflow)."""
    bits = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    b = np.ascontiguousarray(a).view(bits).astype(np.int64)
    top = np.int64(1) << np.int64(8 * a.dtype.itemsize - 1)
    return np.where(b < 0, -(b + top), b).astype(np.float64)


def close(expected: np.ndarray, actual: np.ndarray, rtol: float | None, atol: float | None,
          ulps: int | None) -> np.ndarray:
    """Boolean array: where the two agree. NaN agrees with NaN; otherwise exact unless a tolerance is
    given (an element passes when it is within rtol/atol OR within ulps)."""
    if expected.dtype.kind == "c":
        return close(expected.real, actual.real, rtol, atol, ulps) & \
            close(expected.imag, actual.imag, rtol, atol, ulps)
    if not _is_float(expected):
        return expected == actual
    e, g = expected.astype(np.float64), actual.astype(np.float64)
    ok = (e == g) | (np.isnan(e) & np.isnan(g))
    if rtol is not None or atol is not None:
        with np.errstate(invalid="ignore"):
            ok |= np.abs(e - g) <= (atol or 0.0) + (rtol or 0.0) * np.abs(e)
    if ulps is not None:
        ok |= np.abs(_ordered(expected) - _ordered(actual)) <= ulps
    return ok


def first_mismatch(expected: np.ndarray, actual: np.ndarray, rtol: float | None, atol: float | None,
                   ulps: int | None, where: np.ndarray | None = None) -> Mismatch | None:
    """The first element (C order) where the two differ, among those `where` selects (all by default;
    `total` counts the elements compared)."""
    if expected.shape != actual.shape:
        return Mismatch((), f"shape {expected.shape}", f"shape {actual.shape}", expected.size, expected.size)
    bad = ~close(expected, actual, rtol, atol, ulps)
    if where is not None:
        bad &= where
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    index = first_index(bad)
    return Mismatch(index, expected[index], actual[index], count,
                    int(expected.size if where is None else np.count_nonzero(where)))


def first_index(mask: np.ndarray) -> tuple[int, ...]:
    """Index of the first True element of `mask` in C order (one must be True)."""
    flat = int(np.flatnonzero(mask.reshape(-1))[0])
    return tuple(int(i) for i in np.unravel_index(flat, mask.shape))


def value_text(v: object) -> str:
    """A value and, for floats, its bit pattern (so 1-ulp differences are visible)."""
    a = np.asarray(v)
    text = str(a.reshape(())[()])
    if _is_float(a) and a.dtype.itemsize in (2, 4, 8):
        bits = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        text += f" (0x{int(a.reshape(1).view(bits)[0]):0{2 * a.dtype.itemsize}x})"
    return text


def tolerance_text(rtol: float | None, atol: float | None, ulps: int | None) -> str:
    parts = []
    if rtol is not None:
        parts.append(f"rtol={rtol}")
    if atol is not None:
        parts.append(f"atol={atol}")
    if ulps is not None:
        parts.append(f"ulps={ulps}")
    return ", ".join(parts) if parts else "exact"


def outside_writes(before: np.ndarray, after: np.ndarray, inside: np.ndarray) -> int | None:
    """Flat index of the first base element outside the view that changed, or None."""
    if before.shape != after.shape:
        return None
    item = before.dtype.itemsize
    b = np.ascontiguousarray(before).reshape(-1).view(np.uint8).reshape(-1, item)
    a = np.ascontiguousarray(after).reshape(-1).view(np.uint8).reshape(-1, item)
    changed = np.any(a != b, axis=1) & ~inside.reshape(-1)
    hits = np.flatnonzero(changed)
    return int(hits[0]) if hits.size else None
