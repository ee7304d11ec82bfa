"""Shape expressions of tiles: reshape, broadcast and permute. Lazy values are remade at the new
coordinates, distributed ones are gathered, row statistics of an MMA accumulator (MmaRows) broadcast
onto the accumulators whose rows they are without moving."""
from __future__ import annotations

import math

from dsl.tile import ir as T
from dsl.tile.lower.indexing import expr_key
from dsl.tile.lower.layout import (LV, U_MAX, FragLayout, MmaLayout, MmaRows, WarpVector, flat_of, iadd, iand, imul, ishr,
                                  log2, strides)
from dsl.tile.lower.warp_vectors import hint_warp_vectors, shuffled_columns


class ShapeLowering:
    """The Lowerer's shape expressions (a mixin of dsl/tile/lower/kernel.py's Lowerer)."""

    def x_Reshape(self, e: T.Reshape) -> LV:
        v = self.expr(e.operand)
        shape = e.type.shape
        if v.layout == "L":
            src_make, src_shape = v.make, v.shape

            def make(cl):
                return src_make([_unravel(flat_of(c, shape), src_shape) for c in cl])  # type: ignore[misc]
            src_by = v.by_layout            # "D" depends on the size only: a load's runs stay runs

            def by_layout(lay):
                return src_by(lay) if lay == "D" and src_by is not None else None
            return LV("L", shape, v.dtype, [], make=make, pure=v.pure, by_layout=by_layout)
        if isinstance(v.layout, MmaRows) and shape[0] == v.shape[0] and all(x == 1 for x in shape[1:]):
            return LV(v.layout, shape, v.dtype, v.elems)        # (BM,) <-> (BM, 1): same registers
        if isinstance(v.layout, WarpVector) and math.prod(shape) == v.layout.n and max(shape) == v.layout.n:
            return LV(v.layout, shape, v.dtype, v.elems)        # (N,) <-> (1, N): same flat indices
        if isinstance(v.layout, FragLayout):
            v = self.to_layout(v, "D")
        return LV(v.layout, shape, v.dtype, v.elems)

    def x_Broadcast(self, e: T.Broadcast) -> LV:
        v = self.expr(e.operand)
        shape = e.type.shape
        src = (1,) * (len(shape) - len(v.shape)) + v.shape
        sst = strides(src)
        lead = len(shape) - len(v.shape)

        def index_of(coords):
            acc = 0
            for c, s_, st in zip(coords, src, sst):
                if s_ != 1:
                    acc = iadd(acc, imul(c, st))
            return acc
        if v.layout == "U" and e.type.size <= U_MAX:
            elems = [v.elems[index_of(c)] for c in self.coords_of("U", shape)]  # type: ignore[index]
            return LV("U", shape, v.dtype, elems)
        if v.layout == "L":
            src_make = v.make

            def make_lazy(cl):
                # the source element of each coordinate, each made once: a row vector broadcast over the
                # accumulators repeats its columns in every row a thread holds (loads, not only indices)
                src = [[0 if s_ == 1 else c for c, s_ in zip(cs[lead:], v.shape)] for cs in cl]
                keys = [tuple(expr_key(x) for x in c) for c in src]
                first = dict(zip(reversed(keys), reversed(src)))
                made = dict(zip(first, src_make(list(first.values()))))   # type: ignore[misc]
                return [made[k] for k in keys]
            return LV("L", shape, v.dtype, [], make=make_lazy, pure=v.pure)
        by_layout = None
        hint_warp_vectors(self, e, v)       # a row vector over accumulator columns: next time held by every warp
        if isinstance(v.layout, WarpVector) and len(shape) == 2 and v.size == shape[1] == v.shape[-1]:
            by_layout = shuffled_columns(self, v)
        elif isinstance(v.layout, MmaRows) and len(shape) == 2 and v.shape == (shape[0], 1):
            rows = v.layout

            def by_layout(lay):         # rows broadcast over accumulators whose rows they are
                if not (isinstance(lay, MmaLayout) and lay.wn == 1 and lay.wm == rows.parent.wm
                        and lay.shape[0] == rows.parent.shape[0]):
                    return None
                return [v.elems[2 * (r // (lay.nt * 4)) + (1 if r % 4 >= 2 else 0)] for r in range(lay.per_thread)]
        small_u = v.layout == "U" and len(v.elems) <= 4
        if small_u:
            v = LV("U", v.shape, v.dtype, [self.snapshot(x) for x in v.elems])
        return LV("L", shape, v.dtype, [], make=lambda cl: self.gather_elems(v, [index_of(c) for c in cl]),
                  pure=small_u, by_layout=by_layout)

    def x_Permute(self, e: T.Permute) -> LV:
        v = self.expr(e.operand)
        sst = strides(v.shape)

        def index_of(coords):
            acc = 0
            for k, c in enumerate(coords):
                acc = iadd(acc, imul(c, sst[e.axes[k]]))
            return acc
        if v.layout == "U":
            elems = [v.elems[index_of(c)] for c in self.coords_of("U", e.type.shape)]  # type: ignore[index]
            return LV("U", e.type.shape, v.dtype, elems)
        return self.gather(self.concrete(v), e.type.shape, index_of)


def _unravel(flat, shape: tuple[int, ...]) -> list:
    """Coordinates of a flat (row-major) index in `shape` (powers of two: shifts and masks). The first
    axis needs no mask (a flat index of the tile is below its size), so a 1-D source's coordinate stays
    the target's own expression (lane part + constant: dsl/tile/lower/indexing.py splits it)."""
    return [(ishr(flat, log2(st)) if k == 0 else iand(ishr(flat, log2(st)), sh - 1)) if sh > 1 else 0
            for k, (st, sh) in enumerate(zip(strides(shape), shape))]
