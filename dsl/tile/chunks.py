"""Chunked stores: a tile block writes its own partition tile piece by piece, `out.store(v, chunk=(0, k))`,
as Triton's layer norm stores a row BLOCK columns at a time inside a loop.

Only the block's own tile is reachable, so two blocks never write one element (docs/tile.md, "Safety
model"): the value is the chunk and its shape must divide the partition's tile shape (checked here, at
compile time); `chunk` counts chunks inside the block's own tile, never tiles of the array (an index
made from `tile.bid` is refused: the block's tile is implied); a constant index outside the tile is a
compile error, and a run-time one outside it writes nothing (the simulator and the lowering test it
once per chunk, a test uniform across the block, then mask the array's edge per element as whole-tile
stores do).
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.ir.types import BOOL, I32
from dsl.tile import ir as T
from dsl.tile import ops

_HINT = ("the value is the chunk: give it the partition's axes, e.g. load it as tile.load(x, (r, k), "
         "(1, BLOCK)) or write v[None, :]")
_FIT = ("pick a chunk no larger than the tile, or partition with a tile that spans the row: "
        "tile.partition(y, (1, N rounded up to a power of two))")


def chunk_store(fe: Any, p: T.TParam, value: object, chunk: object, node: ast.AST) -> T.Store:
    """The Store of `value` as chunk `chunk` of this block's own tile of partition `p` (front end:
    `fe`, the call: `node`); compile errors name what is wrong and where."""
    ty = p.type
    tile_shape: tuple[int, ...] = ty.tile_shape  # type: ignore[union-attr]
    call = f"{p.name}.store(value, chunk=...)"
    if not isinstance(value, (T.TExpr, T.TVar)):
        raise fe.err(node, f"{call}: the value must be a tile of {ty.ndim} axes (the chunk), got "
                           f"{value!r}")
    v = fe.as_expr(value, node)
    shape = v.type.shape
    if len(shape) != ty.ndim:
        raise _error(fe, node, f"{call}: the value is the chunk, so it needs `{p.name}`'s {ty.ndim} "
                               f"axes; got a tile of shape {shape}")
    for k, (c, t) in enumerate(zip(shape, tile_shape)):
        if c > t or t % c:
            raise _error(fe, node, f"{call}: a chunk of shape {shape} does not divide `{p.name}`'s tile "
                                   f"{tile_shape} along axis {k} ({c} into {t}): chunks must tile the "
                                   f"block's own tile", _FIT)
    index = list(chunk) if isinstance(chunk, tuple) else [chunk]
    if len(index) != ty.ndim:
        raise fe.err(node, f"{call}: chunk has {len(index)} components, `{p.name}` has {ty.ndim} axes")
    return T.Store(p, _cast(v, ty.dtype, fe.loc(node)), fe.loc(node),
                   [_component(fe, p, k, c, shape, tile_shape, node) for k, c in enumerate(index)])


def _component(fe: Any, p: T.TParam, k: int, c: object, shape: tuple[int, ...],
               tile_shape: tuple[int, ...], node: ast.AST) -> T.TExpr:
    """Chunk index component `c` along axis `k`: a constant inside the tile, or an integer scalar
    that does not come from tile.bid."""
    count = tile_shape[k] // shape[k]
    loc = fe.loc(node)
    if isinstance(c, int) and not isinstance(c, bool):
        if not 0 <= c < count:
            raise fe.err(node, f"{p.name}.store: chunk index {c} along axis {k} is outside this block's "
                               f"tile of `{p.name}` (a block writes only its own tile): the tile "
                               f"{tile_shape} holds {count} chunk{'s' if count != 1 else ''} of "
                               f"{shape[k]} along axis {k} (index 0{f' to {count - 1}' if count > 1 else ''})")
        return ops.literal(c, I32, loc)
    e = fe.as_expr(c, node, like=I32)
    if e.type.shape != () or not (e.type.dtype.is_int or e.type.dtype == BOOL):
        raise fe.err(node, f"{p.name}.store: chunk index components must be integer scalars, got "
                           f"{e.type} along axis {k}")
    if _from_block_id(fe, e, set()):
        raise _bid_error(fe, node, p, k)
    return ops.cast(e, I32, loc)


def _bid_error(fe: Any, node: ast.AST, p: T.TParam, k: int) -> Exception:
    """The refusal of a chunk index made from tile.bid (a Triton habit: `Y + row * stride + cols`)."""
    return _error(fe, node, f"{p.name}.store: chunk index component {k} comes from tile.bid; chunk= counts "
                            f"chunks inside this block's own tile of `{p.name}`, which the block's tile "
                            f"coordinate already selects",
                  "write the row's chunk as chunk=(0, k), not (tile.bid(0), k)")


def _error(fe: Any, node: ast.AST, msg: str, hint: str = _HINT) -> Exception:
    from dsl.tile.errors import TileCompileError
    return TileCompileError(msg, fe.loc(node), hint)


def _cast(v: T.TExpr, dtype, loc) -> T.TExpr:
    return v if v.type.dtype == dtype else ops.cast(v, dtype, loc)


def _from_block_id(fe: Any, e: T.TExpr, seen: set[int]) -> bool:
    """Does `e` read tile.bid, directly or through a variable assigned from it (any assignment so far)?"""
    for x in T.walk_exprs(e):
        if isinstance(x, T.BlockId):
            return True
        if isinstance(x, T.Read) and id(x.var) not in seen:
            seen.add(id(x.var))
            for body in fe.body_stack:
                for s in T.walk_stmts(body):
                    if isinstance(s, T.Assign) and s.var is x.var and _from_block_id(fe, s.value, seen):
                        return True
    return False
