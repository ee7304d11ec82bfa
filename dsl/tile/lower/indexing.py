"""Global indices and bounds tests of a tile load's elements, shaped for the register allocator.

An element's coordinate in a fragment layout is a lane expression plus a constant (the accumulator
layout's column 2t + 8j + 1: `lc + 9`). Written as one index and one test an element, the compiler
folds the constant into each element's index and hoists each element's loop-invariant part out of the
loop, a 64-bit register apiece: the fused attention backward on 8 warps held 16 such offsets of its
`lse` and `delta` columns across its loop and spilled. Here the elements that share a lane expression
share one base index; an element's index is base + its constant (an immediate offset of the access),
and its bounds test compares the constant with what is left of the axis past the base, a value the
compiler cannot take apart (mov.b64.opaque), so no per-element offset is made at all.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, I32, INDEX
from dsl.tile.ptx.table import instruction


def split_offset(e) -> tuple[N.Expr | None, int]:
    """(the non-constant part, the constant added to it) of an i32 coordinate (int, Const or a sum)."""
    if isinstance(e, int):
        return None, e
    if isinstance(e, N.Const):
        return None, int(e.value)
    if isinstance(e, N.BinOp) and e.op == "add":
        a, ca = split_offset(e.lhs)
        b, cb = split_offset(e.rhs)
        part = a if b is None else b if a is None else N.BinOp("add", a, b, I32)
        return part, ca + cb
    return e, 0


def expr_key(e) -> object:
    """A structural key of an index expression (equal keys: equal values at one point of the kernel)."""
    if e is None or isinstance(e, int):
        return e
    if isinstance(e, N.Const):
        return ("c", e.value)
    if isinstance(e, N.ReadVar):
        return ("v", id(e.var))
    if isinstance(e, N.BinOp):
        return (e.op, expr_key(e.lhs), expr_key(e.rhs))
    if isinstance(e, N.Cast):
        return ("cast", str(e.type), expr_key(e.operand))
    return ("id", id(e))


class ElementIndex:
    """Indices and in-array tests of the elements of one tile access, bases made once per access (and
    only where the access is made: every element is made at one point of the kernel). Only lane
    expressions that two or more elements share get a base: an element alone keeps its own index and
    plain test (two more 64-bit values of it would cost registers, not save them)."""

    def __init__(self, L, tiles: list[N.Expr], shape: tuple[int, ...], coords_list: list) -> None:
        self.L = L
        self.bases: dict[tuple, tuple[N.Expr, N.Expr]] = {}
        self.uses: dict[tuple, int] = {}
        for coords in coords_list:
            for k, coord in enumerate(coords):
                key = self._key_of(k, tiles[k], shape[k], split_offset(coord)[0])
                self.uses[key] = self.uses.get(key, 0) + 1

    @staticmethod
    def _key_of(k: int, tile: N.Expr, size: int, part) -> tuple:
        return (k, expr_key(tile), size, expr_key(part))

    def _base(self, arr: N.Expr, k: int, tile: N.Expr, size: int, part) -> tuple[N.Expr, N.Expr]:
        """(base index, opaque length left past it) of axis k."""
        key = self._key_of(k, tile, size, part)
        got = self.bases.get(key)
        if got is None:
            L = self.L
            base = L.global_index(tile, size, 0 if part is None else part)
            left = L.tmp(instruction("mov.b64.opaque", [N.BinOp("sub", N.ArrayLen(arr, k), base, INDEX)]), "gleft")
            got = self.bases[key] = (base, left)
        return got

    def element(self, arr: N.Expr, tiles: list[N.Expr], shape: tuple[int, ...], coords: list,
                signed: bool = True) -> tuple[list[N.Expr], N.Expr]:
        """(indices, in-array test) of the element at tile coordinates `coords`; `signed`: the index
        may be negative (tested >= 0 too)."""
        idx, cond = [], None
        for k, coord in enumerate(coords):
            part, c = split_offset(coord)
            if self.uses.get(self._key_of(k, tiles[k], shape[k], part), 0) < 2:
                i = self.L.global_index(tiles[k], shape[k], coord)
                idx.append(i)
                ok = N.Compare("lt", i, N.ArrayLen(arr, k))
                if signed:
                    ok = N.Logical("and", N.Compare("ge", i, N.Const(0, INDEX)), ok)
                cond = ok if cond is None else N.Logical("and", cond, ok)
                continue
            base, left = self._base(arr, k, tiles[k], shape[k], part)
            idx.append(base if c == 0 else self.L.tmp(N.BinOp("add", base, N.Const(c, INDEX), INDEX), "gi"))
            ok: N.Expr = N.Compare("lt", N.Const(c, INDEX), left)
            if signed:      # on the index itself (an opaque base here cost the grouped varlen dK/dV 44 spill bytes)
                ok = N.Logical("and", N.Compare("ge", idx[-1], N.Const(0, INDEX)), ok)
            cond = ok if cond is None else N.Logical("and", cond, ok)
        return idx, (N.Const(True, BOOL) if self.L.interior else cond)
