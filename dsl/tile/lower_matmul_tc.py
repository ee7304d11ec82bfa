"""Tensor-core lowering of a tile.matmul / tile.mma outside the GEMM main loops (lower_mma.py matches
those): both operands are staged in shared memory as the portable path does (lower_matmul.py), then
every warp computes its block of the product with mma.sync m16n8k16 (f16/bf16 operands, f32
accumulators), loading its A and B fragments from the staged tiles, and the result leaves in the
accumulator layout of the GEMM loops (MmaLayout) for the consumer to convert. This is what makes the
two products of flash attention run on the tensor cores.

Experimental: used only when `KB_TILE_TC_MATMUL=1` (dsl/tile/compile.py), until it has been verified
on a GPU; the portable path stays the default. The mma carries its CPU semantics (mma_sim), so
`simulate_lowered(..., tensor_cores=True)` runs this lowering on the simulator. Fragment layouts (PTX ISA, "Matrix fragments for
mma.m16n8k16"): with g = lane / 4 and t = lane % 4, A register i holds rows g (+8 for i = 1, 3) at
columns 2t, 2t+1 (+8 for i = 2, 3); B register i holds rows (k) 2t, 2t+1 (+8 for i = 1) at column
g; the accumulators are MmaLayout's c0..c3.
"""
from __future__ import annotations

import numpy as np

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, INDEX, U32, U64, VOID
from dsl.tile import ir as T
from dsl.tile.layout import (A_FRAG_COL, A_FRAG_ROW, LV, FragLayout, MmaLayout, MmaOperandA, c32, iadd, iand, imul,
                             ir32, ishr, log2)
from dsl.tile.lower_mma import _emit_mmas


def tc_warps(L, m: int, n: int, k: int, a_dtype, b_dtype) -> tuple[int, int] | None:
    """(warps along M, warps along N) for an m x n x k product on the tensor cores, or None when this
    lowering does not apply (switched off, pre-sm_80, other dtypes, shapes the warps cannot tile).
    Warps split M only where they can: then every row of the product lives in one warp, so its row
    reductions and the next product's A operand stay in registers (flash attention)."""
    if not L.tc_matmul or L.cc < 80 or a_dtype != b_dtype or a_dtype not in (F16, BF16):
        return None
    if m % 16 or n % 8 or k % 16:
        return None
    warps = L.T // 32
    if m % (warps * 16) == 0:
        return warps, 1
    best = None
    wm = 1
    while wm <= warps:
        wn = warps // wm
        if m % (wm * 16) == 0 and n % (wn * 8) == 0:
            shape = (m // wm) / 16 - (n // wn) / 8          # prefer square per-warp blocks of fragments
            if best is None or abs(shape) < best[0]:
                best = (abs(shape), wm, wn)
        wm *= 2
    return None if best is None else (best[1], best[2])


def _a_fragments(L, e, a: LV, layout: MmaLayout, k: int):
    """A fragments straight from registers, {(mt, ks): 8 elements}, when `a` already sits in them: an A
    operand layout of this warp grid, or accumulators of a product whose warps split M the same way
    (m16n8 accumulators of n-tiles 2ks and 2ks+1 are exactly the A fragment of k-slice ks). Else None
    (the operand is staged), and a variable read here is hinted into the A layout for next time."""
    lay = a.layout
    if isinstance(lay, MmaOperandA) and lay.key == ("A", a.shape, layout.wm, layout.wn):
        return {(mt, ks): lay.fragment(a.elems, mt, ks) for mt in range(layout.mt) for ks in range(k // 16)}
    if isinstance(lay, MmaLayout) and lay.wn == 1 and lay.wm == layout.wm and lay.shape[0] == layout.shape[0]:
        out = {}
        for mt in range(layout.mt):
            for ks in range(k // 16):
                lo = (mt * lay.nt + 2 * ks) * 4
                out[mt, ks] = a.elems[lo:lo + 8]
        return out
    if isinstance(e.a, T.Read) and not isinstance(lay, FragLayout):
        L.hint(e.a.var, L.frag_layout(("A", a.shape, layout.wm, layout.wn)))
    return None


def _stage_async(L, op: T.TExpr, slot: int) -> tuple[N.Expr, int] | None:
    """Stage a tile.load operand with cp.async (16-byte chunks, no registers, zero fill past the
    array's edge) into rows padded by 8 elements, so the fragment reads of a warp hit 32 distinct
    banks. Needs what the GEMM loop needs: a C-contiguous, 16-byte-aligned array whose rows are
    multiples of 8 elements (launch facts, stated in the contract); else None (staged through
    registers). Returns (shared buffer, row stride in elements)."""
    if not (isinstance(op, T.Load) and op.padding == 0 and op.type.dtype in (F16, BF16) and L.cc >= 80):
        return None
    f = L.facts.get(op.param.name, {})
    rows, cols = op.type.shape
    if not (f.get("layout") == "C" and f.get("aligned16") and f.get("div8")) or cols % 8:
        return None
    stride = cols + 8
    buf = L.scratch(op.type.dtype, rows * stride, slot)
    arr = L.pref(op.param)
    base = [N.Cast(L.scalar(i), INDEX) for i in op.index]
    nrows, ncols = L.tmp(N.ArrayLen(arr, 0), "srows"), L.tmp(N.ArrayLen(arr, 1), "scols")
    zero = N.Const(0, INDEX)
    safe = L.tmp(TN.GlobalAddress(arr, [zero, zero]), "ssafe")
    r0 = L.tmp(N.BinOp("mul", base[0], N.Const(rows, INDEX), INDEX), "sr0")
    c0 = L.tmp(N.BinOp("mul", base[1], N.Const(cols, INDEX), INDEX), "sc0")
    chunks, per_row = rows * cols // 8, cols // 8
    for r in range((chunks + L.T - 1) // L.T):
        q = iadd(r * L.T, L.geo.tid)
        row, ch = ishr(q, log2(per_row)), iand(q, per_row - 1)
        grow = L.tmp(N.BinOp("add", r0, N.Cast(ir32(row), INDEX), INDEX), "sgr")
        gcol = L.tmp(N.BinOp("add", c0, N.Cast(ir32(imul(ch, 8)), INDEX), INDEX), "sgc")
        ok = L.tmp(N.Logical("and", N.Logical("and", N.Compare("ge", grow, zero), N.Compare("lt", grow, nrows)),
                             N.Logical("and", N.Compare("ge", gcol, zero), N.Compare("lt", gcol, ncols))), "sok")
        src = N.IfExp(ok, TN.GlobalAddress(arr, [grow, gcol]), safe, U64)
        dst = TN.SharedAddress(buf, N.Cast(ir32(iadd(imul(row, stride), imul(ch, 8))), INDEX))
        size = N.IfExp(ok, N.Const(16, U32), N.Const(0, U32), U32)

        def copy(dst=dst, src=src, size=size) -> None:
            L.emit(N.ExprStmt(TN.InlinePtx("cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r",
                                           [dst, src, size], VOID, True)))
        L.guarded(True if chunks % L.T == 0 or r < chunks // L.T else N.Compare("lt", ir32(q), c32(chunks)), copy)
    L.relied.add(op.param.name)
    return buf, stride


def _stage(L, op: T.TExpr, value: LV | None, slot: int) -> tuple[N.Expr, int, bool]:
    """(shared buffer, row stride, copied asynchronously) of a staged operand: a load by cp.async
    where it can, else its value (`value`, or the operand lowered now) through registers."""
    got = _stage_async(L, op, slot) if value is None else None
    if got is not None:
        return got[0], got[1], True
    v = value if value is not None else L.concrete(L.expr(op))
    return L.write_scratch(v, slot=slot), op.type.shape[1], False


def _wait_async(L) -> None:
    L.emit(N.ExprStmt(TN.InlinePtx("cp.async.commit_group;", "", [], VOID, True)))
    L.emit(N.ExprStmt(TN.InlinePtx("cp.async.wait_group 0;", "", [], VOID, True)))
    L.sync()


def lower_matmul_tc(L, e, wm: int, wn: int) -> LV:
    """e: the Matmul, a (m, k) @ b (k, n) (+ acc (m, n)). Returns the f32 product in MmaLayout. A comes
    from registers where it already is (_a_fragments), else from a staged tile; B is staged, a
    transposed operand (K^T of attention) in its own row order, so it needs no transpose pass.
    Fragment elements are read from the staged tiles with ordinary shared loads; the mma packs them
    into its registers itself, so the CPU simulator runs this lowering too (mma_sim)."""
    (m, k), (_, n) = e.a.type.shape, e.b.type.shape
    layout = L.frag_layout(("C", (m, n), wm, wn))
    assert isinstance(layout, MmaLayout)
    g, t2 = layout.lane_row, layout.lane_col
    row0, col0 = layout.warp_row0, layout.warp_col0
    acc_vars = [L.new_var(F32, "tcacc") for _ in range(layout.per_thread)]
    init = L.to_layout(L.expr(e.acc), layout).elems if e.acc is not None else [N.Const(0.0, F32)] * layout.per_thread
    for v, x in zip(acc_vars, init):
        L.emit(N.Assign(v, x if x.type == F32 else N.Cast(x, F32)))
    a = a_regs = None
    if not isinstance(e.a, T.Load):                 # a computed operand may already sit in registers
        a = L.concrete(L.expr(e.a))
        a_regs = _a_fragments(L, e, a, layout, k)
    copied = False
    if a_regs is None:
        sa, sa_st, copied = _stage(L, e.a, a, 1)
    b_t = isinstance(e.b, T.Permute) and tuple(e.b.axes) == (1, 0)
    sb, sb_st, b_copied = _stage(L, e.b.operand if b_t else e.b, None, 2)
    if copied or b_copied:
        _wait_async(L)

    def elems(buf: N.Expr, dtype, base, offsets: tuple[int, ...]) -> list[N.Expr]:
        return [L.tmp(L.smem_load(buf, iadd(base, off), dtype), "tce") for off in offsets]

    dtype = e.a.type.dtype
    mma = mma_statement("bf16" if dtype == BF16 else "f16")
    for ks in range(k // 16):
        afr, bfr = {}, {}
        for mt in range(layout.mt):
            if a_regs is not None:
                afr[mt] = a_regs[mt, ks]
                continue
            r = iadd(row0, iadd(g, mt * 16))
            at = L.tmp(ir32(iadd(imul(r, sa_st), iadd(t2, ks * 16))), "tcai")       # A[r][2t + 16 ks]
            afr[mt] = elems(sa, dtype, at, tuple(ro * sa_st + co for ro, co in zip(A_FRAG_ROW, A_FRAG_COL)))
        for nt in range(layout.nt):
            c = iadd(col0, iadd(g, nt * 8))
            if b_t:                                                                 # B[kk][c] = b[c][kk]
                bt = L.tmp(ir32(iadd(imul(c, sb_st), iadd(t2, ks * 16))), "tcbi")
                bfr[nt] = elems(sb, dtype, bt, (0, 1, 8, 9))
            else:                                                                   # B[2t + 16 ks][c]
                bt = L.tmp(ir32(iadd(imul(iadd(t2, ks * 16), sb_st), c)), "tcbi")
                bfr[nt] = elems(sb, dtype, bt, (0, sb_st, 8 * sb_st, 9 * sb_st))
        _emit_mmas(L, mma, afr, bfr, acc_vars, layout.mt, layout.nt)
    L.sync()
    return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])


def mma_statement(tname: str):
    """(8 A elements, 4 B elements, 4 f32 accumulators) -> InlinePtx of one mma.sync m16n8k16 that
    packs the 16-bit elements pairwise into its A and B registers (first element in the low half)."""
    text = ("{ .reg .b32 a<4>, b<2>; "
            "mov.b32 a0, {$4, $5}; mov.b32 a1, {$6, $7}; mov.b32 a2, {$8, $9}; mov.b32 a3, {$10, $11}; "
            "mov.b32 b0, {$12, $13}; mov.b32 b1, {$14, $15}; "
            f"mma.sync.aligned.m16n8k16.row.col.f32.{tname}.{tname}.f32 "
            "{$0, $1, $2, $3}, {a0, a1, a2, a3}, {b0, b1}, {$16, $17, $18, $19}; }")
    cons = ",".join(["=f"] * 4 + ["h"] * 12 + ["f"] * 4)

    def make(a_elems: list, b_elems: list, c_elems: list) -> N.Expr:
        return TN.InlinePtx(text, cons, [*a_elems, *b_elems, *c_elems], TN.tuple_of(F32, 4), False,
                            sim=mma_sim)
    return make


def mma_sim(args: list, pos: np.ndarray, present: np.ndarray) -> tuple:
    """CPU semantics of mma_statement for the simulator: per warp, D = A @ B + C with A 16x16, B 16x8,
    C and D 16x8 spread over the lanes as the PTX ISA specifies (see the module docstring), the
    products summed in f64 and rounded to f32 once (the tensor cores' summation order differs)."""
    size = len(present)
    padded = []
    for v in args:
        x = np.zeros(size, np.float64)
        x[pos] = np.asarray(v, np.float64)
        padded.append(x.reshape(-1, 32))
    warps = padded[0].shape[0]
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    A = np.zeros((warps, 16, 16))
    B = np.zeros((warps, 16, 8))
    C = np.zeros((warps, 16, 8))
    a_at = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1),
            (g, 2 * t + 8), (g, 2 * t + 9), (g + 8, 2 * t + 8), (g + 8, 2 * t + 9)]
    b_at = [(2 * t, g), (2 * t + 1, g), (2 * t + 8, g), (2 * t + 9, g)]
    c_at = [(g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1)]
    for i, (r, c) in enumerate(a_at):
        A[:, r, c] = padded[i]
    for i, (r, c) in enumerate(b_at):
        B[:, r, c] = padded[8 + i]
    for i, (r, c) in enumerate(c_at):
        C[:, r, c] = padded[12 + i]
    D = (A @ B + C).astype(np.float32)
    out = []
    for r, c in c_at:
        d = D[:, r, c].reshape(-1)
        out.append(d[pos])
    return tuple(out)
