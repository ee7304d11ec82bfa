"""Tensor-core fragments in registers: 16-bit pairs packed into 32-bit registers, ldmatrix loads of
them from shared memory, and warp MMAs (mma.sync) over a warp's m-tiles x n-tiles of accumulators."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, U32
from dsl.tile.ptx.table import instruction


def pack_pairs(L, halves: list[N.Expr], dtype) -> list[N.Expr]:
    """16-bit elements pairwise into 32-bit registers, the first in the low half: a pair rounded from
    two f32 locals (L.narrowed_from) by one cvt.rn.f16x2/bf16x2.f32 from those (sm_80+), else mov.b32."""
    out = []
    for lo, hi in zip(halves[0::2], halves[1::2]):
        wide = [L.narrowed_from(lo), L.narrowed_from(hi)]
        if L.cc >= 80 and None not in wide:
            out.append(L.tmp(instruction("cvt.rn.pack", wide, dtype=dtype), "pk"))
        else:
            out.append(L.tmp(instruction("mov.b32.pack", [lo, hi], dtype=dtype), "pk"))
    return out


def ldmatrix_x4(L, addr: N.Expr, trans: bool) -> list[N.Expr]:
    """ldmatrix.x4 (.trans) of 16-bit elements at this lane's row address `addr`: 4 registers."""
    quad = TN.tuple_of(U32, 4)
    v = L.new_var(quad, "ldm")
    L.emit(N.Assign(v, instruction("ldmatrix.x4", [addr], trans=trans)))
    return [N.TupleGet(N.ReadVar(v), i, U32) for i in range(4)]


def mma_sync(shape: str, a_type: str, b_type: str):
    """(4 A registers, 2 B registers, 4 f32 accumulators) -> one mma.sync `shape` on operands already
    packed in registers, of PTX types `a_type` and `b_type`."""
    def make(a_regs: list, b_regs: list, accs: list) -> N.Expr:
        return instruction("mma.sync", [*a_regs, *b_regs, *accs], shape=shape, a_type=a_type, b_type=b_type)
    return make


def emit_mmas(L, make, afr: dict, bfr: dict, acc_vars: list, mt_n: int, nt_n: int) -> None:
    """One mma per (m-tile, n-tile) of the warp, its 4 f32 accumulators updated in place (element
    ((mt * nt_n) + nt) * 4 + c of MmaLayout). `make(afr[mt], bfr[nt], accumulators)` builds the mma."""
    for mt in range(mt_n):
        for nt in range(nt_n):
            base = (mt * nt_n + nt) * 4
            accs = acc_vars[base:base + 4]
            out = L.new_var(TN.tuple_of(F32, 4), "mma")
            L.emit(N.Assign(out, make(afr[mt], bfr[nt], [N.ReadVar(x) for x in accs])))
            for c, x in enumerate(accs):
                L.emit(N.Assign(x, N.TupleGet(N.ReadVar(out), c, F32)))
