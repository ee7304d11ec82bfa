"""Blocks whose tiles lie wholly inside their arrays run without bounds tests (lowering switch
`interior_tiles`).

Every tile access tests each element (or run) against the array's extent, so that the edge tiles of a
ragged array read padding and drop their stores: two 64-bit compares and a predicate an access, and a
padding move a loaded register. A straight-line tile program (no loops, products, gathers, atomics or
chunked stores) whose tile indices are block-uniform scalars (tile.bid, scalar arguments, constants and
arithmetic on them) can tell before it starts whether all of its tiles are inside: then it runs a copy
of itself lowered without those tests, and the edge blocks run the tested copy. CUTLASS's predicated
tile iterators and torch's vectorised elementwise kernels split their work the same way.
"""
from __future__ import annotations

import dataclasses

from dsl.ir import nodes as N
from dsl.ir.types import INDEX
from dsl.tile import ir as T

_UNIFORM_LEAVES = (T.BlockId, T.ScalarArg, T.Const, T.NumBlocks, T.ArrayDim)
_ELEMENTWISE = (T.BinOp, T.UnaryOp, T.Compare, T.Math, T.Where, T.Cast, T.Broadcast, T.Reduce, T.Reshape,
                T.Permute, T.Full, T.Arange, T.Read, T.Const, T.ScalarArg, T.BlockId, T.NumBlocks, T.ArrayDim,
                T.Load)


def lower_inside_and_edge(L, body: list[T.TStmt]) -> bool:
    """Lower `body` twice behind the inside test: a copy without bounds tests, then the tested one for
    the edge blocks. False, with nothing emitted, when the program does not qualify."""
    inside = interior_condition(L, body)
    if inside is None:
        return False
    L.interior = True
    fast = L.block_of(lambda: L.stmts(body))
    L.interior = False
    seen = len(L.slow_paths)
    edge = L.block_of(lambda: L.stmts(body))
    del L.slow_paths[seen:]                 # the same program twice: its slow paths once
    L.emit(N.If(inside, fast, edge))
    return True


def interior_condition(L, body: list[T.TStmt]) -> N.Expr | None:
    """The block-uniform test "every tile this program loads or stores is wholly inside its array", its
    scalars lowered here (before the two copies), or None when the program does not qualify."""
    defs: dict[int, T.TExpr] = {}
    boxes: list[tuple[T.TParam, list[T.TExpr] | None, tuple[int, ...]]] = []
    for s in body:
        if isinstance(s, T.Assign):
            if L.assignments.get(id(s.var), 0) != 1:
                return None
            defs[id(s.var)] = s.value
        elif isinstance(s, T.Store) and s.chunk is None:
            boxes.append((s.param, None, tuple(s.param.type.tile_shape)))
        else:
            return None
        for n in _walk(s.value):
            if not isinstance(n, _ELEMENTWISE):
                return None
            if isinstance(n, T.Load):
                index = [_uniform(i, defs) for i in n.index]
                if any(i is None for i in index):
                    return None
                boxes.append((n.param, index, tuple(n.type.shape)))
    if not boxes:
        return None
    cond: N.Expr | None = None
    for param, index, shape in boxes:
        arr = L.pref(param)
        tiles = L.tile_ids(param) if index is None else [L.scalar(i) for i in index]
        for k, (t, size) in enumerate(zip(tiles, shape)):
            lo = L.global_index(t, size, 0)
            ok = N.Logical("and", N.Compare("ge", lo, N.Const(0, INDEX)),
                           N.Compare("le", N.BinOp("add", lo, N.Const(size, INDEX), INDEX), N.ArrayLen(arr, k)))
            cond = ok if cond is None else N.Logical("and", cond, ok)
    return L.tmp(cond, "inside")


def _uniform(e: T.TExpr, defs: dict[int, T.TExpr]) -> T.TExpr | None:
    """`e` as an expression of block-uniform scalars alone (reads of scalars assigned once replaced by
    their values), or None."""
    if isinstance(e, _UNIFORM_LEAVES):
        return e
    if isinstance(e, T.Read):
        value = defs.get(id(e.var))
        return None if value is None else _uniform(value, defs)
    if isinstance(e, (T.BinOp, T.Cast)) and tuple(e.type.shape) == ():
        parts = {f.name: _uniform(getattr(e, f.name), defs) for f in dataclasses.fields(e)
                 if isinstance(getattr(e, f.name), T.TExpr)}
        if any(p is None for p in parts.values()):
            return None
        return dataclasses.replace(e, **parts)
    return None


def _walk(e: T.TExpr):
    yield e
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, T.TExpr):
            yield from _walk(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, T.TExpr):
                    yield from _walk(x)
