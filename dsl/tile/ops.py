"""Typing rules of tile operations: weak literals, promotion, NumPy broadcasting, result shapes.

Every function returns a fully typed tile IR node and makes implicit casts/broadcasts explicit.
"""
from __future__ import annotations

import math
import operator

from dsl.errors import DslCompileStageError
from dsl.ir.nodes import Loc
from dsl.ir.types import BF16, BOOL, F16, F32, I32, ScalarType, promote
from dsl.tile import ir as T
from dsl.tile.types import MAX_TILE_ELEMS, TileType, is_pow2
from dsl.vocab import math as vocab


class TileTypeError(DslCompileStageError):
    """A typing/shape mistake; the front end re-raises it as TileCompileError at the source location."""


PY_BINOPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
             "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow,
             "and_": operator.and_, "or_": operator.or_, "xor": operator.xor,
             "lshift": operator.lshift, "rshift": operator.rshift, "min": min, "max": max}
PY_CMPOPS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
             "gt": operator.gt, "ge": operator.ge}


def prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def check_shape(shape: tuple[int, ...], loc: Loc) -> None:
    for s in shape:
        if not is_pow2(s):
            raise TileTypeError(f"tile dimensions must be powers of two, got {shape}")
    if prod(shape) > MAX_TILE_ELEMS:
        raise TileTypeError(f"tile {shape} has {prod(shape)} elements; at most {MAX_TILE_ELEMS}")


def literal(v: object, like: ScalarType | None, loc: Loc) -> T.TExpr:
    """A Python number as a scalar tile. Literals are weak: they take the dtype of the other operand
    when the kinds agree (float literal with an int tile gives f32)."""
    if isinstance(v, bool):
        return T.Const(v, TileType(BOOL, ()), loc)
    if like is not None and like.is_f8:
        like = F32                     # arithmetic with an f8 tile happens in f32
    if isinstance(v, int):
        dt = like if like is not None and (like.is_int or like.is_float) else I32
        if dt.is_int and not _int_fits(v, dt):
            raise TileTypeError(f"integer literal {v} does not fit {dt}")
        return T.Const(float(v) if dt.is_float else v, TileType(dt, ()), loc)
    if isinstance(v, float):
        dt = like if like is not None and like.is_float else F32
        return T.Const(v, TileType(dt, ()), loc)
    raise TileTypeError(f"expected a number, got {v!r}")


def _int_fits(v: int, t: ScalarType) -> bool:
    if t.kind == "uint":
        return 0 <= v < (1 << t.bits)
    return -(1 << (t.bits - 1)) <= v < (1 << (t.bits - 1))


def _expr(v: object, like: ScalarType | None, loc: Loc) -> T.TExpr:
    if isinstance(v, T.TExpr):
        return v
    return literal(v, like, loc)


def cast(x: T.TExpr, dt: ScalarType, loc: Loc) -> T.TExpr:
    if x.type.dtype == dt:
        return x
    if isinstance(x, T.Const):
        v = x.value
        if dt == BOOL:
            return T.Const(bool(v), TileType(BOOL, ()), loc)
        if dt.is_float:
            return T.Const(float(v), TileType(dt, ()), loc)
        if isinstance(v, (bool, int)) and _int_fits(int(v), dt):
            return T.Const(int(v), TileType(dt, ()), loc)
    return T.Cast(x, TileType(dt, x.type.shape), loc)


def to_bool(x: T.TExpr, loc: Loc) -> T.TExpr:
    return cast(x, BOOL, loc)


def broadcast_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise TileTypeError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(reversed(out))


def broadcast(x: T.TExpr, shape: tuple[int, ...], loc: Loc) -> T.TExpr:
    if x.type.shape == shape:
        return x
    if broadcast_shapes(x.type.shape, shape) != shape:
        raise TileTypeError(f"cannot broadcast shape {x.type.shape} to {shape}")
    return T.Broadcast(x, TileType(x.type.dtype, shape), loc)


def _unify(a: object, b: object, loc: Loc) -> tuple[T.TExpr, T.TExpr]:
    if isinstance(a, T.TExpr) and not isinstance(b, T.TExpr):
        b_e = literal(b, a.type.dtype, loc)
        a_e = a
    elif isinstance(b, T.TExpr) and not isinstance(a, T.TExpr):
        a_e = literal(a, b.type.dtype, loc)
        b_e = b
    else:
        a_e, b_e = _expr(a, None, loc), _expr(b, None, loc)
    dt = promote(a_e.type.dtype, b_e.type.dtype)
    shape = broadcast_shapes(a_e.type.shape, b_e.type.shape)
    return (broadcast(cast(a_e, dt, loc), shape, loc), broadcast(cast(b_e, dt, loc), shape, loc))


def binary(op: str, a: object, b: object, loc: Loc) -> T.TExpr:
    x, y = _unify(a, b, loc)
    dt = x.type.dtype
    if op == "truediv" and not dt.is_float:
        x, y, dt = cast(x, F32, loc), cast(y, F32, loc), F32
    if op in ("and_", "or_", "xor", "lshift", "rshift") and dt.is_float:
        raise TileTypeError(f"bitwise `{op.rstrip('_')}` needs integer or bool tiles, got {dt}")
    if op in ("lshift", "rshift") and dt == BOOL:
        raise TileTypeError("shifts need integer tiles")
    if op in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow") and dt == BOOL:
        x, y, dt = cast(x, I32, loc), cast(y, I32, loc), I32
    if op == "pow":
        if not dt.is_float:
            raise TileTypeError("`**` on integer tiles needs a small constant exponent (0..8)")
        return T.Math("pow", [x, y], TileType(dt, x.type.shape), loc)
    if op == "add":
        fused = accumulate_into(x, y)
        if fused is not None:
            return fused
    return T.BinOp(op, x, y, TileType(dt, x.type.shape), loc)


def accumulate_into(x: T.TExpr, y: T.TExpr) -> T.TExpr | None:
    """`acc + a @ b` (either order, acc an f32 tile of the product's shape) as one product that
    accumulates into acc, as `tile.mma(a, b, acc)` does. On the tensor cores the accumulators then
    start from acc instead of a second set of f32 registers holding a @ b until the add: flash
    attention's `acc * alpha + p @ v` spilled 452 bytes at 128 query rows on 4 warps (ptxas, sm_90)
    and spills none this way. A K loop written `acc = acc + a @ b` becomes the GEMM loop."""
    for mm, other in ((y, x), (x, y)):
        if isinstance(mm, T.Matmul) and mm.acc is None and other.type.dtype == F32 \
                and other.type.shape == mm.type.shape:
            return T.Matmul(mm.a, mm.b, other, mm.type, mm.loc)
    return None


def compare(op: str, a: object, b: object, loc: Loc) -> T.TExpr:
    x, y = _unify(a, b, loc)
    return T.Compare(op, x, y, TileType(BOOL, x.type.shape), loc)


def widen_f8(x: T.TExpr, loc: Loc) -> T.TExpr:
    """An f8 tile as f32 (f8 is a storage format: every computation on it happens in f32)."""
    return cast(x, F32, loc) if x.type.dtype.is_f8 else x


def unary(op: str, x: T.TExpr, loc: Loc) -> T.TExpr:
    x = widen_f8(x, loc)
    dt = x.type.dtype
    if op == "pos":
        return x
    if op == "not_":
        return T.UnaryOp("not_", to_bool(x, loc), TileType(BOOL, x.type.shape), loc)
    if op == "invert":
        if dt.is_float:
            raise TileTypeError("`~` needs integer or bool tiles")
        return T.UnaryOp("not_" if dt == BOOL else "invert", x, x.type, loc)
    if op in ("neg", "abs") and dt == BOOL:
        x = cast(x, I32, loc)
    if op == "abs" and dt.kind == "uint":
        return x
    return T.UnaryOp(op, x, x.type, loc)


def _unify_all(args: list, loc: Loc) -> list[T.TExpr]:
    """_unify for any number of operands: literals take the first tile's dtype, then promote and
    broadcast together."""
    first = next((a for a in args if isinstance(a, T.TExpr)), None)
    like = first.type.dtype if first is not None else None
    es = [a if isinstance(a, T.TExpr) else literal(a, like, loc) for a in args]
    dt, shape = es[0].type.dtype, es[0].type.shape
    for e in es[1:]:
        dt, shape = promote(dt, e.type.dtype), broadcast_shapes(shape, e.type.shape)
    return [broadcast(cast(e, dt, loc), shape, loc) for e in es]


def math_fn(fn: str, args: list, loc: Loc) -> T.TExpr:
    """A row of the math table (dsl/vocab/math.py) on tiles. Integer operands become f32, except that
    ROUNDING rows (floor, ...) pass them through and PREDICATE rows (isnan, ...) are False on them;
    the result has the operands' float dtype (bool for predicates)."""
    row = vocab.get(fn)
    if row is None:
        raise TileTypeError(f"tile.{fn} is not a math function (dsl/vocab/math.py)")
    if len(args) != row.arity:
        raise TileTypeError(f"tile.{fn} takes {row.arity} argument{'s' if row.arity > 1 else ''}, "
                            f"got {len(args)}")
    if row.arity == 1:
        x = widen_f8(_expr(args[0], F32, loc), loc)
        if not x.type.dtype.is_float:
            if row.typing == vocab.PREDICATE:
                return T.Full(False, TileType(BOOL, x.type.shape), loc)
            if row.typing == vocab.ROUNDING:
                return x
            x = cast(x, F32, loc)
        xs = [x]
    else:
        xs = _unify_all(args, loc)
        if not xs[0].type.dtype.is_float:
            xs = [cast(x, F32, loc) for x in xs]
    dt = BOOL if row.typing == vocab.PREDICATE else xs[0].type.dtype
    return T.Math(fn, xs, TileType(dt, xs[0].type.shape), loc)


def where(c: T.TExpr, a: object, b: object, loc: Loc) -> T.TExpr:
    c = to_bool(c, loc)
    x, y = _unify(a, b, loc)
    shape = broadcast_shapes(c.type.shape, x.type.shape)
    return T.Where(broadcast(c, shape, loc), broadcast(x, shape, loc), broadcast(y, shape, loc),
                   TileType(x.type.dtype, shape), loc)


def reduce(op: str, x: T.TExpr, axis: object, keepdims: bool, loc: Loc) -> T.TExpr:
    nd = x.type.ndim
    if axis is not None:
        if not isinstance(axis, int) or not -nd <= axis < max(nd, 1):
            raise TileTypeError(f"reduction axis must be a constant in [-{nd}, {nd}), got {axis!r}")
        axis %= max(nd, 1)
        if nd == 0:
            axis = None
    if axis is None:
        shape: tuple[int, ...] = (1,) * nd if keepdims else ()
    else:
        shape = tuple(1 if i == axis else s for i, s in enumerate(x.type.shape) if keepdims or i != axis)
    x = widen_f8(x, loc)
    dt = x.type.dtype
    if op in ("argmax", "argmin"):
        rdt = I32
    elif op == "sum" and dt == BOOL:
        rdt, x = I32, cast(x, I32, loc)
    else:
        rdt = dt
    return T.Reduce(op, x, axis, keepdims, TileType(rdt, shape), loc)


def reshape(x: T.TExpr, shape: tuple, loc: Loc) -> T.TExpr:
    if not isinstance(shape, tuple) or not all(isinstance(s, int) for s in shape):
        raise TileTypeError(f"reshape needs a compile-time tuple of ints, got {shape!r}")
    if -1 in shape:
        known = prod(tuple(s for s in shape if s != -1))
        shape = tuple(x.type.size // known if s == -1 else s for s in shape)
    if prod(shape) != x.type.size:
        raise TileTypeError(f"cannot reshape {x.type.shape} ({x.type.size} elements) to {shape}")
    check_shape(shape, loc)
    return T.Reshape(x, TileType(x.type.dtype, shape), loc)


def permute(x: T.TExpr, axes: tuple, loc: Loc) -> T.TExpr:
    nd = x.type.ndim
    valid = isinstance(axes, tuple) and \
        sorted(a % nd if isinstance(a, int) else -1 for a in axes) == list(range(nd))
    if not valid:
        raise TileTypeError(f"permute needs a permutation of range({nd}), got {axes!r}")
    axes = tuple(a % nd for a in axes)
    if axes == tuple(range(nd)):
        return x
    return T.Permute(x, axes, TileType(x.type.dtype, tuple(x.type.shape[a] for a in axes)), loc)


def matmul(a: T.TExpr, b: T.TExpr, acc: T.TExpr | None, loc: Loc) -> T.TExpr:
    if a.type.ndim != 2 or b.type.ndim != 2:
        raise TileTypeError(f"matmul needs 2-D tiles, got {a.type.shape} @ {b.type.shape}")
    (m, k), (k2, n) = a.type.shape, b.type.shape
    if k != k2:
        raise TileTypeError(f"matmul inner dimensions differ: {a.type.shape} @ {b.type.shape}")
    f8 = a.type.dtype.is_f8 and b.type.dtype.is_f8     # e4m3 / e5m2 in any combination
    if not f8 and (a.type.dtype != b.type.dtype or a.type.dtype not in (F16, BF16, F32)):
        raise TileTypeError(f"matmul takes two f16, two bf16, two f32 (tf32) or two f8 (f8e4m3fn / f8e5m2) "
                            f"tiles, got {a.type.dtype} and {b.type.dtype}; cast with .astype(...)")
    out = TileType(F32, (m, n))
    if acc is not None:
        if acc.type.shape != (m, n):
            raise TileTypeError(f"accumulator shape {acc.type.shape} != {(m, n)}")
        if acc.type.dtype != F32:
            raise TileTypeError(f"the accumulator must be f32, got {acc.type.dtype}")
    return T.Matmul(a, b, acc, out, loc)


def full(shape: object, value: object, dt: ScalarType | None, loc: Loc) -> T.TExpr:
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(shape, tuple) or not all(isinstance(s, int) for s in shape):
        raise TileTypeError(f"shape must be a compile-time tuple of ints, got {shape!r}")
    check_shape(shape, loc)
    if isinstance(value, T.TExpr):
        v = cast(value, dt, loc) if dt else value
        return broadcast(v, shape, loc)
    lit = literal(value, dt, loc)
    if dt is not None:
        lit = cast(lit, dt, loc)
    value_ = lit.value  # type: ignore[attr-defined]
    if isinstance(value_, float) and not math.isfinite(value_) and not lit.type.dtype.is_float:
        raise TileTypeError(f"{value} does not fit {dt}")
    return T.Full(lit.value, TileType(lit.type.dtype, shape), loc)  # type: ignore[attr-defined]
