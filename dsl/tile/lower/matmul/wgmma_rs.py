"""One warpgroup-MMA product with A in registers (wgmma.mma_async.rs) and B in shared memory, as the
tile products issue it (matmul/wgmma_products.py: in place; matmul/overlap.py: a loop's last product
one iteration later). Both import it from here, so neither imports the other for it. With A in
shared memory too (KB_TILE_WGMMA_A=shared, matmul/shared_a.py) the product is wgmma.mma_async.ss
(issue_product_ss), B's descriptors the same.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import F32, I32, U32, TupleType
from dsl.tile import ir as T
from dsl.tile.lower.matmul.wgmma import SWIZZLE_128B, descriptor_at, matrix_descriptor, start_field
from dsl.tile.ptx.mma_types import WgmmaOp, mma_type
from dsl.tile.ptx.table import instruction


def issue_product(L, e: T.Matmul, b: T.Load, base: N.Expr, acc_vars: list[N.Var], a_regs: list[list[N.Expr]]) -> None:
    """The k/16 wgmmas of product `e` for each m64 slice of the warpgroup's rows (no commit): A from the
    packed registers `a_regs` (4 a step, slice by slice), B (`b`, K-major when e.b transposes it) from
    the swizzle atoms at shared address `base`, one descriptor a step for every slice; the accumulators
    `acc_vars` (n/2 a slice, in slice order) pass through one fence and the wgmmas and are assigned
    their outputs."""
    k, n = e.a.type.shape[1], e.b.type.shape[1]
    tname = mma_type(e.a.type.dtype)
    kmajor = b is not e.b
    rows = b.type.shape[0]
    accs, a_regs = _fence(L, acc_vars, a_regs)
    regs, steps = n // 2, k // 16
    descs = [_b_descriptor(L, base, ks, kmajor, rows, isinstance(b, T.Read)) for ks in range(steps)]
    done: list[N.Expr] = []
    for s in range(len(acc_vars) // regs):
        op = WgmmaOp(n, tname, tname, not kmajor, a_regs=True, slice=s)
        part = accs[s * regs:(s + 1) * regs]
        for ks in range(steps):
            out = L.new_var(TupleType((F32,) * regs), "wgmma")
            L.emit(N.Assign(out, instruction("wgmma.mma_async.rs", [*a_regs[s * steps + ks], descs[ks], N.Const(1, U32),
                                                                     *part], op=op)))
            part = [N.TupleGet(N.ReadVar(out), i, F32) for i in range(regs)]
        done += part
    for v, x in zip(acc_vars, done):
        L.emit(N.Assign(v, x))


def issue_product_ss(L, e: T.Matmul, b: T.Load | T.Read, base: N.Expr, acc_vars: list[N.Var], a,
                     groups: int = 1) -> None:
    """issue_product with A from shared memory: `a` gives each k-step's descriptor, K-major
    (matmul/swizzled.SwizzledA) or MN-major (matmul/transposed_a.TransposedA, `mn_major`); only the
    accumulators pass through the fence. `groups` > 1: the warpgroups split N, each its n / groups
    columns of B (matmul/transposed_a.warpgroup_columns)."""
    k, n = e.a.type.shape[1], e.b.type.shape[1] // groups
    tname = mma_type(e.a.type.dtype)
    kmajor = b is not e.b
    rows = b.type.shape[0]
    if groups > 1:          # warpgroup g's n columns: rows g n of a K-major stage, panels g n / 64 of an MN-major
        _, warp = L.lane_warp()  # one, or where n is part of a panel, column g n % 64 of panel g n / 64
        wg = N.Cast(N.BinOp("rshift", warp, N.Const(2, I32), I32), U32)
        if kmajor or n % 64 == 0:
            step = n * 128 if kmajor else (n // 64) * rows * 128
            off: N.Expr = N.BinOp("mul", wg, N.Const(step, U32), U32)
        else:               # 16-byte chunks of a swizzled row: the swizzle acts on the address bits
            col = N.BinOp("mul", wg, N.Const(n, U32), U32)
            off = N.BinOp("add", N.BinOp("mul", N.BinOp("rshift", col, N.Const(6, U32), U32),
                                         N.Const(rows * 128, U32), U32),
                          N.BinOp("mul", N.BinOp("and_", col, N.Const(63, U32), U32), N.Const(2, U32), U32), U32)
        base = L.tmp(N.BinOp("add", base, off, U32), "bwg")
    accs, _ = _fence(L, acc_vars, [])
    regs = n // 2
    assert len(acc_vars) == regs, "A staged in shared memory: one m64 slice a warpgroup (shared_a.wanted)"
    op = WgmmaOp(n, tname, tname, not kmajor, trans_a=getattr(a, "mn_major", False))
    for ks in range(k // 16):
        da = a.descriptor(L, ks)
        db = _b_descriptor(L, base, ks, kmajor, rows, isinstance(b, T.Read))
        out = L.new_var(TupleType((F32,) * regs), "wgmma")
        L.emit(N.Assign(out, instruction("wgmma.mma_async.ss", [da, db, N.Const(1, U32), *accs], op=op, fence=False)))
        accs = [N.TupleGet(N.ReadVar(out), i, F32) for i in range(regs)]
    for v, x in zip(acc_vars, accs):
        L.emit(N.Assign(v, x))


def _b_descriptor(L, base: N.Expr, ks: int, kmajor: bool, rows: int, held: bool) -> N.Expr:
    """B's descriptor for k-step `ks` of a stage at `base` (`rows`: the staged tile's rows). `held`: B is a
    variable kept in swizzle atoms for the whole kernel, whose loop-invariant descriptors are made
    where they are used (wgmma.desc) rather than hoisted, a 64-bit register each, out of the loop; a
    stage of a pipeline or ring moves every iteration, and its descriptors stay plain arithmetic."""
    if kmajor:      # B = K^T: n = rows, k = cols; 16 elements of k are 32 bytes of a 128-byte row
        off, lbo = (ks // 4) * rows * 128 + (ks % 4) * 32, 16
    else:           # B = V: k = rows (16 of them a step), n = cols in panels of 64 (LBO apart)
        off, lbo = ks * 16 * 128, rows * 128
    if held:
        return descriptor_at(L, start_field(L, base), off, lbo, 8 * 128, SWIZZLE_128B)
    return matrix_descriptor(L, N.BinOp("add", base, N.Const(off, U32), U32), lbo, 8 * 128, SWIZZLE_128B)


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
