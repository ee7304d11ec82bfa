"""Global arrays (the caller's NumPy arrays, any strides) and per-block shared memory, as seen by lanes.

Loads and stores are NumPy fancy indexing on the selected lanes. Atomics are applied in lane order,
element by element: lanes hitting the same element are serialised (round r applies every element's r-th
update at once), so the returned old values are those of one serial order, as on the device.
"""
from __future__ import annotations

import numpy as np

from dsl.ir.types import ScalarType
from dsl.sim import arith

# Shared memory starts as all-ones bytes (NaN for every float type, -1 for signed ints): reading it
# before writing it is a bug on the device too, and NaN makes that visible in results.
SHARED_FILL = 0xFF


class MemRef:
    """One array as the kernel sees it. For shared memory `data` has a leading block-in-batch axis."""

    def __init__(self, name: str, data: np.ndarray, dtype: ScalarType, shared: bool) -> None:
        self.name, self.data, self.dtype, self.shared = name, data, dtype, shared
        self.extents: tuple[int, ...] = tuple(data.shape[1:] if shared else data.shape)

    def in_range(self, idx: list[np.ndarray]) -> np.ndarray:
        ok = None
        for i, ext in zip(idx, self.extents):
            good = (i >= 0) & (i < ext)
            ok = good if ok is None else ok & good
        return ok

    def first_bad_axis(self, idx: list[np.ndarray], pos: int) -> tuple[int, int]:
        """(index, extent) of the first out-of-range axis of the access made by selected lane `pos`."""
        for i, ext in zip(idx, self.extents):
            v = int(np.asarray(i).reshape(-1)[pos] if np.ndim(i) else i)
            if not 0 <= v < ext:
                return v, ext
        return -1, -1

    def _key(self, blk, idx: list[np.ndarray]) -> tuple:
        return ((blk,) if self.shared else ()) + tuple(idx)

    def load(self, blk, idx: list[np.ndarray]):
        return self.data[self._key(blk, idx)]

    def store(self, blk, idx: list[np.ndarray], value) -> None:
        """Write `value` (already in the element dtype) at the lanes' indices; duplicates: last wins."""
        self.data[self._key(blk, idx)] = value

    def element_id(self, blk, idx: list[np.ndarray]) -> np.ndarray:
        """A number per lane naming the memory element it touches (byte offset; aliasing-correct)."""
        if self.shared:
            flat = np.ravel_multi_index(tuple(idx), self.extents) if idx else 0
            return np.asarray(blk, np.int64) * max(1, int(np.prod(self.extents))) + flat
        off = np.zeros(np.shape(idx[0]), np.int64)
        for i, st in zip(idx, self.data.strides):
            off = off + np.asarray(i, np.int64) * st
        return off

    def atomic(self, op: str, blk, idx: list[np.ndarray], val: np.ndarray,
               cmp: np.ndarray | None) -> np.ndarray:
        """Apply atomic `op` for n lanes (all in range) in lane order; return each lane's old value."""
        n = len(val)
        old = np.empty(n, self.data.dtype)
        if n == 0:
            return old
        keys = self.element_id(blk, idx)
        order = np.argsort(keys, kind="stable")
        ks = keys[order]
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, n]))
        rank = np.arange(n) - starts[group]
        maxmult = int(rank.max()) + 1
        full = [np.broadcast_to(np.asarray(i), (n,)) for i in idx]
        fblk = np.broadcast_to(np.asarray(blk), (n,)) if self.shared else None
        if maxmult <= 32 or op == "cas" or maxmult <= len(starts):
            by_rank = order[np.argsort(rank, kind="stable")]   # rank is per sorted position
            bounds = np.r_[0, np.cumsum(np.bincount(rank, minlength=maxmult))]
            for r in range(maxmult):
                lanes = by_rank[bounds[r]:bounds[r + 1]]
                key = self._key(fblk[lanes] if fblk is not None else None, [i[lanes] for i in full])
                cur = self.data[key]
                old[lanes] = cur
                self.data[key] = _combine(op, cur, val[lanes], None if cmp is None else cmp[lanes],
                                          self.dtype)
        else:
            ends = np.r_[starts[1:], n]
            for s, e in zip(starts, ends):
                lanes = order[s:e]
                first = lanes[:1]
                key = self._key(fblk[first] if fblk is not None else None, [i[first] for i in full])
                seq = _accumulate(op, np.concatenate([self.data[key], val[lanes]]), self.dtype)
                old[lanes] = seq[:-1]
                self.data[key] = seq[-1:]
        return old


class SharedSpace:
    """The shared memory of a batch of blocks: one buffer per allocation with a leading block axis,
    made on first use. Every dynamic allocation aliases the same `dynamic` bytes per block, as
    `extern __shared__` arrays do."""

    def __init__(self, nblocks: int, dynamic: int) -> None:
        self.nblocks, self.dynamic = nblocks, dynamic
        self.buffers: dict[int, MemRef] = {}
        self.raw: np.ndarray | None = None

    def get(self, alloc) -> MemRef:
        ref = self.buffers.get(id(alloc))
        if ref is None:
            ref = self.buffers[id(alloc)] = MemRef(alloc.name, self._allocate(alloc.type, alloc.offset),
                                                   alloc.type.dtype, shared=True)
        return ref

    def _allocate(self, t, offset: int = 0) -> np.ndarray:
        """A static buffer, or a view of the dynamic bytes from `offset` on (SharedAlloc.offset)."""
        dt = arith.np_dtype(t.dtype)
        shape = tuple(t.shape or ())
        if shape and shape[0] == -1:
            if self.raw is None:
                self.raw = np.full((self.nblocks, self.dynamic), SHARED_FILL, np.uint8)
            usable = (max(self.dynamic - offset, 0) // dt.itemsize) * dt.itemsize
            return self.raw[:, offset:offset + usable].view(dt)
        nbytes = self.nblocks * int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return np.full(nbytes, SHARED_FILL, np.uint8).view(dt).reshape((self.nblocks,) + shape)


def _combine(op: str, cur, v, cmp, t: ScalarType):
    if op == "exch":
        return v
    if op == "cas":
        return np.where(cur == cmp, v, cur)
    name = {"add": "add", "sub": "sub", "min": "min", "max": "max", "and_": "and_", "or_": "or_",
            "xor": "xor"}.get(op)
    if name is None:
        raise NotImplementedError(f"simulator: atomic {op!r}")
    return arith.binop(name, cur, v, t)


_ACC = {"add": np.add, "sub": np.subtract, "and_": np.bitwise_and, "or_": np.bitwise_or,
        "xor": np.bitwise_xor}


def _accumulate(op: str, seq: np.ndarray, t: ScalarType) -> np.ndarray:
    """Running results of applying `op` serially: seq[0] is the old value, seq[1:] the operands."""
    if op == "exch":
        return seq
    if op in ("min", "max"):
        if t.is_float:          # serially, through the device's min/max (signed zeros, NaNs): dsl/vocab/minmax
            out = seq.copy()
            for k in range(1, len(seq)):
                out[k] = arith.binop(op, out[k - 1:k], seq[k:k + 1], t)[0]
            return out
        return (np.minimum if op == "min" else np.maximum).accumulate(seq)
    if t.is_float and t.bits == 16:
        out = seq.copy()          # f16/bf16: round after every step, like the device's atomic add
        for k in range(1, len(seq)):
            out[k] = arith.binop(op, out[k - 1], seq[k], t)
        return out
    return _ACC[op].accumulate(seq, dtype=seq.dtype)
