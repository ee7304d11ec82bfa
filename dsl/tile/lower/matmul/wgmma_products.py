"""sm_90 warpgroup MMA for a tile.matmul outside the GEMM loops (matmul/products.py hands it the
products tc_operands.wgmma_b accepts): flash attention's S = Q K^T and O += P V.

The warps split M in 16-row slices, four to a warpgroup, so one m64nNk16 `wgmma.mma_async` per
warpgroup and 16-element step of K computes the product. Its accumulators are laid out per warp
exactly as mma.sync's m16n8 accumulators of MmaLayout (register i: row g (+8 for i % 4 >= 2),
column 8 (i / 4) + 2t + i % 2), and its A operand comes from registers in mma.sync's A-fragment
layout, so S, P (S's accumulators packed pairwise), the row statistics and a loop-invariant Q keep
the layouts and registers of the mma.sync lowering. B is read by the tensor cores from shared memory
through a matrix descriptor: the tile is staged by cp.async (copied a loop iteration ahead where the
pipeline takes it) in 128-byte swizzle atoms [cols / 64][rows][64]: K of S = Q K^T is K-major B,
V of P V is MN-major B (imm-trans-b). Each product waits for its group (wait_group 0) before its
result is used; warpgroups of other blocks on the SM overlap with that wait.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import F32, U32, TupleType
from dsl.tile import ir as T
from dsl.tile.ptx.table import instruction
from dsl.tile.lower.layout import LV, MmaLayout
from dsl.tile.lower.matmul.stages import aligned_base
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait, fence_proxy_async
from dsl.tile.lower.matmul.fragments import pack_pairs
from dsl.tile.lower.pipeline import prefetch_next, ring_done, ring_wait, wait_for
from dsl.tile.lower.matmul.wgmma import SWIZZLE_128B, matrix_descriptor, wait_wgmma
from dsl.tile.ptx.mma_types import WgmmaOp, mma_type
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, issue_copies, wgmma_stage


def lower_product_wgmma(L, e: T.Matmul, layout: MmaLayout, acc_vars: list[N.Var], a_frags: dict,
                        b: T.Load) -> LV:
    """e: the product, b: its B load (e.b itself, or the operand of e.b's transpose: K-major B);
    a_frags: {(0, ks): 8 A elements} in registers; acc_vars: the initialised accumulators."""
    from dsl.tile.lower.matmul import overlap
    (m, k), (_, n) = e.a.type.shape, e.b.type.shape
    dtype = e.a.type.dtype
    L.arch_specific = True              # warpgroup MMA exists only on the arch-specific target sm_90a
    rows, cols = b.type.shape
    pipe = L.pipelined.get(id(b))
    a_regs = None
    rot = pipe.rotation if pipe is not None and pipe.ring is not None else None
    if rot is not None and e is rot.last:           # issued in the next iteration (matmul/overlap.py)
        a_regs = [pack_pairs(L, a_frags[0, ks], dtype) for ks in range(k // 16)]
        overlap.stash_last(L, pipe, b, a_regs)
        return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])
    if pipe is not None and pipe.ring is not None:  # a TMA ring's stage (matmul/ring.py)
        at, it, base = ring_wait(L, pipe, b)
    elif pipe is not None:
        stage = pipe.stages[pipe.position(b)]
        assert stage.swizzled, "the pipeline staged a wgmma operand for ldmatrix"
        wait_for(L, pipe, [b], async_proxy=True)
        base = aligned_base(L, stage.buf, "swz")
    else:
        buf = wgmma_stage(L, dtype, rows * cols + STAGE_SLACK_ELEMS, ("product", id(e)))
        issue_copies(L, b, buf, cols, [L.scalar(i) for i in b.index], swizzled=aligned_base(L, buf, "swz"))
        cp_async_commit(L)
        cp_async_wait(L, 0)
        fence_proxy_async(L)
        L.sync()
        base = aligned_base(L, buf, "swz")
    a_regs = [pack_pairs(L, a_frags[0, ks], dtype) for ks in range(k // 16)]
    issue_product(L, e, b, base, acc_vars, a_regs)
    L.asm("wgmma.commit_group")
    pending = 0
    if rot is not None and e is rot.first:          # the previous iteration's last product, behind it
        overlap.issue_last(L, pipe, it)
        pending = 1
    wait_wgmma(L, pending, acc_vars)
    if pipe is not None and pipe.ring is not None:  # the stage is free once this group completed
        ring_done(L, pipe, at, it)
    else:
        L.sync()                        # every warpgroup is done reading the stage
        if pipe is not None:
            prefetch_next(L, pipe, [b])
    return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])


def issue_product(L, e: T.Matmul, b: T.Load, base: N.Expr, acc_vars: list[N.Var], a_regs: list[list[N.Expr]]) -> None:
    """The k/16 wgmmas of product `e` (no commit): A from the packed registers `a_regs` (4 a step), B
    (`b`, K-major when e.b transposes it) from the swizzle atoms at shared address `base`; the
    accumulators `acc_vars` pass through the fence and the wgmmas and are assigned their outputs."""
    k, n = e.a.type.shape[1], e.b.type.shape[1]
    tname = mma_type(e.a.type.dtype)
    kmajor = b is not e.b
    rows = b.type.shape[0]
    accs, a_regs = _fence(L, acc_vars, a_regs)
    regs = n // 2
    op = WgmmaOp(n, tname, tname, not kmajor, a_regs=True)
    for ks in range(k // 16):
        if kmajor:      # B = K^T: n = rows, k = cols; 16 elements of k are 32 bytes of a 128-byte row
            addr = N.BinOp("add", base, N.Const((ks // 4) * rows * 128 + (ks % 4) * 32, U32), U32)
            db = matrix_descriptor(L, addr, 16, 8 * 128, SWIZZLE_128B)
        else:           # B = V: k = rows (16 of them a step), n = cols in panels of 64 (LBO apart)
            addr = N.BinOp("add", base, N.Const(ks * 16 * 128, U32), U32)
            db = matrix_descriptor(L, addr, rows * 128, 8 * 128, SWIZZLE_128B)
        out = L.new_var(TupleType((F32,) * regs), "wgmma")
        L.emit(N.Assign(out, instruction("wgmma.mma_async.rs", [*a_regs[ks], db, N.Const(1, U32), *accs], op=op)))
        accs = [N.TupleGet(N.ReadVar(out), i, F32) for i in range(regs)]
    for v, x in zip(acc_vars, accs):
        L.emit(N.Assign(v, x))


def _fence(L, acc_vars: list[N.Var], a_regs: list[list[N.Expr]]) -> tuple[list[N.Expr], list[list[N.Expr]]]:
    """wgmma.fence with the accumulators and the packed A registers passed through it (tied operands),
    so every write of them comes before the fence and every wgmma reads them after it: ptxas then
    needs no warpgroup.arrive of its own, which would serialise the wgmmas."""
    flat = [x for regs in a_regs for x in regs]
    na, nr = len(acc_vars), len(flat)
    ty = TupleType((F32,) * na + (U32,) * nr)
    out = L.new_var(ty, "wgfence")
    L.emit(N.Assign(out, instruction("wgmma.fence", [*(N.ReadVar(v) for v in acc_vars), *flat], types=ty.elems)))
    got = [N.TupleGet(N.ReadVar(out), i, ty.elems[i]) for i in range(na + nr)]
    accs = got[:na]
    return accs, [got[na + 4 * i:na + 4 * i + 4] for i in range(len(a_regs))]
