"""Argument checking and typing of tile.* calls inside a kernel body: HANDLERS maps each name to its
handler; math functions are the rows of dsl/vocab/math.py."""
from __future__ import annotations

import ast

from dsl.ir.types import F32, I32, ScalarType
from dsl.tile import ir as T
from dsl.tile import ops
from dsl.tile.types import ArrayParamType, PartitionParamType, TileType, as_scalar_type
from dsl.tile.values import ParamHandle
from dsl.vocab import math as vocab

_SIGS = {
    "bid": ["axis"], "num_blocks": ["axis"], "load": ["array", "index", "shape", "padding"],
    "store": ["partition", "value"], "matmul": ["a", "b", "acc"], "mma": ["a", "b", "acc"],
    "sum": ["x", "axis", "keepdims"], "max": ["x", "axis", "keepdims"], "min": ["x", "axis", "keepdims"],
    "argmax": ["x", "axis", "keepdims"], "argmin": ["x", "axis", "keepdims"], "where": ["cond", "a", "b"],
    "reshape": ["x", "shape"], "transpose": ["x"], "permute": ["x", "axes"], "astype": ["x", "dtype"],
    "zeros": ["shape", "dtype"], "full": ["shape", "value", "dtype"], "arange": ["n", "dtype"],
    "broadcast_to": ["x", "shape"], "expand_dims": ["x", "axis"], "maximum": ["a", "b"],
    "minimum": ["a", "b"], "abs": ["x"],
}   # math functions: their row's params (dsl/vocab/math.py)
_DEFAULTS = {"padding": 0, "acc": None, "axis": None, "keepdims": False, "dtype": None}


def _bind(fe, name: str, params: list[str], args: list, kwargs: dict, node: ast.AST) -> dict:
    if len(args) > len(params):
        raise fe.err(node, f"tile.{name} takes at most {len(params)} arguments ({', '.join(params)})")
    bound = dict(zip(params, args))
    for k, v in kwargs.items():
        if k not in params or k in bound:
            raise fe.err(node, f"tile.{name}: unexpected or repeated argument `{k}`")
        bound[k] = v
    for p in params:
        if p not in bound:
            if p not in _DEFAULTS:
                raise fe.err(node, f"tile.{name}: missing argument `{p}`")
            bound[p] = _DEFAULTS[p]
    return bound


def _dtype(fe, v: object, node: ast.AST) -> ScalarType | None:
    if v is None:
        return None
    st = as_scalar_type(v)
    if st is None:
        raise fe.err(node, f"{v!r} is not a dtype (use f32, f16, bf16, i32, ...)")
    return st


def _tile(fe, v: object, node: ast.AST, what: str) -> T.TExpr:
    if isinstance(v, T.TExpr):
        return v
    if isinstance(v, (int, float, bool)):
        return ops.literal(v, None, fe.loc(node))
    raise fe.err(node, f"{what} must be a tile, got {v!r}")


def call_intrinsic(fe, name: str, args: list, kwargs: dict, node: ast.AST) -> object:
    """tile.<name>(...) inside a kernel: the handler of HANDLERS, or the row of the math table."""
    handler = HANDLERS.get(name)
    if handler is not None:
        params = _SIGS[name]
    else:
        row = vocab.get(name)
        if row is None:
            raise fe.err(node, f"tile.{name} is no longer a math function (it was removed from the math "
                               "table, dsl/vocab/math.py)")
        handler, params = _math, list(row.params)
    a = _bind(fe, name, params, args, kwargs, node)
    try:
        return handler(fe, name, a, node, fe.loc(node))
    except ops.TileTypeError as exc:
        raise fe.err(node, str(exc)) from None


# ------------------------------------------------------------------------------------- handlers
def _grid_query(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    axis = a["axis"]
    nd = fe.grid_param.type.ndim
    if not isinstance(axis, int) or not 0 <= axis < nd:
        raise fe.err(node, f"tile.{name}(axis) needs a constant axis in [0, {nd}) (the grid "
                           f"partition `{fe.grid_param.name}` has {nd} dims)")
    cls = T.BlockId if name == "bid" else T.NumBlocks
    return cls(axis, TileType(I32, ()), loc)


def partition_tiles(fe, p: T.TParam, args: list, kwargs: dict, node: ast.AST) -> T.NumBlocks:
    """`p.num_tiles(axis)` of a partition matched to the grid by tile number (types.tiles_by_number):
    its own tile count along its own axis, since the grid's axes are not its axes."""
    axis = _bind(fe, "num_blocks", _SIGS["num_blocks"], args, kwargs, node)["axis"]
    nd = p.type.ndim
    if not isinstance(axis, int) or not 0 <= axis < nd:
        raise fe.err(node, f"{p.name}.num_tiles(axis) needs a constant axis in [0, {nd}) (`{p.name}` "
                           f"has {nd} dims)")
    return T.NumBlocks(axis, TileType(I32, ()), fe.loc(node), p)


def _load(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    arr = a["array"]
    if not isinstance(arr, ParamHandle):
        raise fe.err(node, "tile.load's first argument must be an array parameter")
    p = arr.param
    if isinstance(p.type, PartitionParamType):
        raise fe.err(node, f"load a partition's own tile with {p.name}.load(); other tiles of a "
                           f"partition are not readable (pass the array as tile.Array as well)")
    assert isinstance(p.type, ArrayParamType)
    idx = a["index"]
    idx = list(idx) if isinstance(idx, tuple) else [idx]
    shape = a["shape"]
    if isinstance(shape, int):
        shape = (shape,)
    return fe.make_load(p, idx, shape, a["padding"], node)


def _store(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    part = a["partition"]
    if not isinstance(part, ParamHandle) or not isinstance(part.param.type, PartitionParamType):
        raise fe.err(node, "tile.store(partition, value) needs a tile.Partition parameter")
    return fe.store(part.param, a["value"], node)


def _matmul(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    if name == "mma" and a["acc"] is None:
        raise fe.err(node, "tile.mma(a, b, acc) needs the f32 accumulator")
    return fe.matmul(a["a"], a["b"], a["acc"], node)


def _reduce(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    x = _tile(fe, a["x"], node, "the reduced value")
    return ops.reduce(name, x, a["axis"], bool(a.get("keepdims", False)), loc)


def _where(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return fe.where(a["cond"], a["a"], a["b"], node)


def _reshape(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return ops.reshape(_tile(fe, a["x"], node, "x"), a["shape"], loc)


def _transpose(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    x = _tile(fe, a["x"], node, "x")
    return ops.permute(x, tuple(reversed(range(x.type.ndim))), loc)


def _permute(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return ops.permute(_tile(fe, a["x"], node, "x"), a["axes"], loc)


def _astype(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    dt = _dtype(fe, a["dtype"], node)
    if dt is None:
        raise fe.err(node, "astype needs a dtype")
    return ops.cast(_tile(fe, a["x"], node, "x"), dt, loc)


def _zeros(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return ops.full(a["shape"], 0, _dtype(fe, a["dtype"], node) or F32, loc)


def _full(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return ops.full(a["shape"], a["value"], _dtype(fe, a["dtype"], node), loc)


def _arange(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    n = a["n"]
    if not isinstance(n, int):
        raise fe.err(node, "tile.arange(n) needs a compile-time n")
    ops.check_shape((n,), loc)
    r = T.Arange(TileType(I32, (n,)), loc)
    dt = _dtype(fe, a["dtype"], node)
    return ops.cast(r, dt, loc) if dt else r


def _broadcast_to(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    shape = a["shape"]
    if not isinstance(shape, tuple):
        raise fe.err(node, "broadcast_to needs a compile-time shape tuple")
    return ops.broadcast(_tile(fe, a["x"], node, "x"), shape, loc)


def _expand_dims(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    x = _tile(fe, a["x"], node, "x")
    ax = a["axis"]
    if not isinstance(ax, int) or not -x.type.ndim - 1 <= ax <= x.type.ndim:
        raise fe.err(node, "expand_dims needs a constant axis")
    ax %= x.type.ndim + 1
    shape = x.type.shape[:ax] + (1,) + x.type.shape[ax:]
    return T.Reshape(x, TileType(x.type.dtype, shape), loc)


def _minmax(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    return ops.binary(name[:3], a["a"], a["b"], loc)


def _abs(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    x = a["x"]
    return ops.unary("abs", x if isinstance(x, T.TExpr) else ops.literal(x, None, loc), loc)


def _math(fe, name: str, a: dict, node: ast.AST, loc) -> object:
    row = vocab.get(name)
    assert row is not None
    return ops.math_fn(name, [a[p] for p in row.params], loc)


HANDLERS = {
    "bid": _grid_query, "num_blocks": _grid_query, "load": _load, "store": _store, "matmul": _matmul,
    "mma": _matmul, "sum": _reduce, "max": _reduce, "min": _reduce, "argmax": _reduce,
    "argmin": _reduce, "where": _where, "reshape": _reshape, "transpose": _transpose,
    "permute": _permute, "astype": _astype, "zeros": _zeros, "full": _full, "arange": _arange,
    "broadcast_to": _broadcast_to, "expand_dims": _expand_dims, "maximum": _minmax, "minimum": _minmax,
    "abs": _abs,
}
