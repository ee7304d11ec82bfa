"""The typing handlers of the tile ops: one function per row of the tile-op table (dsl/tile/tileops.py).

A handler receives the front end, the op's name, its arguments bound by name (dsl/tile/intrinsics.py:
every parameter present, defaults filled in), the call's AST node and location. It checks what only it
can check (compile-time values, parameter kinds), then builds typed tile IR through dsl/tile/ops.py, or
asks the front end (loads, stores, products) where the front end owns the construct.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.ir.nodes import Loc
from dsl.ir.types import F32, I32, ScalarType
from dsl.tile import ir as T
from dsl.tile import ops
from dsl.tile.arrivals import arrive, store_at  # noqa: F401 - handlers kept beside their checks
from dsl.tile.atomics import atomic_region, gather, scatter  # noqa: F401 - handlers kept beside their checks
from dsl.tile.types import ArrayParamType, PartitionParamType, TileType, as_scalar_type, tiles_by_number
from dsl.tile.values import ParamHandle
from dsl.vocab import math as vocab


def _dtype(fe: Any, v: object, node: ast.AST) -> ScalarType | None:
    if v is None:
        return None
    st = as_scalar_type(v)
    if st is None:
        raise fe.err(node, f"{v!r} is not a dtype (use f32, f16, bf16, i32, ...)")
    return st


def _tile(fe: Any, v: object, node: ast.AST, what: str) -> T.TExpr:
    if isinstance(v, T.TExpr):
        return v
    if isinstance(v, (int, float, bool)):
        return ops.literal(v, None, fe.loc(node))
    raise fe.err(node, f"{what} must be a tile, got {v!r}")


def _partition(fe: Any, v: object, node: ast.AST, call: str) -> T.TParam:
    if not isinstance(v, ParamHandle) or not isinstance(v.param.type, PartitionParamType):
        raise fe.err(node, f"{call} needs a tile.Partition parameter")
    return v.param


def grid_query(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    axis = a["axis"]
    nd = fe.grid_param.type.ndim
    if not isinstance(axis, int) or not 0 <= axis < nd:
        raise fe.err(node, f"tile.{name}(axis) needs a constant axis in [0, {nd}) (the grid "
                           f"partition `{fe.grid_param.name}` has {nd} dims)")
    cls = T.BlockId if name == "bid" else T.NumBlocks
    return cls(axis, TileType(I32, ()), loc)


def num_tiles(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    """A partition's tile count along its own axis: the grid's for a partition of the grid's ndim,
    its own for one matched to the grid by tile number (types.tiles_by_number)."""
    p = _partition(fe, a["partition"], node, "tile.num_tiles(partition, axis)")
    axis = a["axis"]
    nd = p.type.ndim
    if not isinstance(axis, int) or not 0 <= axis < nd:
        raise fe.err(node, f"{p.name}.num_tiles(axis) needs a constant axis in [0, {nd}) (`{p.name}` "
                           f"has {nd} dims)")
    own = p if tiles_by_number(p.type, fe.grid_param.type) else None
    return T.NumBlocks(axis, TileType(I32, ()), loc, own)


def load(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    arr = a["array"]
    if not isinstance(arr, ParamHandle):
        raise fe.err(node, "tile.load's first argument must be an array parameter")
    p = arr.param
    if isinstance(p.type, PartitionParamType):
        if a["index"] is not None or a["shape"] is not None:
            raise fe.err(node, f"load a partition's own tile with {p.name}.load(); other tiles of a "
                               f"partition are not readable (pass the array as tile.Array as well)")
        own = p if tiles_by_number(p.type, fe.grid_param.type) else None
        index = [T.BlockId(k, TileType(I32, ()), loc, own) for k in range(p.type.ndim)]
        return fe.make_load(p, index, p.type.tile_shape, a["padding"], node)
    assert isinstance(p.type, ArrayParamType)
    if a["index"] is None or a["shape"] is None:
        raise fe.err(node, f"tile.load({p.name}, index, shape): an array parameter needs the tile "
                           f"index and the tile shape")
    idx = a["index"]
    idx = list(idx) if isinstance(idx, tuple) else [idx]
    shape = a["shape"]
    if isinstance(shape, int):
        shape = (shape,)
    return fe.make_load(p, idx, shape, a["padding"], node)


def store(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    p = _partition(fe, a["partition"], node, "tile.store(partition, value, chunk=None)")
    return fe.store(p, a["value"], node, a["chunk"])


ORDER_NODES = (T.Const, T.ScalarArg, T.BinOp, T.UnaryOp, T.Cast, T.ArrayDim)   # what a block order may read


def block_order(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    """tile.block_order(run, group): a declaration of the kernel (TileFunction.block_order), read by the
    lowering before any tile is chosen, so `run` may use only parameters and constants."""
    what = "tile.block_order(run, group)"
    if not any(isinstance(st, ast.Expr) and st.value is node for st in fe.fdef.body) or fe.inlining:
        raise fe.err(node, f"{what} is a statement at the kernel's top level (not in a loop, a branch, a helper "
                           f"or an expression): it orders the blocks before any tile is chosen")
    if fe.block_order is not None:
        raise fe.err(node, f"{what} is given twice: a kernel has one block order")
    group = a["group"]
    if group is not None and (not isinstance(group, int) or isinstance(group, bool) or group < 1):
        raise fe.err(node, f"{what}: `group` must be a compile-time integer >= 1 (or None: the lowering switch "
                           f"block_group's), got {group!r}")
    run = a["run"]
    if isinstance(run, int) and not isinstance(run, bool):
        run = ops.literal(run, I32, loc)
    if not (isinstance(run, T.TExpr) and run.type.shape == () and run.type.dtype.is_int):
        raise fe.err(node, f"{what}: `run` must be an integer scalar, got "
                           f"{run.type if isinstance(run, T.TExpr) else repr(run)}")
    bad = next((e for e in T.walk_exprs(run) if not isinstance(e, ORDER_NODES)), None)
    if bad is not None:
        raise fe.err(node, f"{what}: `run` may use only the kernel's scalar parameters, array extents and "
                           f"constants (it is read before any tile is chosen), not {type(bad).__name__}")
    fe.block_order = (ops.cast(run, I32, loc), group)
    return None


def cdiv(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    """ceil(a / b) of integers, folded when both are compile-time ints (`tl.cdiv`)."""
    x, y = a["a"], a["b"]
    if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool) and not isinstance(y, bool):
        if y <= 0:
            raise fe.err(node, f"tile.cdiv(a, b) needs b > 0, got {y}")
        return -(-x // y)
    for v, what in ((x, "a"), (y, "b")):
        if not (isinstance(v, int) and not isinstance(v, bool)) and not (
                isinstance(v, T.TExpr) and v.type.shape == () and v.type.dtype.is_int):
            raise fe.err(node, f"tile.cdiv(a, b): `{what}` must be an integer scalar, got "
                               f"{v.type if isinstance(v, T.TExpr) else repr(v)}")
    return ops.binary("floordiv", ops.binary("sub", ops.binary("add", x, y, loc), 1, loc), y, loc)


def matmul(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    if name == "mma" and a["acc"] is None:
        raise fe.err(node, "tile.mma(a, b, acc) needs the f32 accumulator")
    return fe.matmul(a["a"], a["b"], a["acc"], node)


def reduce(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    x = _tile(fe, a["x"], node, "the reduced value")
    return ops.reduce(name, x, a["axis"], bool(a["keepdims"]), loc)


def where(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return fe.where(a["cond"], a["a"], a["b"], node)


def reshape(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return ops.reshape(_tile(fe, a["x"], node, "x"), a["shape"], loc)


def transpose(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    x = _tile(fe, a["x"], node, "x")
    axes = a["axes"]
    return ops.permute(x, tuple(reversed(range(x.type.ndim))) if axes is None else axes, loc)


def permute(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return ops.permute(_tile(fe, a["x"], node, "x"), a["axes"], loc)


def astype(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    dt = _dtype(fe, a["dtype"], node)
    if dt is None:
        raise fe.err(node, "astype needs a dtype")
    return ops.cast(_tile(fe, a["x"], node, "x"), dt, loc)


def zeros(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return ops.full(a["shape"], 0, _dtype(fe, a["dtype"], node) or F32, loc)


def full(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return ops.full(a["shape"], a["value"], _dtype(fe, a["dtype"], node), loc)


def arange(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    n = a["n"]
    if not isinstance(n, int):
        raise fe.err(node, "tile.arange(n) needs a compile-time n")
    ops.check_shape((n,), loc)
    r = T.Arange(TileType(I32, (n,)), loc)
    dt = _dtype(fe, a["dtype"], node)
    return ops.cast(r, dt, loc) if dt else r


def broadcast_to(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    shape = a["shape"]
    if not isinstance(shape, tuple):
        raise fe.err(node, "broadcast_to needs a compile-time shape tuple")
    return ops.broadcast(_tile(fe, a["x"], node, "x"), shape, loc)


def expand_dims(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    x = _tile(fe, a["x"], node, "x")
    ax = a["axis"]
    if not isinstance(ax, int) or not -x.type.ndim - 1 <= ax <= x.type.ndim:
        raise fe.err(node, "expand_dims needs a constant axis")
    ax %= x.type.ndim + 1
    shape = x.type.shape[:ax] + (1,) + x.type.shape[ax:]
    return T.Reshape(x, TileType(x.type.dtype, shape), loc)


def minmax(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    return ops.binary(name[:3], a["a"], a["b"], loc)


def abs_(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    x = a["x"]
    return ops.unary("abs", x if isinstance(x, T.TExpr) else ops.literal(x, None, loc), loc)


def math_row(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> object:
    """A row of the math table (dsl/vocab/math.py): not a tile op, the same handler for every row."""
    row = vocab.get(name)
    assert row is not None
    return ops.math_fn(name, [a[p] for p in row.params], loc)
