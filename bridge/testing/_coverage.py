"""Which elements of an output a kernel wrote: the outputs are poisoned with a sentinel before a run.

Why: two kernels that both leave the same elements untouched (a grid that covers 8 rows of 33) agree
on those elements whatever their initial values, so comparing values alone can pass while testing
almost nothing. A write-only output is filled with a sentinel (a NaN with a distinctive payload for
floats, a distinctive byte pattern for integers and bools; the same bytes for both sides) and an
element is untouched when its bytes still equal the sentinel after the run. A kernel may write a value
whose bytes equal the sentinel, so an element that matches it is checked again by a second run with a
second sentinel: it was written unless it matches that one too.

Read-write outputs are not poisoned: their initial values are inputs of the kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from bridge.testing import _arrays
from bridge.testing._sides import key

# Two patterns per floating-point width (big-endian hex of one element): quiet NaNs with distinctive
# payloads, of opposite signs. Integers and bools use 0xA5... and 0x5A... bytes.
_FLOAT_BITS = {"f16": (0x7E5A, 0xFF25), "bf16": (0x7FDA, 0xFFE5), "f32": (0x7FDA5A5A, 0xFFE5A5A5),
               "f64": (0x7FFDA5A5A5A5A5A5, 0xFFFE5A5A5A5A5A5A)}
_COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}
_INT_BYTES = (0xA5, 0x5A)


def _pattern_of(bits: int, itemsize: int) -> bytes:
    return bits.to_bytes(itemsize, "little")


def sentinels(dtype_name: str) -> tuple[bytes, bytes]:
    """The two sentinels (the bytes of one element) an output of this dtype is poisoned with."""
    dt = _arrays.numpy_dtype(dtype_name)
    if dtype_name in _FLOAT_BITS:
        return tuple(_pattern_of(b, dt.itemsize) for b in _FLOAT_BITS[dtype_name])  # type: ignore[return-value]
    if dtype_name in _COMPLEX_PARTS:
        part = sentinels(_COMPLEX_PARTS[dtype_name])
        return part[0] + part[0], part[1] + part[1]
    if dt.itemsize == 1 and dtype_name.startswith("f"):      # 8-, 6- and 4-bit floats: their NaN, if any
        nan = np.array([np.nan]).astype(dt)
        if np.isnan(nan.astype(np.float32))[0]:
            first = int(nan.view(np.uint8)[0])
            other = np.array([first ^ 0x80], np.uint8).view(dt)
            second = first ^ 0x80 if np.isnan(other.astype(np.float32))[0] else _INT_BYTES[1]
            return bytes([first]), bytes([second])
    return bytes([_INT_BYTES[0]]) * dt.itemsize, bytes([_INT_BYTES[1]]) * dt.itemsize


def _rows(a: np.ndarray) -> np.ndarray:
    """The elements of `a` (C order) as rows of bytes."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(-1, a.dtype.itemsize)


def poison(record: _arrays.ArrayRecord, which: int) -> _arrays.ArrayRecord:
    """A copy of `record` whose view's elements hold sentinel `which` (0 or 1); the rest of the base
    (the gaps of a strided view, the guard zone) keeps its values, so writes outside the view still show."""
    pattern = np.frombuffer(sentinels(record.spec["dtype"])[which], np.uint8)
    base = _arrays.aligned_empty(record.base.shape, record.base.dtype)
    base[...] = record.base
    rows = base.reshape(-1).view(np.uint8).reshape(-1, base.dtype.itemsize)
    rows[record.mask().reshape(-1)] = pattern
    return replace(record, base=base)


def untouched(after: np.ndarray, dtype_name: str, which: int) -> np.ndarray:
    """Boolean array of `after`'s shape: True where the element's bytes are sentinel `which`. An array
    of another dtype (a Python reference may return its own) has no sentinel in it: all False."""
    pattern = sentinels(dtype_name)[which]
    if after.dtype != _arrays.numpy_dtype(dtype_name) or after.dtype.itemsize != len(pattern):
        return np.zeros(after.shape, dtype=bool)
    return np.all(_rows(after) == np.frombuffer(pattern, np.uint8), axis=1).reshape(after.shape)


@dataclass
class Coverage:
    """How many elements of one output the reference wrote, summed over launches (`total`: elements
    of the output). `poisoned` is False for read-write outputs (not measured: inputs are not poisoned)."""
    written: int = 0
    total: int = 0
    poisoned: bool = True

    def add(self, written: int, total: int) -> None:
        self.written += written
        self.total += total

    @property
    def full(self) -> bool:
        return self.written == self.total

    def text(self, name: str) -> str:
        if not self.poisoned:
            return f"{name}: read-write, not poisoned (its initial values are inputs); {self.total} element(s) compared"
        return f"{name}: {self.written} of {self.total} element(s) written ({percent(self.written, self.total)})"


def percent(part: int, whole: int) -> str:
    """`part/whole` as a percentage that is 100% only when part == whole (and 100% of nothing)."""
    if whole == 0 or part == whole:
        return "100%"
    value = 100.0 * part / whole
    return f"{min(value, 99.9):.1f}%"


def partial_names(partial: bool | Iterable[str], written: tuple[str, ...]) -> frozenset[str]:
    """The outputs `partial=` allows the reference to write in part: all (True), none (False), or the
    names given (each must be a written argument)."""
    if isinstance(partial, bool):
        return frozenset(written) if partial else frozenset()
    if isinstance(partial, str):
        partial = (partial,)
    try:
        names = frozenset(partial)
    except TypeError:
        raise TypeError(f"partial: expected a bool or a collection of output names, got "
                        f"{type(partial).__name__}") from None
    by_key = {key(n): n for n in written}
    unknown = sorted(n for n in names if key(n) not in by_key)
    if unknown:
        raise ValueError(f"partial: {', '.join(map(repr, unknown))} is not an output the kernels write; "
                         f"they write {', '.join(written) or 'nothing'}")
    return frozenset(by_key[key(n)] for n in names)
