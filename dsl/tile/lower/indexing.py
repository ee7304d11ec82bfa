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
from dsl.ir.types import I32, INDEX
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


def _key(e) -> object:
    """A structural key of an index expression (equal keys: equal values at one point of the kernel)."""
    if e is None:
        return None
    if isinstance(e, N.Const):
        return ("c", e.value)
    if isinstance(e, N.ReadVar):
        return ("v", id(e.var))
    if isinstance(e, N.BinOp):
        return (e.op, _key(e.lhs), _key(e.rhs))
    if isinstance(e, N.Cast):
        return ("cast", str(e.type), _key(e.operand))
    return ("id", id(e))


class ElementIndex:
    """Indices and in-array tests of the elements of one tile access, bases made once per access (and
    only where the access is made: every element is made at one point of the kernel)."""

    def __init__(self, L) -> None:
        self.L = L
        self.bases: dict[tuple, tuple[N.Expr, N.Expr, N.Expr]] = {}

    def _base(self, arr: N.Expr, k: int, tile: N.Expr, size: int, part) -> tuple[N.Expr, N.Expr, N.Expr]:
        """(base index, opaque base, opaque length left past it) of axis k."""
        key = (k, _key(tile), size, _key(part))
        got = self.bases.get(key)
        if got is None:
            L = self.L
            base = L.global_index(tile, size, 0 if part is None else part)
            kept = L.tmp(instruction("mov.b64.opaque", [base]), "gbase")
            left = L.tmp(instruction("mov.b64.opaque", [N.BinOp("sub", N.ArrayLen(arr, k), base, INDEX)]), "gleft")
            got = self.bases[key] = (base, kept, left)
        return got

    def element(self, arr: N.Expr, tiles: list[N.Expr], shape: tuple[int, ...], coords: list,
                signed: bool = True) -> tuple[list[N.Expr], N.Expr]:
        """(indices, in-array test) of the element at tile coordinates `coords`; `signed`: the index
        may be negative (tested >= 0 too)."""
        idx, cond = [], None
        for k, coord in enumerate(coords):
            part, c = split_offset(coord)
            base, kept, left = self._base(arr, k, tiles[k], shape[k], part)
            idx.append(base if c == 0 else self.L.tmp(N.BinOp("add", base, N.Const(c, INDEX), INDEX), "gi"))
            ok: N.Expr = N.Compare("lt", N.Const(c, INDEX), left)
            if signed:
                ok = N.Logical("and", N.Compare("ge", kept, N.Const(-c, INDEX)), ok)
            cond = ok if cond is None else N.Logical("and", cond, ok)
        return idx, cond
