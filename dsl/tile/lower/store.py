"""Stores of mma accumulator tiles (MmaLayout) into a partition: the GEMM epilogue.

Lane l holds each row's columns 2(l%4) and 2(l%4)+1 side by side, so for an interior tile (entirely
inside the array) every f32 pair is one 8-byte `st.global.v2.f32`, with no bounds checks: half the
store instructions and none of the per-element compares and predicates. A 16-bit pair is only 4
bytes, so a warp's 4-byte stores would fill half of each 32-byte sector; the lanes of a pair
(l, l^1) first swap one packed word of two neighbouring 8-column fragments (one shfl.xor), so each
lane stores 4 consecutive columns (8 bytes) and a quad writes 16 consecutive columns of its row. An
edge tile keeps one checked store per element. The pair stores need the row starts aligned (C-contiguous, 16-byte-aligned data, last extent divisible by 8: launch facts the
contract then states) and a 2-D partition whose dtype is the value's.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, INDEX
from dsl.tile.lower.layout import LV, MmaLayout, c32
from dsl.tile.lower.matmul.fragments import pack_pairs
from dsl.tile.types import chunked_rows


def pairs_ok(L, p, v: LV) -> bool:
    return (isinstance(v.layout, MmaLayout) and len(p.type.tile_shape) == 2 and v.dtype in (F32, F16, BF16)
            and v.dtype == p.type.dtype and chunked_rows(L.facts.get(p.name, {}), v.dtype.itemsize))


def store_pairs(L, p, v: LV, checked) -> None:
    """`checked()`: emit the element-by-element store (the edge tiles' path)."""
    L.relied.add(p.name)
    arr = L.pref(p)
    ids = L.tile_ids(p)
    bm, bn = p.type.tile_shape
    coords = v.layout.coords_for((bm, bn))

    def inside(k: int, t: int) -> N.Expr:
        end = N.BinOp("mul", N.BinOp("add", N.Cast(ids[k], INDEX), N.Const(1, INDEX), INDEX),
                      N.Const(t, INDEX), INDEX)
        return N.Compare("le", end, N.ArrayLen(arr, k))
    interior = L.tmp(N.Logical("and", inside(0, bm), inside(1, bn)), "interior")

    def fast() -> None:
        if v.dtype != F32 and v.layout.nt % 2 == 0:
            swapped_pairs(L, arr, ids, (bm, bn), v)
            return
        for i in range(0, len(v.elems), 2):
            (row, col), lo, hi = coords[i], v.elems[i], v.elems[i + 1]
            idx = [L.global_index(ids[0], bm, row), L.global_index(ids[1], bn, col)]
            addr = TN.GlobalAddress(arr, idx)
            if v.dtype == F32:
                L.asm("st.global.v2.f32", [addr, lo, hi])
            else:
                (packed,) = pack_pairs(L, [lo, hi], v.dtype)
                L.asm("st.global.b32", [addr, packed])
    L.emit(N.If(interior, L.block_of(fast), L.block_of(checked)))


def swapped_pairs(L, arr, ids: list, tile_shape: tuple[int, int], v: LV) -> None:
    """16-bit interior stores, 8 bytes a lane: for fragments f (even) and f + 1 of a row, the even
    lane of a pair keeps its word of f and takes its partner's word of f (columns 8f + 2q .. +3), the
    odd lane keeps its word of f + 1 and takes its partner's (columns 8(f+1) + 2q - 2 .. +1). `ids`:
    the block's tile in the partition (Lowerer.tile_ids)."""
    lay: MmaLayout = v.layout  # type: ignore[assignment]
    bm, bn = tile_shape
    bit = L.tmp(N.BinOp("and_", lay.lane_col, c32(2), lay.lane_col.type), "oddbit")
    odd = L.tmp(N.Compare("ne", bit, c32(0)), "oddlane")
    shift = L.tmp(N.BinOp("mul", bit, c32(3), bit.type), "oddshift")        # 6 columns for odd lanes
    coords = lay.coords
    for mt in range(lay.mt):
        for nt in range(0, lay.nt, 2):
            for h in (0, 2):                                               # rows l/4 and l/4 + 8
                i, j = (mt * lay.nt + nt) * 4 + h, (mt * lay.nt + nt + 1) * 4 + h
                (wf,) = pack_pairs(L, v.elems[i:i + 2], v.dtype)
                (wg,) = pack_pairs(L, v.elems[j:j + 2], v.dtype)
                send = L.tmp(N.IfExp(odd, wf, wg, wf.type), "sw")
                got = L.tmp(N.Warp("shfl_xor", [send, c32(1)], wf.type), "sw")
                lo = L.tmp(N.IfExp(odd, got, wf, wf.type), "sw")
                hi = L.tmp(N.IfExp(odd, wg, got, wf.type), "sw")
                row, col = coords[i]
                col = N.BinOp("add", col, shift, shift.type)
                idx = [L.global_index(ids[0], bm, row), L.global_index(ids[1], bn, col)]
                L.asm("st.global.v2.b32", [TN.GlobalAddress(arr, idx), lo, hi])
