"""Atomics, scatter and gather in tile kernels: the handlers of their rows of the tile-op table.

Why a separate parameter kind: a tile block may write only its own partition tile, so a result that
many blocks add into (a global norm, a histogram) needs memory that no block owns. A `tile.Atomic`
array is that memory: any block may update any element, but only atomically (tile.atomic_<op> on a
tile region, tile.scatter_<op> at index tiles), and no block loads it (others may be updating it);
the launch contract records its access as "atomic". Every form is one `Scatter` statement of the
tile IR (the region form's index tiles are made here), so the simulator and the lowering have one
case each. `tile.gather` reads a read-only `tile.Array` at index tiles.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.ir.nodes import Loc
from dsl.ir.types import I64, SCALARS, ScalarType
from dsl.tile import ir as T
from dsl.tile import ops
from dsl.tile.types import ArrayParamType, PartitionParamType, TileType
from dsl.tile.values import ParamHandle
from dsl.vocab.atomics import ATOMIC_DTYPES as VOCAB_DTYPES
from dsl.vocab.atomics import TILE_OPS, atomic_dtype_ok

# The element types each tile atomic takes: the rows of the one atomics table for the tile ops.
ATOMIC_DTYPES: dict[str, tuple[str, ...]] = {op: VOCAB_DTYPES[op] for op in TILE_OPS}


def _target(fe: Any, v: object, node: ast.AST, call: str, op: str) -> T.TParam:
    """The tile.Atomic parameter `v` that `call` updates, or a compile error saying what to declare."""
    if not isinstance(v, ParamHandle):
        raise fe.err(node, f"{call}: the first argument must be a tile.Atomic array parameter, got {v!r}")
    p = v.param
    ty = p.type
    if isinstance(ty, PartitionParamType):
        raise fe.err(node, f"{call}: `{p.name}` is a tile.Partition, whose tiles belong to one block each; "
                           f"declare the array that every block updates as tile.Atomic[{ty.dtype}, {ty.ndim}]")
    if not isinstance(ty, ArrayParamType) or not ty.atomic:
        raise fe.err(node, f"{call}: `{p.name}` is a tile.Array, which is read-only; declare it "
                           f"tile.Atomic[{ty.dtype}, {ty.ndim}] to update it atomically")  # type: ignore[union-attr]
    if not atomic_dtype_ok(op, ty.dtype):
        raise fe.err(node, f"{call}: atomic {op} is not available for {ty.dtype} arrays (`{p.name}`); it "
                           f"works on {', '.join(ATOMIC_DTYPES[op])}")
    return p


def _value(fe: Any, v: object, dtype: ScalarType, node: ast.AST, loc: Loc) -> T.TExpr:
    """The updates as a tile of the array's dtype (a literal takes it; a tile is cast, as stores do)."""
    if isinstance(v, (int, float, bool)):
        return ops.cast(ops.literal(v, dtype, loc), dtype, loc)
    e = fe.as_expr(v, node, like=dtype)
    return ops.cast(e, dtype, loc)


def region_operands(fe: Any, p: T.TParam, a: dict, node: ast.AST, loc: Loc, call: str) -> tuple[T.TExpr, list]:
    """(`value` as a tile of `p`'s dtype and ndim, the index components as written) of an op on the tile at
    `index` of array `p` whose shape is the value's (tile.atomic_<op>, tile.store_at)."""
    nd = p.type.ndim
    value = _value(fe, a["value"], p.type.dtype, node, loc)
    if value.type.shape == ():
        value = T.Reshape(value, TileType(value.type.dtype, (1,) * nd), loc)
    if len(value.type.shape) != nd:
        raise fe.err(node, f"{call}: the value is a tile of shape {value.type.shape}, `{p.name}` has {nd} axes; "
                           f"reshape it to {nd} axes (its shape is the region's)")
    index = a["index"]
    index = list(index) if isinstance(index, tuple) else [index]
    if len(index) != nd:
        raise fe.err(node, f"{call}: index has {len(index)} components, `{p.name}` has {nd} axes")
    return value, index


def atomic_region(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> None:
    """tile.atomic_<op>(array, index, value): `value`'s elements into the tile at `index` (tile units
    of value's shape, as tile.load's index), masked at the array's edge."""
    op = name.removeprefix("atomic_")
    call = f"tile.{name}(array, index, value)"
    p = _target(fe, a["array"], node, call, op)
    value, index = region_operands(fe, p, a, node, loc, call)
    shape = value.type.shape
    indices, region = [], []
    for k, c in enumerate(index):
        e = fe.as_expr(c, node, like=I64)
        if e.type.shape != () or not e.type.dtype.is_int:
            raise fe.err(node, f"{call}: index components must be integer scalars (tile units), got {e.type}")
        region.append(ops.cast(e, I64, loc))
        base = ops.binary("mul", region[-1], shape[k], loc)
        offs = ops.cast(T.Arange(TileType(SCALARS["i32"], (shape[k],)), loc), I64, loc)
        unit = tuple(shape[k] if j == k else 1 for j in range(len(shape)))
        offs = T.Reshape(offs, TileType(I64, unit), loc)
        indices.append(ops.broadcast(ops.binary("add", base, offs, loc), shape, loc))
    fe.emit(T.Scatter(op, p, indices, value, None, loc, region))


def _index_tiles(fe: Any, v: object, nd: int, node: ast.AST, call: str, p: T.TParam) -> list[T.TExpr]:
    """One integer index tile (or scalar) per axis of `p`: a tile for a 1-D array, a tuple otherwise."""
    items = list(v) if isinstance(v, tuple) else [v]
    if len(items) != nd:
        raise fe.err(node, f"{call}: `{p.name}` has {nd} axes, so the indices are {nd} integer tiles "
                           f"(a tuple, one per axis); got {len(items)}")
    out = []
    for k, it in enumerate(items):
        e = fe.as_expr(it, node, like=SCALARS["i32"])
        if not e.type.dtype.is_int:
            raise fe.err(node, f"{call}: the indices along axis {k} must be an integer tile, got {e.type}")
        out.append(e)
    return out


def _common(fe: Any, tiles: list[T.TExpr], node: ast.AST, call: str, loc: Loc) -> list[T.TExpr]:
    """`tiles` broadcast to their common shape (NumPy rules)."""
    shape: tuple[int, ...] = ()
    try:
        for t in tiles:
            shape = ops.broadcast_shapes(shape, t.type.shape)
        return [ops.broadcast(t, shape, loc) for t in tiles]
    except ops.TileTypeError:
        raise fe.err(node, f"{call}: the indices, values and mask do not broadcast together "
                           f"(shapes {', '.join(str(t.type.shape) for t in tiles)})") from None


def _mask(fe: Any, m: object, node: ast.AST, loc: Loc) -> T.TExpr | None:
    if m is None:
        return None
    if isinstance(m, bool):
        return ops.literal(m, None, loc)
    return ops.to_bool(fe.as_expr(m, node), loc)


def scatter(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> None:
    """tile.scatter_<op>(array, indices, values, mask=None): values[e] into array[indices[e]]."""
    op = name.removeprefix("scatter_")
    call = f"tile.{name}(array, indices, values, mask=None)"
    p = _target(fe, a["array"], node, call, op)
    idx = _index_tiles(fe, a["indices"], p.type.ndim, node, call, p)
    value = _value(fe, a["values"], p.type.dtype, node, loc)
    mask = _mask(fe, a["mask"], node, loc)
    tiles = _common(fe, idx + [value] + ([mask] if mask is not None else []), node, call, loc)
    if tiles[0].type.shape == ():
        tiles = [T.Reshape(t, TileType(t.type.dtype, (1,)), loc) for t in tiles]
    n = len(idx)
    fe.emit(T.Scatter(op, p, tiles[:n], tiles[n], tiles[n + 1] if mask is not None else None, loc))


def gather(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> T.TExpr:
    """tile.gather(array, indices, padding=0, mask=None): array[indices[e]], `padding` outside the
    array or where `mask` is False."""
    call = "tile.gather(array, indices, padding=0, mask=None)"
    v = a["array"]
    if not isinstance(v, ParamHandle) or not isinstance(v.param.type, ArrayParamType):
        raise fe.err(node, f"{call}: the first argument must be a tile.Array parameter, got "
                           f"{v.param.name if isinstance(v, ParamHandle) else v!r}"
                           + (" (a partition's other tiles belong to other blocks)" if isinstance(v, ParamHandle)
                              else ""))
    p = v.param
    if p.type.atomic:  # type: ignore[union-attr]
        raise fe.err(node, f"{call}: `{p.name}` is a tile.Atomic array, which other blocks may be "
                           f"updating while this one reads; read it in a later kernel")
    padding = a["padding"]
    if not isinstance(padding, (int, float, bool)):
        raise fe.err(node, f"{call}: padding must be a compile-time number (e.g. 0, -math.inf)")
    idx = _index_tiles(fe, a["indices"], p.type.ndim, node, call, p)
    mask = _mask(fe, a["mask"], node, loc)
    tiles = _common(fe, idx + ([mask] if mask is not None else []), node, call, loc)
    shape = tiles[0].type.shape
    ops.check_shape(shape, loc)
    n = len(idx)
    return T.Gather(p, tiles[:n], padding, tiles[n] if mask is not None else None,
                    TileType(p.type.dtype, shape), loc)

