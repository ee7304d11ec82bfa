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
from dsl.ir.types import BF16, F16, F32
from dsl.tile.layout import LV, MmaLayout, iadd, imul, ir32


def tc_warps(L, m: int, n: int, k: int, a_dtype, b_dtype) -> tuple[int, int] | None:
    """(warps along M, warps along N) for an m x n x k product on the tensor cores, or None when this
    lowering does not apply (switched off, pre-sm_80, other dtypes, shapes the warps cannot tile)."""
    if not L.tc_matmul or L.cc < 80 or a_dtype != b_dtype or a_dtype not in (F16, BF16):
        return None
    if m % 16 or n % 8 or k % 16:
        return None
    warps = L.T // 32
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


def lower_matmul_tc(L, a: LV, b: LV, acc: LV | None, wm: int, wn: int) -> LV:
    """a: (m, k), b: (k, n), concrete; acc: (m, n) or None. Returns the (m, n) f32 product (+ acc) in
    MmaLayout. Fragment elements are read from the staged tiles with ordinary shared loads; the mma
    packs them into its registers itself, so the CPU simulator runs this lowering too (mma_sim)."""
    from dsl.tile.lower_mma import _emit_mmas, bind_warps
    (m, k), (_, n) = a.shape, b.shape
    layout = MmaLayout((m, n), L.T, wm, wn)
    _, _, g, t2, row0, col0 = bind_warps(L, layout)       # g = lane / 4, t2 = 2 * (lane % 4)
    acc_vars = [L.new_var(F32, "tcacc") for _ in range(layout.per_thread)]
    init = L.to_layout(acc, layout).elems if acc is not None else [N.Const(0.0, F32)] * layout.per_thread
    for v, x in zip(acc_vars, init):
        L.emit(N.Assign(v, x if x.type == F32 else N.Cast(x, F32)))
    sa = L.write_scratch(a, slot=1)
    sb = L.write_scratch(b, slot=2)

    def elems(buf: N.Expr, dtype, base, offsets: tuple[int, ...]) -> list[N.Expr]:
        return [L.tmp(L.smem_load(buf, iadd(base, off), dtype), "tce") for off in offsets]

    tname = "bf16" if a.dtype == BF16 else "f16"
    mma = mma_statement(tname)
    for ks in range(k // 16):
        afr, bfr = {}, {}
        for mt in range(layout.mt):
            r = iadd(row0, iadd(g, mt * 16))
            at = L.tmp(ir32(iadd(imul(r, k), iadd(t2, ks * 16))), "tcai")          # A[r][2t + 16 ks]
            afr[mt] = elems(sa, a.dtype, at, (0, 1, 8 * k, 8 * k + 1, 8, 9, 8 * k + 8, 8 * k + 9))
        for nt in range(layout.nt):
            c = iadd(col0, iadd(g, nt * 8))
            bt = L.tmp(ir32(iadd(imul(iadd(t2, ks * 16), n), c)), "tcbi")          # B[2t + 16 ks][c]
            bfr[nt] = elems(sb, b.dtype, bt, (0, n, 8 * n, 9 * n))
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
