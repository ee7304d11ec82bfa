"""Lowering of chunked stores (`out.store(v, chunk=(0, k))`, dsl/tile/chunks.py) onto the SIMT IR.

The chunk's shape divides the tile's (the front end proved it), so a chunk lies wholly inside the
block's own tile or wholly outside it: one test of the chunk index per axis, uniform across the
block, guards the whole store (a constant index was checked at compile time and costs nothing).
Inside, element e of the chunk goes to tile_id * tile + index * chunk + e along each axis, a vector
access per run of a distributed chunk where the launch facts allow (dsl/tile/lower/runs.py), else
masked at the array's edge element by element as a whole-tile store is.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import INDEX
from dsl.tile import ir as T
from dsl.tile.lower.layout import MmaLayout, c32
from dsl.tile.lower.runs import store_runs


def store_chunk(L, s: T.Store) -> None:
    """Emit the Store `s` (with `s.chunk`) for lowerer `L` (dsl/tile/lower/kernel.py Lowerer)."""
    assert s.chunk is not None
    v = L.expr(s.value)
    if not isinstance(v.layout, MmaLayout):
        v = L.to_layout(v, "D")
    p = s.param
    tile = p.type.tile_shape  # type: ignore[union-attr]
    shape = v.shape
    arr = L.pref(p)
    ids = L.tile_ids(p)
    index = [L.scalar(c) for c in s.chunk]
    inside: N.Expr | None = None
    for k, i in enumerate(index):
        if isinstance(i, N.Const):
            continue                    # checked by the front end
        count = tile[k] // shape[k]
        ok = N.Compare("eq", i, c32(0)) if count == 1 else \
            N.Logical("and", N.Compare("ge", i, c32(0)), N.Compare("lt", i, c32(count)))
        inside = ok if inside is None else N.Logical("and", inside, ok)
    own = L.geo.owner(v.size) if v.layout == "D" else True

    def body() -> None:
        origin = [L.tmp(N.BinOp("add", N.BinOp("mul", N.Cast(ids[k], INDEX), N.Const(tile[k], INDEX), INDEX),
                                N.BinOp("mul", N.Cast(index[k], INDEX), N.Const(shape[k], INDEX), INDEX),
                                INDEX), "chunk0")
                  for k in range(len(tile))]
        if v.layout == "D" and store_runs(L, p, v, lambda: origin, s.loc):
            return                          # a vector access per run (dsl/tile/lower/runs.py)
        for e, coords in zip(v.elems, L.coords_of(v.layout, shape)):
            idx = [origin[k] if isinstance(c, int) and c == 0 else
                   L.tmp(N.BinOp("add", origin[k], N.Const(c, INDEX) if isinstance(c, int) else N.Cast(c, INDEX),
                                 INDEX), "gi")
                   for k, c in enumerate(coords)]
            L.store_masked(arr, idx, e, own, s.loc)
    L.guarded(True if inside is None else inside, body)
