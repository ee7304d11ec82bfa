"""Stores of mma accumulator tiles (MmaLayout) into a partition: the GEMM epilogue.

Lane l holds each row's columns 2(l%4) and 2(l%4)+1 side by side, so for an interior tile (entirely
inside the array) every pair is one 8-byte `st.global.v2.f32` (or one 4-byte store of two packed
16-bit values), with no bounds checks: half the store instructions and none of the per-element
compares and predicates. An edge tile keeps one checked store per element. The pair stores need the
row starts aligned (C-contiguous, 16-byte-aligned data, last extent divisible by 8: launch facts the
contract then states) and a 2-D partition whose dtype is the value's.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, INDEX
from dsl.tile import ptx_sim
from dsl.tile.layout import LV, MmaLayout
from dsl.tile.lower_mma import pack_pairs
from dsl.tile.types import chunked_rows


def pairs_ok(L, p, v: LV) -> bool:
    return (isinstance(v.layout, MmaLayout) and len(p.type.tile_shape) == 2 and v.dtype in (F32, F16, BF16)
            and v.dtype == p.type.dtype and chunked_rows(L.facts.get(p.name, {}), v.dtype.itemsize))


def store_pairs(L, p, v: LV, checked) -> None:
    """`checked()`: emit the element-by-element store (the edge tiles' path)."""
    L.relied.add(p.name)
    arr = L.pref(p)
    bm, bn = p.type.tile_shape
    coords = v.layout.coords_for((bm, bn))

    def inside(k: int, t: int) -> N.Expr:
        end = N.BinOp("mul", N.BinOp("add", N.Cast(L.bids[k], INDEX), N.Const(1, INDEX), INDEX),
                      N.Const(t, INDEX), INDEX)
        return N.Compare("le", end, N.ArrayLen(arr, k))
    interior = L.tmp(N.Logical("and", inside(0, bm), inside(1, bn)), "interior")

    def fast() -> None:
        for i in range(0, len(v.elems), 2):
            (row, col), lo, hi = coords[i], v.elems[i], v.elems[i + 1]
            idx = [L.global_index(L.bids[0], bm, row), L.global_index(L.bids[1], bn, col)]
            addr = TN.GlobalAddress(arr, idx)
            if v.dtype == F32:
                L.asm("st.global.v2.f32 [$0], {$1, $2};", "l,f,f", [addr, lo, hi], sim=ptx_sim.st_global(8))
            else:
                (packed,) = pack_pairs(L, [lo, hi], v.dtype)
                L.asm("st.global.b32 [$0], $1;", "l,r", [addr, packed], sim=ptx_sim.st_global(4))
    L.emit(N.If(interior, L.block_of(fast), L.block_of(checked)))
