"""The GEMM main loops' operand stages in dynamic shared memory, shared by the cp.async loop
(matmul/mma_sync.py) and the TMA loop (matmul/tma.py)."""
from __future__ import annotations

from typing import Callable

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import INDEX, U32, ArrayType
from dsl.tile.lower.layout import log2


def stage_bytes(bm: int, bn: int, bk: int, esize: int) -> int:
    """Bytes of one operand stage: a BM x BK tile of A and a BK x BN tile of B."""
    return (bm * bk + bk * bn) * esize


SWIZZLE_ALIGN = 1024        # bytes: the 128-byte swizzle repeats every 8 rows of 128 bytes (address bits 4-9)


def aligned_base(L, buf: N.Expr, hint: str) -> N.Expr:
    """The first SWIZZLE_ALIGN-aligned shared address in `buf` (allocated SWIZZLE_ALIGN - 1 bytes or
    more longer than it holds): there the hardware swizzle (address bits) matches the copies' XOR
    pattern, whatever alignment the dynamic shared memory got at run time."""
    raw = L.tmp(TN.SharedAddress(buf, N.Const(0, INDEX)), "smem")
    rounded = N.BinOp("add", raw, N.Const(SWIZZLE_ALIGN - 1, U32), U32)
    return L.tmp(N.BinOp("and_", rounded, N.Const(0xFFFFFFFF & ~(SWIZZLE_ALIGN - 1), U32), U32), hint)


def operand_stages(L, plan) -> tuple[N.Expr, N.Expr, Callable[[N.Expr], N.Expr], Callable[[N.Expr], N.Expr]]:
    """The S operand stages in dynamic shared memory (A stages, then B stages), 1024-byte aligned at run
    time so the hardware swizzle (address bits) matches the XOR pattern of the copies (cp.async offsets
    or TMA's swizzle). Returns (A base, B base, sa, sb): sa/sb map an element index to its address."""
    bm, bn, bk, S, es = plan.bm, plan.bn, plan.bk, plan.stages, plan.esize
    buf = N.SharedAlloc("gemm_operands", ArrayType(plan.a.type.dtype, 1, writable=True, space="shared",
                                                   shape=(-1,)), align=SWIZZLE_ALIGN)
    L.extra_shared.append(buf)
    plan.operand_buf = N.SharedArray(buf)     # for stores by element index (matmul/transposing.py)
    L.dyn_bytes = max(L.dyn_bytes, S * stage_bytes(bm, bn, bk, es) + SWIZZLE_ALIGN)
    base_a = aligned_base(L, N.SharedArray(buf), "sa0")
    base_b = L.tmp(N.BinOp("add", base_a, N.Const(S * bm * bk * es, U32), U32), "sb0")
    shift = N.Const(log2(es), U32)

    def sa(elem: N.Expr) -> N.Expr:
        return N.BinOp("add", base_a, N.BinOp("lshift", N.Cast(elem, U32), shift, U32), U32)

    def sb(elem: N.Expr) -> N.Expr:
        return N.BinOp("add", base_b, N.BinOp("lshift", N.Cast(elem, U32), shift, U32), U32)
    return base_a, base_b, sa, sb
