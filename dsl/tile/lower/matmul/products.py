"""Tensor-core lowering of a tile.matmul / tile.mma outside the GEMM main loops (matmul/mma_sync.py matches
those): both operands are staged in shared memory as the portable path does (matmul/portable.py), then
every warp computes its block of the product with mma.sync m16n8k16 (f16/bf16 operands, f32
accumulators), loading its A and B fragments from the staged tiles, and the result leaves in the
accumulator layout of the GEMM loops (MmaLayout) for the consumer to convert. This is what makes the
two products of flash attention run on the tensor cores.

On by default (KB_TILE_TC_MATMUL=0 selects the portable path, dsl/tile/compile.py). The register
path (mma.sync with 16-bit elements read by ordinary shared loads) serves operands staged through
registers; operands staged by cp.async (16-byte-aligned rows: GPU launch facts) are read with
ldmatrix instead. Both have CPU semantics (dsl/tile/ptx/sm80.py), so `simulate_lowered(...,
tensor_cores=True)` runs the lowering an sm_80 build runs. Fragment layouts (PTX ISA, "Matrix fragments for
mma.m16n8k16"): with g = lane / 4 and t = lane % 4, A register i holds rows g (+8 for i = 1, 3) at
columns 2t, 2t+1 (+8 for i = 2, 3); B register i holds rows (k) 2t, 2t+1 (+8 for i = 1) at column
g; the accumulators are MmaLayout's c0..c3.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, INDEX
from dsl.tile import ir as T
from dsl.tile.lower.layout import (A_FRAG_COL, A_FRAG_ROW, LV, FragLayout, MmaLayout, MmaOperandA, SharedTile, iadd, iand,
                             imul, ir32, ishr)
from dsl.tile.ptx.table import instruction
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait
from dsl.tile.lower.matmul.fragments import emit_mmas, ldmatrix_x4, mma_sync, pack_pairs
from dsl.tile.ptx.mma_types import mma_type
from dsl.tile.lower.pipeline import prefetch_next, wait_for
from dsl.tile.lower.matmul.operands import async_ok, issue_copies, wgmma_b, wgmma_b_operand
from dsl.tile.lower.matmul.overlap import before_last, rotation_of
from dsl.tile.lower.matmul.swizzled import SwizzledA
from dsl.tile.lower.matmul.shared_a import wanted as shared_a_wanted
from dsl.tile.lower.matmul.transposed_a import stage_transposed, transposed_operand, warpgroup_columns


# Registers a thread sets aside for the f32 accumulators that products carry through loops and the
# loop-invariant A operands kept as A fragments, all together: flash attention at D128 holds its 64
# accumulators and its 64-element queries (faster there than shared memory on the H200). An A operand
# that would take the kernel past it waits in shared memory (SharedTile), staged once: the attention
# backward's dK/dV accumulators (128) with K and V as A fragments spilled 644 bytes (ptxas -v, sm_90a,
# 64x32 tiles), none with K and V in shared memory.
FRAGMENT_REGISTERS = 128


def _accumulators(loop: T.For) -> dict:
    """{variable id: tile type} of the variables `loop` accumulates products into (acc = acc + a @ b)."""
    return {id(s.var): s.var.type for s in T.walk_stmts(loop.body)
            if isinstance(s, T.Assign) and isinstance(s.value, T.Matmul) and s.value.acc is not None}


def _a_registers_left(L, var_id: int) -> int:
    """FRAGMENT_REGISTERS less the accumulators of the loop that carries the most and the A fragments
    other variables were already given (first come), in elements a thread."""
    held = max((sum(math.prod(t.shape) // L.T for t in _accumulators(loop).values())
                for loop in T.walk_stmts(L.fn.body) if isinstance(loop, T.For)), default=0)
    hinted = {**L.layout_hints, **L.new_hints}
    return FRAGMENT_REGISTERS - held - sum(L.frag_layout(key).per_thread for vid, key in hinted.items()
                                           if vid != var_id and key[0] == "A")


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
        frag = L.frag_layout(("A", a.shape, layout.wm, layout.wn))
        L.hint(e.a.var, frag if frag.per_thread <= _a_registers_left(L, id(e.a.var)) else ("S", a.shape))
    return None


def _stage_async(L, op: T.TExpr, slot: int) -> tuple[N.Expr, int] | None:
    """Stage a tile.load operand with cp.async (no registers) into rows padded by 8 elements, so the
    fragment reads of a warp hit 32 distinct banks; None where async_ok says no (then it is staged
    through registers). Returns (shared buffer, row stride in elements)."""
    if not async_ok(L, op):
        return None
    assert isinstance(op, T.Load)
    rows, cols = op.type.shape
    buf = L.scratch(op.type.dtype, rows * (cols + 8), slot)
    issue_copies(L, op, buf, cols + 8, [L.scalar(i) for i in op.index])
    return buf, cols + 8


def _stage(L, op: T.TExpr, value: LV | None, slot: int) -> tuple[N.Expr, int, bool]:
    """(shared buffer, row stride, copied asynchronously) of a staged operand: a load by cp.async
    where it can, else its value (`value`, or the operand lowered now) through registers."""
    got = _stage_async(L, op, slot) if value is None else None
    if got is not None:
        return got[0], got[1], True
    if value is None and L.cc >= 80:
        _record_sync_staging(L, op)
    v = value if value is not None else L.concrete(L.expr(op))
    return L.write_scratch(v, slot=slot), op.type.shape[1], False


def _record_sync_staging(L, op: T.TExpr) -> None:
    """Say why an operand goes through registers (dsl/perf.py, kind "sync-staging")."""
    from dsl.perf import SlowPath
    if isinstance(op, T.Load):
        why = (f"the load of '{op.param.name}' is not known to be a C-contiguous, 16-byte-aligned array of "
               "16-bit elements with rows a multiple of 8 (the facts cp.async needs); pass such an array")
    else:
        why = ("the operand is computed, not a tile.load (cast, scaled or transposed tiles are staged "
               "through registers)")
    L.slow_paths.append(SlowPath("sync-staging", f"tile.matmul operand staged synchronously: {why}",
                                 op.loc.line, op.loc.file))


def _record_mma_sync(L, e: T.Matmul, m: int, n: int, k: int) -> None:
    """Say why a product on sm_90 runs on mma.sync, not warpgroup MMA (dsl/perf.py, "mma-sync-product")."""
    from dsl.perf import SlowPath
    from dsl.tile.lower.matmul.operands import wgmma_refusal
    why = wgmma_refusal(L, m, n, k, e.a.type.dtype, e.b)
    L.slow_paths.append(SlowPath("mma-sync-product", f"tile.matmul {m}x{n}x{k} on mma.sync, not warpgroup "
                                 f"MMA: {why}", e.loc.line, e.loc.file))


def _wait_async(L) -> None:
    cp_async_commit(L)
    cp_async_wait(L, 0)
    L.sync()


def lower_matmul_tc(L, e, wm: int, wn: int) -> LV:
    """e: the Matmul, a (m, k) @ b (k, n) (+ acc (m, n)). Returns the f32 product in MmaLayout. A comes
    from registers where it already is (_a_fragments), else from a staged tile; B is staged, a
    transposed operand (K^T of attention) in its own row order, so it needs no transpose pass.
    Fragment elements are read from the staged tiles with ordinary shared loads; the mma packs them
    into its registers itself, so the CPU simulator runs this lowering too (mma_sim)."""
    (m, k), (_, n) = e.a.type.shape, e.b.type.shape
    groups = warpgroup_columns(L, e)        # the warpgroups split N: a column block each
    layout = L.frag_layout(("C", (m, n), wm, wn) if groups is None else ("C", (m, n), 4, groups, "wg"))
    assert isinstance(layout, MmaLayout)
    acc_vars = [L.new_var(F32, "tcacc") for _ in range(layout.per_thread)]
    before_last(L, e)           # a rotated loop's last product: its previous issue completes first (overlap.py)
    init = L.to_layout(L.expr(e.acc), layout).elems if e.acc is not None else [N.Const(0.0, F32)] * layout.per_thread
    for v, x in zip(acc_vars, init):
        L.emit(N.Assign(v, x if x.type == F32 else N.Cast(x, F32)))
    a = a_regs = shared_a = swizzled_a = None
    wg_b = wgmma_b(L, m, n, k, e.a.type.dtype, e.b) if groups is None else wgmma_b_operand(L, e.b)
    if wg_b is not None and shared_a_wanted(L, e):  # KB_TILE_WGMMA_A=shared: A staged once (matmul/shared_a.py)
        L.hint(e.a.var, ("W", e.a.type.shape))
    if wg_b is not None and rotation_of(L, e) is None and (xt := transposed_operand(L, e)) is not None:
        from dsl.tile.lower.matmul.wgmma_products import lower_product_wgmma
        return lower_product_wgmma(L, e, layout, acc_vars, None, wg_b, a_shared=stage_transposed(L, e, xt))
    if not isinstance(e.a, T.Load):                 # a computed operand may already sit in registers
        a = L.expr(e.a)
        if isinstance(a.layout, SwizzledA):         # in wgmma's swizzle atoms, staged where it was assigned
            swizzled_a = a.layout
        elif isinstance(a.layout, SharedTile):      # or in shared memory, staged where it was assigned
            shared_a = a.layout
        else:
            a = L.concrete(a)
            a_regs = _a_fragments(L, e, a, layout, k)
    if wg_b is not None:                            # sm_90: the product on warpgroup MMA
        from dsl.tile.lower.matmul.wgmma_products import lower_product_wgmma
        if swizzled_a is not None and rotation_of(L, e) is None:
            return lower_product_wgmma(L, e, layout, acc_vars, None, wg_b, a_shared=swizzled_a)
        if a_regs is None and shared_a is not None and shared_a.ldmatrix:
            return lower_product_wgmma(L, e, layout, acc_vars, None, wg_b, a_packed=_a_by_ldmatrix(L, layout, shared_a, k))
        if a_regs is None:                          # A into its fragments, from wherever it is
            frag = L.frag_layout(("A", (m, k), layout.wm, layout.wn))
            av = L.to_layout(a if a is not None else L.concrete(L.expr(e.a)), frag)
            a_regs = {(mt, ks): frag.fragment(av.elems, mt, ks) for mt in range(frag.mt) for ks in range(k // 16)}
        return lower_product_wgmma(L, e, layout, acc_vars, a_regs, wg_b)
    if L.cc >= 90 and L.wgmma_products:             # a product warpgroup MMA could have taken: say why not
        _record_mma_sync(L, e, m, n, k)
    if swizzled_a is not None:                      # mma.sync reads elements: staged through registers
        a = L.concrete(a)
    ops = _stage_operands(L, e, a, a_regs, shared_a)
    _mma_steps(L, e, layout, ops, a_regs, acc_vars)
    L.sync()
    if ops.piped:
        prefetch_next(L, ops.pipe, ops.piped)
    return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])


@dataclass
class _Operands:
    """Where the staged operands of one product are: shared buffers and row strides (sa is None when
    A comes from registers), B transposed (K^T), the operands a loop pipeline copies ahead, and
    whether A and B went through ldmatrix-readable cp.async stages."""
    sa: N.Expr | None
    sa_st: int
    sb: N.Expr
    sb_st: int
    b_t: bool
    b_op: T.TExpr
    piped: list
    pipe: object
    a_ldm: bool
    b_ldm: bool


def _stage_operands(L, e, a, a_regs, shared_a) -> _Operands:
    b_t = isinstance(e.b, T.Permute) and tuple(e.b.axes) == (1, 0)
    b_op = e.b.operand if b_t else e.b
    # operands a loop pipeline copies ahead (dsl/tile/lower/pipeline.py), in staging order
    piped = [op for op in ((e.a,) if a_regs is None else ()) + (b_op,) if id(op) in L.pipelined]
    pipe = L.pipelined[id(piped[0])] if piped else None
    copied = b_copied = False
    sa, sa_st = None, 0
    if shared_a is not None:
        sa, sa_st = shared_a.buf, shared_a.stride
    elif a_regs is None:
        if e.a in piped:
            st = pipe.stages[pipe.position(e.a)]
            sa, sa_st = st.buf, st.stride
        else:
            sa, sa_st, copied = _stage(L, e.a, a, 1)
    shared_b = _held_in_shared(L, b_op)
    if b_op in piped:
        st = pipe.stages[pipe.position(b_op)]
        sb, sb_st = st.buf, st.stride
    elif shared_b is not None:      # a variable kept in shared memory (SharedTile): read where it is
        sb, sb_st = shared_b.buf, shared_b.stride
    else:
        sb, sb_st, b_copied = _stage(L, b_op, None, 2)
    if copied or b_copied:
        _wait_async(L)
    if piped:
        wait_for(L, pipe, piped)
    # cp.async-staged operands (padded rows, GPU only: the simulator stages through registers) are
    # read with ldmatrix.x4, four 8x8 matrices per instruction; the mma then takes packed registers
    a_ldm = a_regs is None and (copied or e.a in piped or shared_a is not None and shared_a.ldmatrix)
    b_ldm = b_copied or b_op in piped or shared_b is not None and shared_b.ldmatrix
    return _Operands(sa, sa_st, sb, sb_st, b_t, b_op, piped, pipe, a_ldm, b_ldm)


def _a_by_ldmatrix(L, layout: MmaLayout, shared: SharedTile, k: int) -> dict:
    """{(mt, ks): the 4 packed A registers} of this warp's rows of an A operand waiting in shared memory
    (a SharedTile filled by cp.async), one ldmatrix.x4 a 16 x 16 slice: the registers of mma.sync's A
    fragment, which is warpgroup MMA's A from registers too (one instruction a slice where a lane's
    element loads took eight)."""
    ops = _Operands(shared.buf, shared.stride, None, 0, False, None, [], None, True, False)
    a_lane, _ = _ldmatrix_lanes(L, layout, ops, True, False)
    return {(mt, ks): _ldmatrix(L, shared.buf, iadd(a_lane, (mt * layout.mt_step) * shared.stride + ks * 16), False)
            for mt in range(layout.mt) for ks in range(k // 16)}


def _held_in_shared(L, op: T.TExpr) -> SharedTile | None:
    """The SharedTile of `op` when it reads a variable kept in shared memory (matmul A operands too
    large for registers: the keys of attention's backward, whose dQ = dS K reads them again as B),
    so the product reads it there instead of staging a second copy."""
    if not isinstance(op, T.Read):
        return None
    got = L.vars.get(id(op.var))
    return got[0] if got is not None and isinstance(got[0], SharedTile) else None


def _ldmatrix_lanes(L, layout: MmaLayout, ops: _Operands, a_ldm: bool, b_ldm: bool) -> tuple:
    """This lane's ldmatrix row addresses (element offsets) into the A and B stages."""
    row0, col0 = layout.warp_row0, layout.warp_col0
    lane, _ = L.lane_warp()
    mat_lo = L.tmp(ir32(imul(iand(ishr(lane, 3), 1), 8)), "ldm_lo")     # 8 * (matrix & 1)
    mat_hi = L.tmp(ir32(imul(ishr(lane, 4), 8)), "ldm_hi")              # 8 * (matrix >> 1)
    r8 = L.tmp(ir32(iand(lane, 7)), "ldm_r")
    a_lane = b_lane = None
    if a_ldm:       # rows 8 * (matrix & 1) + r of the m-tile, k columns 8 * (matrix >> 1)
        a_lane = L.tmp(ir32(iadd(imul(iadd(row0, iadd(mat_lo, r8)), ops.sa_st), mat_hi)), "ldm_a")
    if b_ldm and ops.b_t:   # K rows (n) 8 * (matrix >> 1) + r of the n-tile pair, k columns 8 * (matrix & 1)
        b_lane = L.tmp(ir32(iadd(imul(iadd(col0, iadd(mat_hi, r8)), ops.sb_st), mat_lo)), "ldm_b")
    elif b_ldm:         # V rows (k) 8 * (matrix & 1) + r, n columns 8 * (matrix >> 1), transposed
        b_lane = L.tmp(ir32(iadd(imul(iadd(mat_lo, r8), ops.sb_st), iadd(col0, mat_hi))), "ldm_b")
    return a_lane, b_lane


def _mma_steps(L, e, layout: MmaLayout, ops: _Operands, a_regs, acc_vars: list) -> None:
    """The k/16 steps of mma.sync m16n8k16 over the warp's m-tiles x n-tiles."""
    g, t2 = layout.lane_row, layout.lane_col
    row0, col0 = layout.warp_row0, layout.warp_col0
    k = e.a.type.shape[1]
    sa, sa_st, sb, sb_st, b_t = ops.sa, ops.sa_st, ops.sb, ops.sb_st, ops.b_t

    def elems(buf: N.Expr, dtype, base, offsets: tuple[int, ...]) -> list[N.Expr]:
        return [L.tmp(L.smem_load(buf, iadd(base, off), dtype), "tce") for off in offsets]

    dtype = e.a.type.dtype
    tname = mma_type(dtype)
    a_ldm, b_ldm = ops.a_ldm, ops.b_ldm and layout.nt % 2 == 0
    packed = a_ldm or b_ldm
    mma = mma_sync("m16n8k16", tname, tname) if packed else mma_statement(tname)
    if packed:
        a_lane, b_lane = _ldmatrix_lanes(L, layout, ops, a_ldm, b_ldm)
    for ks in range(k // 16):
        afr, bfr = {}, {}
        for mt in range(layout.mt):
            if a_regs is not None:
                afr[mt] = pack_pairs(L, a_regs[mt, ks], dtype) if packed else a_regs[mt, ks]
            elif a_ldm:
                afr[mt] = _ldmatrix(L, sa, iadd(a_lane, (mt * layout.mt_step) * sa_st + ks * 16), False)
            else:
                r = iadd(row0, iadd(g, mt * layout.mt_step))
                at = L.tmp(ir32(iadd(imul(r, sa_st), iadd(t2, ks * 16))), "tcai")       # A[r][2t + 16 ks]
                afr[mt] = elems(sa, dtype, at, tuple(ro * sa_st + co for ro, co in zip(A_FRAG_ROW, A_FRAG_COL)))
                afr[mt] = pack_pairs(L, afr[mt], dtype) if packed else afr[mt]
        for nt in range(layout.nt):
            if b_ldm:
                if nt % 2 == 0:
                    off = (nt * 8) * sb_st + ks * 16 if b_t else (ks * 16) * sb_st + nt * 8
                    regs = _ldmatrix(L, sb, iadd(b_lane, off), not b_t)
                    bfr[nt], bfr[nt + 1] = regs[0:2], regs[2:4]
                continue
            c = iadd(col0, iadd(g, nt * 8))
            if b_t:                                                                 # B[kk][c] = b[c][kk]
                bt = L.tmp(ir32(iadd(imul(c, sb_st), iadd(t2, ks * 16))), "tcbi")
                bfr[nt] = elems(sb, dtype, bt, (0, 1, 8, 9))
            else:                                                                   # B[2t + 16 ks][c]
                bt = L.tmp(ir32(iadd(imul(iadd(t2, ks * 16), sb_st), c)), "tcbi")
                bfr[nt] = elems(sb, dtype, bt, (0, sb_st, 8 * sb_st, 9 * sb_st))
            bfr[nt] = pack_pairs(L, bfr[nt], dtype) if packed else bfr[nt]
        emit_mmas(L, mma, afr, bfr, acc_vars, layout.mt, layout.nt)


def _ldmatrix(L, buf: N.Expr, elem: N.Expr, trans: bool) -> list[N.Expr]:
    """ldmatrix.x4 (.trans) at element `elem` of shared `buf` (this lane's row address): 4 registers."""
    return ldmatrix_x4(L, TN.SharedAddress(buf, N.Cast(ir32(elem), INDEX)), trans)


def mma_statement(tname: str):
    """(8 A elements, 4 B elements, 4 f32 accumulators) -> InlinePtx of one mma.sync m16n8k16 that
    packs the 16-bit elements pairwise into its A and B registers (first element in the low half)."""
    def make(a_elems: list, b_elems: list, c_elems: list) -> N.Expr:
        return instruction("mma.sync.elements", [*a_elems, *b_elems, *c_elems], tname=tname)
    return make
