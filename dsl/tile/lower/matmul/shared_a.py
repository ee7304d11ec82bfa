"""sm_90 warpgroup-MMA products with A read from shared memory (KB_TILE_WGMMA_A=shared, lowering switch
`wgmma_a`), FlashAttention-3's S = Q K^T: a loop-invariant A operand that is a plain `tile.load` of an
array (the queries of the forward and of dQ, dO; K and V of dK/dV) is copied ONCE, where it is
assigned, into swizzled shared memory, and every warpgroup-MMA product reading it issues
`wgmma.mma_async.ss` with an A descriptor beside B's, instead of holding the operand as A fragments
(64 registers a thread at head dim 256 on 4 warps, 32 at 128).

The stage is K-major in 128-byte swizzle atoms [K / 64][M][64], the layout K-major B stages of the
products already have (matmul/operands.issue_copies(..., swizzled=...)), in dynamic shared memory
(operands.wgmma_stage: counted in the kernel's dynamic bytes), 1024-byte aligned at run time. Warpgroup
w reads its rows 64w.. of each atom panel: descriptor start base + (ks / 4) M 128 + w 64 128 +
(ks % 4) 32 bytes, SBO 1024 (8 rows of 128 bytes), LBO unused (16).

Which operands: the lowering hints the variable into this layout (key ("W", shape)) when a product
that runs on warpgroup MMA reads it as A and it is assigned once, at the kernel's top level (not in a
loop or branch), from a `tile.load` of an array that cp.async can copy (operands.async_ok) with K a
multiple of 64, and every read of it is an operand of a product (A, or B: the keys of the fused
attention backward are B of dQ = dS K, read from the same atoms, operands.wgmma_b). Anything else keeps
the register path silently. A product that reads such a variable but cannot take it from shared memory (a rotated
last product of matmul/overlap.py, a product on mma.sync) loads its elements from the atoms.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32, U32
from dsl.tile import ir as T
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait, fence_proxy_async
from dsl.tile.lower.layout import c32
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, async_ok, issue_copies, wgmma_stage
from dsl.tile.lower.matmul.stages import aligned_base
from dsl.tile.lower.matmul.swizzled import ATOM_BYTES, SwizzledA
from dsl.tile.types import PartitionParamType

PANEL_ROWS_WG = 64          # rows of one warpgroup's m64 slice


def wanted(L, e: T.Matmul) -> bool:
    """Should product `e` (one that runs on warpgroup MMA) hint its A variable into shared memory?"""
    if L.wgmma_a != "shared" or not isinstance(e.a, T.Read) or e.a.type.shape[0] != 16 * (L.T // 32):
        return False                    # (more rows than one m64 slice a warpgroup: A stays in registers)
    tv = e.a.var
    load = invariant_load(L, tv)
    if load is None or load.type.shape != e.a.type.shape or load.type.shape[1] % 64:
        return False
    return async_ok(L, load) and _only_an_operand(L, tv)


def invariant_load(L, tv: T.TVar) -> T.Load | None:
    """The `tile.load` of an array that variable `tv` is assigned once, at the kernel's top level."""
    if L.assignments.get(id(tv)) != 1:
        return None
    for st in L.fn.body:
        if isinstance(st, T.Assign) and st.var is tv:
            ok = isinstance(st.value, T.Load) and not isinstance(st.value.param.type, PartitionParamType)
            return st.value if ok else None
    return None


def _only_an_operand(L, tv: T.TVar) -> bool:
    """Is every read of `tv` in the kernel an operand of a product: A, or B (transposed or not), which
    warpgroup MMA reads from the same atoms (operands.wgmma_b)?"""
    exprs = list(T.body_exprs(L.fn.body))
    products = [e for e in exprs if isinstance(e, T.Matmul)]
    operands = {id(e.a) for e in products} | {id(e.b) for e in products} | \
        {id(e.b.operand) for e in products if isinstance(e.b, T.Permute) and tuple(e.b.axes) == (1, 0)}
    return all(id(e) in operands for e in exprs if isinstance(e, T.Read) and e.var is tv)


def swizzled_layout(L, buf: N.Expr, shape: tuple[int, int]) -> SwizzledA:
    """The atoms of a variable of `shape` in stage `buf`: its aligned start, and this thread's
    warpgroup's 64 rows in it where two or more warpgroups each read their own."""
    base = aligned_base(L, buf, "aswz")
    wg_base = base
    if shape[0] > PANEL_ROWS_WG:
        _, warp = L.lane_warp()
        wg = N.Cast(N.BinOp("rshift", warp, c32(2), I32), U32)
        wg_base = L.tmp(N.BinOp("add", base, N.BinOp("mul", wg, N.Const(PANEL_ROWS_WG * ATOM_BYTES, U32), U32), U32),
                        "awg")
    return SwizzledA(shape, buf, base, wg_base)


def assign_swizzled(L, tv: T.TVar, e: T.Load) -> None:
    """Variable `tv` hinted ("W", shape): copy its load `e` by cp.async into its swizzle atoms, wait,
    make the copies visible to the tensor cores' async proxy, and keep the variable there."""
    produced = L.produced_a.get(id(tv))
    if produced is not None:            # the producer warpgroup copies it (matmul/produced_a.py)
        produced.wait(L, N.ReadVar(L.produced_tiles))
        return
    rows, cols = e.type.shape
    got = L.vars.get(id(tv))
    if got is None:
        got = (swizzled_layout(L, wgmma_stage(L, e.type.dtype, rows * cols + STAGE_SLACK_ELEMS, ("A", id(tv))),
                               (rows, cols)), [])
        L.vars[id(tv)] = got
    lay = got[0]
    L.sync()                            # readers of an earlier value (a persistent kernel's last tile) are done
    issue_copies(L, e, lay.buf, cols, [L.scalar(i) for i in e.index], swizzled=lay.base)
    cp_async_commit(L)
    cp_async_wait(L, 0)
    fence_proxy_async(L)
    L.sync()
