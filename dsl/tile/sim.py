"""CPU simulator of the tile IR: one tile block at a time, every tile value IS a NumPy array.

Semantics the GPU lowering must match: loads pad outside the array, stores skip outside it; math is
the math table's (dsl/vocab/host.py: f64, rounded once to the operand type, f16/bf16 through f32 —
the same numbers as the SIMT simulator); f16/bf16 sums run in f32 and round back; matmul accumulates
in f32 (f32 inputs rounded to tf32 first); float min/max, element-wise and reduced, are the device's
(dsl/vocab/minmax.py: a NaN operand ignored, -0 below +0); integer // and % floor like Python.
"""
from __future__ import annotations

import numpy as np

from dsl.tile import ir as T
from dsl.tile.types import PartitionParamType, np_dtype, tiles_by_number
from dsl.sim import arith
from dsl.sim.memory import MemRef
from dsl.vocab import host, minmax


def _f32_compute(dtype: np.dtype) -> bool:
    return dtype.itemsize == 2 and dtype.kind != "i" and dtype.kind != "u"


def tf32_round(x: np.ndarray) -> np.ndarray:
    """Round f32 values to tf32 (10 explicit mantissa bits, to nearest, ties away) like cvt.rna.tf32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    finite = np.isfinite(x)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(finite, rounded, x).astype(np.float32)


_BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
        "floordiv": np.floor_divide, "mod": np.mod, "min": np.minimum, "max": np.maximum,   # ints; floats: minmax
        "and_": np.bitwise_and, "or_": np.bitwise_or, "xor": np.bitwise_xor,
        "lshift": np.left_shift, "rshift": np.right_shift}
_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}


class BlockInterpreter:
    """Runs a TileFunction's body for one tile block."""

    def __init__(self, fn: T.TileFunction, args: dict[int, object], grid: tuple[int, ...],
                 coords: tuple[int, ...]) -> None:
        self.fn = fn
        self.args = args
        self.grid = grid
        self.coords = coords
        self.env: dict[int, np.ndarray] = {}
        self.barriers = None          # dsl/tile/launch.py BarrierCounts, when the kernel has barriers
        self.ledger = None            # dsl/tile/arrival_ledger.py ArrivalLedger, when the kernel has arrivals
        self.won: list[tuple] = []    # the (counter, index) arrivals this block won and is inside

    def run(self) -> None:
        self.block(self.fn.body)

    def tile_counts(self, p: T.TParam) -> tuple[int, ...]:
        """Tiles per axis of partition `p` (the grid's for the grid partition)."""
        ts = p.type.tile_shape  # type: ignore[union-attr]
        return tuple(-(-n // t) for n, t in zip(np.shape(self.args[p.index]), ts))

    def tile_coords(self, p: T.TParam) -> tuple[int, ...]:
        """This block's tile in partition `p`: the grid coordinates, or for a partition matched by
        tile number (types.tiles_by_number) the block's row-major number unravelled over its tiles."""
        if not tiles_by_number(p.type, self.fn.grid_param.type):  # type: ignore[arg-type]
            return self.coords
        number = int(np.ravel_multi_index(self.coords, self.grid))
        return tuple(int(c) for c in np.unravel_index(number, self.tile_counts(p)))

    def block(self, stmts: list[T.TStmt]) -> None:
        for s in stmts:
            if isinstance(s, T.Assign):
                self.env[id(s.var)] = self.eval(s.value)
            elif isinstance(s, T.Store):
                self.store(s)
            elif isinstance(s, T.Scatter):
                self.scatter(s)
            elif isinstance(s, T.For):
                start, stop, step = (int(self.eval(e)) for e in (s.start, s.stop, s.step))
                for i in range(start, stop, step):
                    self.env[id(s.var)] = np.asarray(i, np.int32)
                    self.block(s.body)
            elif isinstance(s, T.If) and isinstance(s.cond, T.Arrival):
                self.arrival(s, s.cond)
            elif isinstance(s, T.If):
                self.block(s.then if bool(self.eval(s.cond)) else s.else_)
            elif isinstance(s, T.StoreAt):
                self.store_at(s)
            elif isinstance(s, T.LaunchStmt):     # barriers counted, checked after the grid (dsl/tile/launch.py)
                if self.barriers is not None:
                    self.barriers.passed(self, s)
            else:  # pragma: no cover - the front end builds no other statements
                raise TypeError(f"unknown tile statement {type(s).__name__}")

    def store(self, s: T.Store) -> None:
        out = self.args[s.param.index]
        assert isinstance(out, np.ndarray)
        ty = s.param.type
        assert isinstance(ty, PartitionParamType)
        val = self.eval(s.value)
        coords = self.tile_coords(s.param)
        chunk = [0] * len(coords) if s.chunk is None else [int(self.eval(c)) for c in s.chunk]
        dst, src = [], []
        for k, ts in enumerate(ty.tile_shape):
            size = val.shape[k] if s.chunk is not None else ts
            if not 0 <= chunk[k] < ts // size:
                return                  # a chunk outside the block's own tile writes nothing
            lo = coords[k] * ts + chunk[k] * size
            hi = min(lo + size, out.shape[k])
            if hi <= lo:
                return
            dst.append(slice(lo, hi))
            src.append(slice(0, hi - lo))
        out[tuple(dst)] = val[tuple(src)].astype(out.dtype)

    def arrival(self, s: T.If, e: T.Arrival) -> None:
        """`if tile.arrive(...)`: the ledger counts the arrival; the winner runs the branch owning its tile."""
        assert self.ledger is not None
        if not self.ledger.arrive(self, e):
            self.block(s.else_)
            return
        self.won.append((e.counter.index, self.ledger.key(self, e)))
        try:
            self.block(s.then)
        finally:
            self.won.pop()

    def _region(self, arr: np.ndarray, index: list[T.TExpr], shape: tuple[int, ...]):
        """(slices into `arr`, slices into the tile) of the tile at `index` (tile units of `shape`), or None
        when it lies past the array's edge."""
        dst, src = [], []
        for k, ts in enumerate(shape):
            lo = int(self.eval(index[k])) * ts
            a, b = max(lo, 0), min(lo + ts, arr.shape[k])
            if b <= a:
                return None
            src.append(slice(a, b))
            dst.append(slice(a - lo, b - lo))
        return tuple(src), tuple(dst)

    def _flat(self, arr: np.ndarray, at: tuple) -> np.ndarray:
        """The flat (row-major) element numbers of region `at` of `arr`."""
        return np.arange(arr.size).reshape(arr.shape)[at].reshape(-1)

    def store_at(self, s: T.StoreAt) -> None:
        out = self.args[s.param.index]
        assert isinstance(out, np.ndarray) and self.ledger is not None
        val = self.eval(s.value)
        got = self._region(out, s.index, val.shape)
        if got is None:
            return
        at, part = got
        self.ledger.stored(self, s, out.shape, self._flat(out, at))
        out[at] = val[part].astype(out.dtype)

    def _elements(self, indices: list[T.TExpr], mask: T.TExpr | None, arr: np.ndarray):
        """(flat index arrays, which elements take part): in range of `arr` and where `mask` holds."""
        idx = [np.asarray(self.eval(i)).astype(np.int64).reshape(-1) for i in indices]
        ok = np.ones(idx[0].shape, bool) if idx else np.ones((1,), bool)
        for i, n in zip(idx, arr.shape):
            ok &= (i >= 0) & (i < n)
        if mask is not None:
            ok &= np.asarray(self.eval(mask), bool).reshape(-1)
        return idx, ok

    def scatter(self, s: T.Scatter) -> None:
        """Atomic updates, applied in row-major element order through the SIMT simulator's atomics
        (dsl/sim/memory.py: the same arithmetic, f16/bf16 rounded after every update)."""
        arr = self.args[s.param.index]
        assert isinstance(arr, np.ndarray)
        idx, ok = self._elements(s.indices, s.mask, arr)
        val = np.asarray(self.eval(s.value)).astype(arr.dtype).reshape(-1)
        ref = MemRef(s.param.name, arr, s.param.type.dtype, shared=False)
        ref.atomic(s.op, None, [i[ok] for i in idx], val[ok], None)
        if self.ledger is not None:
            self.ledger.updated(self, s.param, np.ravel_multi_index([i[ok] for i in idx], arr.shape))

    def gather(self, e: T.Gather) -> np.ndarray:
        arr = self.args[e.param.index]
        assert isinstance(arr, np.ndarray)
        idx, ok = self._elements(e.indices, e.mask, arr)
        out = np.full(ok.shape, e.padding, dtype=np_dtype(e.type.dtype))
        out[ok] = arr[tuple(i[ok] for i in idx)]
        return out.reshape(e.type.shape)

    def load(self, e: T.Load) -> np.ndarray:
        arr = self.args[e.param.index]
        assert isinstance(arr, np.ndarray)
        dt = np_dtype(e.type.dtype)
        out = np.full(e.type.shape, e.padding, dtype=dt)
        got = self._region(arr, e.index, e.type.shape)
        if got is None:
            return out
        at, part = got
        if self.ledger is not None and getattr(e.param.type, "atomic", False):
            self.ledger.read(self, e, self._flat(arr, at))
        out[part] = arr[at]
        return out

    def eval(self, e: T.TExpr) -> np.ndarray:
        dt = np_dtype(e.type.dtype)
        if isinstance(e, (T.Const, T.Full)):
            return np.full(e.type.shape, e.value, dtype=dt)
        if isinstance(e, T.ScalarArg):
            return np.asarray(self.args[e.param.index]).astype(dt)
        if isinstance(e, T.Read):
            return self.env[id(e.var)]
        if isinstance(e, T.BlockId):
            coords = self.coords if e.param is None else self.tile_coords(e.param)
            return np.asarray(coords[e.axis], np.int32)
        if isinstance(e, T.NumBlocks):
            counts = self.grid if e.param is None else self.tile_counts(e.param)
            return np.asarray(counts[e.axis], np.int32)
        if isinstance(e, T.ArrayDim):
            return np.asarray(np.shape(self.args[e.param.index])[e.axis], np.int32)
        if isinstance(e, T.Load):
            return self.load(e)
        if isinstance(e, T.Gather):
            return self.gather(e)
        if isinstance(e, T.Arange):
            return np.arange(e.type.shape[0], dtype=dt)
        if isinstance(e, T.LaunchValue):
            from dsl.tile.launch import value
            return value(self, e)
        with np.errstate(all="ignore"):
            return self._compute(e, dt)

    def _compute(self, e: T.TExpr, dt: np.dtype) -> np.ndarray:
        if isinstance(e, T.BinOp):
            x, y = self.eval(e.lhs), self.eval(e.rhs)
            if dt == np.bool_:
                fn = {"and_": np.logical_and, "or_": np.logical_or, "xor": np.logical_xor}[e.op]
                return fn(x, y)
            if e.op in minmax.OPS and e.type.dtype.is_float:     # selected in the operand type (f16/bf16 too)
                return minmax.minmax(e.op, x.astype(dt), y.astype(dt))
            if _f32_compute(dt):
                return _BIN[e.op](x.astype(np.float32), y.astype(np.float32)).astype(dt)
            if dt.kind in "iu" and e.op in ("floordiv", "mod"):
                safe = np.where(y == 0, 1, y)
                return np.where(y == 0, 0, _BIN[e.op](x, safe)).astype(dt)
            if dt.kind in "iu" and e.op in ("lshift", "rshift"):
                sh = (y & (dt.itemsize * 8 - 1)).astype(dt)
                return _BIN[e.op](x, sh).astype(dt)
            return np.asarray(_BIN[e.op](x, y)).astype(dt)
        if isinstance(e, T.UnaryOp):
            x = self.eval(e.operand)
            if e.op == "neg":
                return np.negative(x).astype(dt)
            if e.op == "not_":
                return np.logical_not(x)
            if e.op == "invert":
                return np.invert(x)
            return np.abs(x).astype(dt)
        if isinstance(e, T.Compare):
            x, y = self.eval(e.lhs), self.eval(e.rhs)
            return np.asarray(_CMP[e.op](x, y))
        if isinstance(e, T.Math):
            # the math table's one numerics rule (dsl/vocab/host.py), shared with the SIMT simulator
            xs = [self.eval(a) for a in e.args]
            return host.evaluate(e.fn, xs, np_dtype(e.args[0].type.dtype)).astype(dt)
        if isinstance(e, T.Where):
            return np.where(self.eval(e.cond), self.eval(e.then), self.eval(e.else_)).astype(dt)
        if isinstance(e, T.Cast):
            x = self.eval(e.operand)
            if dt == np.bool_:
                return x != 0
            if e.type.dtype.is_f8:       # the SIMT rule: nearest even, saturating (.satfinite)
                return arith.cast(x, e.operand.type.dtype, e.type.dtype)
            if dt.kind in "iu" and x.dtype.kind == "f":
                x = np.trunc(x.astype(np.float64))
            return x.astype(dt)
        if isinstance(e, T.Broadcast):
            return np.broadcast_to(self.eval(e.operand), e.type.shape)
        if isinstance(e, T.Reshape):
            return np.reshape(self.eval(e.operand), e.type.shape)
        if isinstance(e, T.Permute):
            return np.transpose(self.eval(e.operand), e.axes)
        if isinstance(e, T.Reduce):
            return self.reduce(e, dt)
        if isinstance(e, T.Matmul):
            a, b = self.eval(e.a), self.eval(e.b)
            a32, b32 = a.astype(np.float32), b.astype(np.float32)
            if a.dtype == np.float32:
                a32, b32 = tf32_round(a32), tf32_round(b32)
            r = np.matmul(a32, b32)
            if e.acc is not None:
                r = r + self.eval(e.acc)
            return r.astype(np.float32)
        raise TypeError(f"unknown tile expression {type(e).__name__}")  # pragma: no cover

    def reduce(self, e: T.Reduce, dt: np.dtype) -> np.ndarray:
        x = self.eval(e.operand)
        shape = e.type.shape
        if e.op == "sum":
            if _f32_compute(x.dtype):
                r = x.astype(np.float32).sum(axis=e.axis)
            else:
                r = x.sum(axis=e.axis, dtype=x.dtype)
        elif e.op in ("max", "min") and e.operand.type.dtype.is_float:
            r = minmax.reduce(e.op, x, e.axis)
        elif e.op in ("max", "min"):
            ufunc = np.maximum if e.op == "max" else np.minimum
            r = ufunc.reduce(x.reshape(-1) if e.axis is None else x, axis=0 if e.axis is None else e.axis)
        else:
            fn = np.argmax if e.op == "argmax" else np.argmin
            r = fn(x, axis=e.axis)
        return np.reshape(np.asarray(r), shape).astype(dt)


def simulate(fn: T.TileFunction, args: dict[int, object], grid: tuple[int, ...]) -> None:
    """Run every tile block of `grid` (partition tile counts per axis) in order; then check that the
    blocks met at their grid / cluster barriers (dsl/tile/launch.py)."""
    from dsl.tile.arrival_ledger import ArrivalLedger
    from dsl.tile.launch import BarrierCounts
    barriers = BarrierCounts(fn, grid)
    ledger = ArrivalLedger(fn, grid) if any(isinstance(e, T.Arrival) for e in T.body_exprs(fn.body)) else None
    for coords in np.ndindex(*grid):
        interp = BlockInterpreter(fn, args, grid, tuple(int(c) for c in coords))
        interp.barriers = barriers
        interp.ledger = ledger
        interp.run()
    barriers.check()
    if ledger is not None:
        ledger.check()

