"""Tensor-core lowering of the GEMM main loop (Ampere-style, also what sm_90 runs without wgmma):

    for k in range(start, stop):
        acc = tile.mma(tile.load(a, (i, k), (BM, BK)), tile.load(b, (k, j), (BK, BN)), acc)
        # or, B stored N x K:  tile.transpose(tile.load(bt, (j, k), (BN, BK)))

with f16/bf16 operands (or f32, run as tf32 on mma.sync m16n8k8; or f8 on m16n8k32, sm_89+, B stored
N x K), C-contiguous 16-byte-aligned arrays whose rows are whole 16-byte chunks (specialised at launch
and stated in the contract). The loop becomes an S-stage cp.async pipeline into XOR-swizzled shared
memory (conflict-free ldmatrix), ldmatrix.x4 fragment loads (.trans for a row-major 16-bit B) and
mma.sync with f32 accumulators that stay in registers (MmaLayout) across iterations. On sm_90 the
wgmma loops (matmul/wgmma.py, matmul/tma.py) take the plans they can run; tf32 ones with an A stored
K x M (`tile.transpose(tile.load(at, (k, i), (BK, BM)))`) or, under KB_TILE_TF32_TRANSPOSE, a row-major
B stage those operands through registers (matmul/transposing.py). Anything else falls back to the
portable path in matmul/portable.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, F32, I32, INDEX
from dsl.tile import ir as T
from dsl.tile.ptx.table import instruction
from dsl.tile.lower.matmul.stages import operand_stages, stage_bytes
from dsl.tile.ptx.mma_types import mma_type
from dsl.tile.lower.layout import MmaLayout, c32, iadd, iand, imul, ir32, ishr, log2
from dsl.tile.lower.layout import swizzle_chunk as _swz
from dsl.tile.types import chunked_rows
from dsl.tile.lower.copies import cp_async16, cp_async_commit, cp_async_wait, fence_proxy_async
from dsl.tile.lower.matmul.fragments import emit_mmas, ldmatrix_x4, mma_sync

SMEM_LIMIT = 48 * 1024          # static shared memory per block
DYN_LIMIT = 160 * 1024          # dynamic shared memory for operand stages (fits sm_80's 163 KiB opt-in)
MAX_STAGES = 4
# sm_90 wgmma pipeline: up to 227 KiB of shared memory per block; the operand stages take at most this
# (what is left covers the 1 KiB alignment slack and the epilogue's static relayout buffers). Its copy
# distance is stages - 2 (one stage is still read by the wgmma group left in flight), so it needs >= 3.
WG_DYN_LIMIT = 200 * 1024
WG_MAX_STAGES = 6


@dataclass
class MmaPlan:
    loop: T.For
    acc: T.TVar
    a: T.Load
    b: T.Load
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    stages: int
    layout: MmaLayout
    kind: str = "mma"        # "mma" (mma.sync, sm_80+) | "wgmma" (sm_90 warpgroup MMA, cp.async) | "tma"
    #                          | "tma-transpose" (the TMA loop with operands staged through registers)
    esize: int = 2           # operand element bytes: 1 (f8, m16n8k32), 2 (f16/bf16, m16n8k16), 4 (tf32, m16n8k8)
    b_kmajor: bool = False   # B is tile.transpose(tile.load(bt, (j, k), (BN, BK))): bt rows are K-contiguous
    a_mmajor: bool = False   # A is tile.transpose(tile.load(at, (k, i), (BK, BM))): at is K x M (tf32 "TN")
    # operands ("a", "b") a tf32 wgmma loop stages through registers into its K-major stage
    # (matmul/transposing.py) instead of TMA: an M-major A, a row-major B (kind "tma-transpose")
    staged: tuple[str, ...] = ()
    operand_buf: N.Expr | None = None     # the stages' shared array, once stages.operand_stages made it


def _reads(e: T.TExpr, var: T.TVar) -> bool:
    return any(isinstance(x, T.Read) and x.var is var for x in T.walk_exprs(e))


def _b_operand(b: T.TExpr) -> tuple[T.Load | None, bool]:
    """The B operand's load and whether it is K-major: `tile.load(b, (k, j), (BK, BN))` (row-major B)
    or `tile.transpose(tile.load(bt, (j, k), (BN, BK)))` (B stored N x K, as a linear layer's weight)."""
    if isinstance(b, T.Load):
        return b, False
    if isinstance(b, T.Permute) and tuple(b.axes) == (1, 0) and isinstance(b.operand, T.Load):
        return b.operand, True
    return None, False


def _a_operand(a: T.TExpr) -> tuple[T.Load | None, bool]:
    """The A operand's load and whether it is M-major: `tile.load(a, (i, k), (BM, BK))` or
    `tile.transpose(tile.load(at, (k, i), (BK, BM)))` (A stored K x M)."""
    if isinstance(a, T.Load):
        return a, False
    if isinstance(a, T.Permute) and tuple(a.axes) == (1, 0) and isinstance(a.operand, T.Load):
        return a.operand, True
    return None, False


def _staged(L, esize: int, a_mmajor: bool, b_kmajor: bool) -> tuple[str, ...] | None:
    """The operands a tf32 wgmma loop must stage through registers (transposing into the K-major
    stage wgmma reads): an M-major A always (its loop has no other tensor-core path), a row-major B
    when an M-major A is staged anyway or KB_TILE_TF32_TRANSPOSE asks (else it keeps mma.sync, the
    measured default). None: the loop does not take the wgmma path."""
    if esize == 2:
        return None if a_mmajor else ()
    if esize != 4:
        return () if b_kmajor and not a_mmajor else None
    staged = (("a",) if a_mmajor else ()) + (() if b_kmajor else ("b",))
    if "b" in staged and not (a_mmajor or L.tf32_transpose):
        return None
    return staged


def _wgmma_ok(L, esize: int, b_kmajor: bool, bm: int, bn: int, bk: int) -> bool:
    """sm_90 warpgroup MMA: two warpgroups of 64 rows, 64- or 128-byte operand rows. tf32 and f8 wgmma
    read both operands K-major only: f8 needs a K-major B, tf32 stages any other layout through
    registers (matmul/transposing.py, `_staged`); 16-bit types take either B layout."""
    if not (L.cc >= 90 and L.T == 256 and bm == 128 and bk * esize in (64, 128) and bn in (64, 128, 256)):
        return False
    if esize == 1 and not b_kmajor:
        return False
    epc = 16 // esize
    return (bm * bk // epc) % L.T == 0 and (bk * bn // epc) % L.T == 0


def _wgmma_stages(L, bm: int, bn: int, one: int) -> int:
    """Operand stages of an sm_90 loop: as many as WG_DYN_LIMIT holds, or, where a persistent kernel
    stages its TMA stores in shared memory of their own, as many as fit beside that buffer
    (store_tma.plan_staging)."""
    from dsl.tile.lower.store_tma import plan_staging
    return plan_staging(L, bm, bn, one, min(WG_MAX_STAGES, WG_DYN_LIMIT // one))


def match(L, s: T.For, max_stages: int) -> MmaPlan | None:
    if len(s.body) != 1 or not isinstance(s.body[0], T.Assign):
        return None
    asg = s.body[0]
    m = asg.value
    if not (isinstance(m, T.Matmul) and isinstance(m.acc, T.Read) and m.acc.var is asg.var):
        return None
    (a, a_mmajor), (b, b_kmajor) = _a_operand(m.a), _b_operand(m.b)
    if a is None or b is None or not (isinstance(s.step, T.Const) and s.step.value == 1):
        return None
    kb, jb = (b.index[1], b.index[0]) if b_kmajor else (b.index[0], b.index[1])
    ka, ia = (a.index[0], a.index[1]) if a_mmajor else (a.index[1], a.index[0])
    if not (isinstance(ka, T.Read) and ka.var is s.var and isinstance(kb, T.Read) and kb.var is s.var):
        return None
    if _reads(ia, s.var) or _reads(jb, s.var) or _reads(ia, asg.var) or _reads(jb, asg.var):
        return None
    f8 = a.type.dtype.is_f8 and b.type.dtype.is_f8
    if not f8 and (a.type.dtype != b.type.dtype or a.type.dtype not in (F16, BF16, F32)):
        return None
    if f8 and not (b_kmajor and L.cc >= 89):
        return None      # f8 mma reads B K-major only (ldmatrix cannot transpose bytes); sm_89+
    esize = a.type.dtype.itemsize
    epc = 16 // esize            # elements per 16-byte copy chunk
    kstep = 32 // esize          # k of one mma: 16 (f16/bf16), 8 (tf32), 32 (f8): two chunks each
    if a.padding != 0 or b.padding != 0:
        return None
    for p in (a.param, b.param):
        if not chunked_rows(L.facts.get(p.name, {}), esize):       # 16-byte rows: whole copy chunks
            return None
    bk, bm = a.type.shape if a_mmajor else a.type.shape[::-1]
    bn = b.type.shape[0] if b_kmajor else b.type.shape[1]
    staged = _staged(L, esize, a_mmajor, b_kmajor)
    if staged is not None and _wgmma_ok(L, esize, b_kmajor, bm, bn, bk):
        stages = _wgmma_stages(L, bm, bn, stage_bytes(bm, bn, bk, esize))
        if stages >= 3 and not (staged and L.persistent):
            # TMA-fed (dsl/tile/lower/matmul/tma.py; persistent kernels carry the mbarrier phases from tile
            # to tile) when warp-specialised or not persistent; a persistent kernel on the default
            # pipeline keeps cp.async feeding the same wgmma (the path proven on the GPU first). Operands
            # staged through registers (not persistent) run the TMA loop's barrier form ("tma-transpose").
            tma = not L.persistent or L.gemm_pipeline == "ws"
            kind = "tma-transpose" if staged else "tma" if tma else "wgmma"
            return MmaPlan(s, asg.var, a, b, bm, bn, bk, 8, 1, stages, MmaLayout((bm, bn), L.T, 8, 1),
                           kind=kind, esize=esize, b_kmajor=b_kmajor, a_mmajor=a_mmajor, staged=staged)
    if a_mmajor:
        return None      # the loops below read A K-major: the product takes the portable path
    warps = L.T // 32
    wm, wn = {1: (1, 1), 2: (2, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4)}.get(warps, (0, 0))
    if not wm or bm % (wm * 16) or bn % (wn * 16) or bk % kstep:
        return None
    if (bm * bk // epc) % L.T or (bk * bn // epc) % L.T:
        return None
    one = stage_bytes(bm, bn, bk, esize)
    stages = max_stages
    while stages > 1 and stages * one > DYN_LIMIT:
        stages -= 1
    if stages < 2:
        return None
    return MmaPlan(s, asg.var, a, b, bm, bn, bk, wm, wn, stages, MmaLayout((bm, bn), L.T, wm, wn),
                   esize=esize, b_kmajor=b_kmajor)


def atom128_offset(row, chunk, rows: int, unit: int = 1):
    """Offset of 16-byte chunk `chunk` of tile row `row` in 128-byte swizzle atoms [cols / 64][rows][64]
    of 16-bit elements, chunk c of a 128-byte row at c ^ (row % 8): the MN-major operand layout wgmma's
    128-byte-swizzle descriptors read (GEMM B stages here, tile products' B stages in tc_operands).
    In elements, or with unit=2 in bytes."""
    return iadd(imul(ishr(chunk, 3), rows * 64 * unit),
                iadd(imul(row, 64 * unit), imul(_swz(row, iand(chunk, 7), 8), 8 * unit)))


def bind_warps(L, layout: MmaLayout, slices: bool = False) -> tuple[N.Expr, N.Expr, N.Expr, N.Expr, N.Expr, N.Expr]:
    """Bind `layout`'s lane geometry at the current point of the kernel. Returns (warp row, warp column)
    in the wm x wn warp grid, (lane / 4, 2 * (lane % 4)) and the warp's origin (row, column). A warp
    owns a block of mt consecutive 16-row m-tiles; with `slices` (wn == 1, warps in warpgroups of
    four) warpgroup g owns rows [64 mt g, 64 mt (g + 1)) as mt m64 slices, its warp w rows 16 w .. +15
    of each: the rows of warpgroup MMA's accumulators, one m64 wgmma a slice."""
    lane, warp = L.lane_warp()
    if layout.by_warpgroup:         # warp w at (w % 4, w / 4): a warpgroup a column block
        wm_i = L.tmp(N.BinOp("and_", warp, c32(3), I32), "wm")
        wn_i = L.tmp(N.BinOp("rshift", warp, c32(2), I32), "wn")
    else:
        wm_i = L.tmp(N.BinOp("floordiv", warp, c32(layout.wn), I32), "wm")
        wn_i = L.tmp(N.BinOp("mod", warp, c32(layout.wn), I32), "wn")
    lr, lc = L.tmp(ir32(ishr(lane, 2)), "lr"), L.tmp(ir32(imul(iand(lane, 3), 2)), "lc")
    if slices:
        r0 = L.tmp(ir32(iadd(imul(ishr(wm_i, 2), 64 * layout.mt), imul(iand(wm_i, 3), 16))), "wr0")
    else:
        r0 = L.tmp(ir32(imul(wm_i, layout.shape[0] // layout.wm)), "wr0")
    c0 = L.tmp(ir32(imul(wn_i, layout.shape[1] // layout.wn)), "wc0")
    layout.bind(lr, lc, r0, c0, 64 if slices else 16)
    return wm_i, wn_i, lr, lc, r0, c0


def plan_all(L, body: list[T.TStmt], max_stages: int) -> None:
    """Find tensor-core GEMM loops, fix their accumulators' layout, bind the lane geometry."""
    for s in body:
        if isinstance(s, T.For):
            plan = match(L, s, max_stages)
            if plan is not None and id(plan.acc) not in L.var_layouts:
                L.mma_plans[id(s)] = plan
                L.var_layouts[id(plan.acc)] = plan.layout
                plan.wm_i, plan.wn_i = bind_warps(L, plan.layout)[:2]  # type: ignore[attr-defined]
            else:
                plan_all(L, s.body, max_stages)
        elif isinstance(s, T.If):
            plan_all(L, s.then, max_stages)
            plan_all(L, s.else_, max_stages)



@dataclass
class _Loop:
    """The loop-invariant values of one GEMM main loop: operand refs and extents, the tile indices,
    the k-tile range, and the stage geometry (16-byte chunks per row of the A and B stages)."""
    A: N.Expr
    B: N.Expr
    M: N.Expr
    K: N.Expr
    Nn: N.Expr
    Kb: N.Expr
    ia: N.Expr
    jb: N.Expr
    start: N.Expr
    kt_n: N.Expr
    lane: N.Expr
    epc: int
    ca: int
    cb: int


def lower_loop(L, plan: MmaPlan) -> None:
    if plan.kind in ("tma", "tma-transpose"):
        from dsl.tile.lower.matmul.tma import lower_loop_tma
        layout, acc_vars = L.vars[id(plan.acc)]
        assert layout is plan.layout
        lower_loop_tma(L, plan, acc_vars)
        return
    tname = mma_type(plan.a.type.dtype), mma_type(plan.b.type.dtype)
    base_a, base_b, sa, sb = operand_stages(L, plan)
    wg = plan.kind == "wgmma"
    if wg:
        L.arch_specific = True      # warpgroup MMA exists only on the arch-specific target sm_90a
    lp = _loop_values(L, plan)
    a_desc, b_desc = _copy_descriptors(L, plan, lp, wg)
    issue = _copy_issuer(L, plan, lp, a_desc, b_desc, sa, sb)
    a_off, b_off, mt_n, nt_n = _fragment_offsets(L, plan, lp, wg)
    layout, acc_vars = L.vars[id(plan.acc)]
    assert layout is plan.layout
    if wg:
        from dsl.tile.lower.matmul.wgmma import compute_wgmma

        def compute(stage: N.Expr) -> None:
            compute_wgmma(L, plan, sa, sb, stage, acc_vars)
    else:
        compute = _mma_compute(L, plan, sa, sb, a_off, b_off, acc_vars, mt_n, nt_n, tname)
    _pipelined_loop(L, plan, lp, issue, compute, acc_vars, wg)


def _loop_values(L, plan: MmaPlan) -> _Loop:
    kmaj = plan.b_kmajor
    epc = 16 // plan.esize                      # elements per 16-byte chunk
    A, B = L.pref(plan.a.param), L.pref(plan.b.param)
    M = L.tmp(N.ArrayLen(A, 0), "M")
    K = L.tmp(N.ArrayLen(A, 1), "K")
    # B's own extents bound its copies (its k extent may differ from A's: reads past it are zeros)
    Nn = L.tmp(N.ArrayLen(B, 0 if kmaj else 1), "N")
    Kb = L.tmp(N.ArrayLen(B, 1 if kmaj else 0), "Kb")
    ia = L.tmp(N.Cast(L.scalar(plan.a.index[0]), INDEX), "ia")
    jb = L.tmp(N.Cast(L.scalar(plan.b.index[0 if kmaj else 1]), INDEX), "jb")
    s = plan.loop
    start, stop = L.scalar(s.start), L.scalar(s.stop)
    kt_n = L.tmp(N.BinOp("max", N.BinOp("sub", stop, start, I32), c32(0), I32), "ktiles")
    lane, _ = L.lane_warp()
    return _Loop(A, B, M, K, Nn, Kb, ia, jb, start, kt_n, lane, epc, plan.bk // epc, plan.bn // epc)


def _copy_descriptors(L, plan: MmaPlan, lp: _Loop, wg: bool) -> tuple[list, list]:
    """Per-thread copy descriptors of the A and B stages (loop invariant): (shared offset, global
    row, global column within the k tile), swizzled like the ldmatrix / wgmma reads."""
    bm, bn, bk, epc, ca, cb = plan.bm, plan.bn, plan.bk, lp.epc, lp.ca, lp.cb
    tid = L.geo.tid

    def kmajor_copies(rows: int, tile_row: N.Expr, tag: str) -> list:
        """A K-major stage [rows][bk]: A, or B stored N x K."""
        out = []
        for r in range(rows * ca // L.T):
            q = iadd(r * L.T, tid)
            row, ch = ishr(q, log2(ca)), iand(q, ca - 1)
            off = L.tmp(ir32(iadd(imul(row, bk), imul(_swz(row, ch, ca), epc))), tag + "off")
            grow = L.tmp(N.BinOp("add", N.BinOp("mul", tile_row, N.Const(rows, INDEX), INDEX),
                                 N.Cast(ir32(row), INDEX), INDEX), tag + "gr")
            out.append((off, grow, L.tmp(N.Cast(ir32(imul(ch, epc)), INDEX), tag + "gc")))
        return out

    kmaj = plan.b_kmajor
    a_desc = kmajor_copies(bm, lp.ia, "a")
    b_desc = kmajor_copies(bn, lp.jb, "b") if kmaj else []
    for r in range(0 if kmaj else bk * cb // L.T):
        q = iadd(r * L.T, tid)
        krow, ch = ishr(q, log2(cb)), iand(q, cb - 1)
        if wg:   # MN-major 128-byte swizzle atoms: [bn/64][bk][64]
            off = L.tmp(ir32(atom128_offset(krow, ch, bk)), "boff")
        else:
            off = L.tmp(ir32(iadd(imul(krow, bn), imul(_swz(krow, ch, cb), epc))), "boff")
        gcol = L.tmp(N.BinOp("add", N.BinOp("mul", lp.jb, N.Const(bn, INDEX), INDEX),
                             N.Cast(ir32(imul(ch, epc)), INDEX), INDEX), "bgc")
        grow0 = L.tmp(N.Cast(ir32(krow), INDEX), "bgr")
        b_desc.append((off, grow0, gcol))
    return a_desc, b_desc


def _copy_issuer(L, plan: MmaPlan, lp: _Loop, a_desc: list, b_desc: list, sa, sb):
    """issue(kt, stage): the cp.async copies of k tile `kt` into `stage`. A copy that falls outside
    the array reads 0 bytes (zero fill) from the array's first element: the address is selected, not
    the indices, so the in-range address stays a linear function of the k tile and the loop carries
    it forward instead of recomputing row * stride every stage."""
    bm, bn, bk, kmaj = plan.bm, plan.bn, plan.bk, plan.b_kmajor
    zero64 = N.Const(0, INDEX)
    a_safe = L.tmp(TN.GlobalAddress(lp.A, [zero64, zero64]), "asafe")
    b_safe = L.tmp(TN.GlobalAddress(lp.B, [zero64, zero64]), "bsafe")

    def issue(kt: N.Expr, stage: N.Expr) -> None:
        kt64 = L.tmp(N.Cast(N.BinOp("add", kt, lp.start, I32), INDEX), "kt")
        abase = L.tmp(ir32(imul(stage, bm * bk)), "sab")
        bbase = L.tmp(ir32(imul(stage, bk * bn)), "sbb")
        for off, grow, gcol0 in a_desc:
            gcol = N.BinOp("add", N.BinOp("mul", kt64, N.Const(bk, INDEX), INDEX), gcol0, INDEX)
            gcol = L.tmp(gcol, "gc")
            ok = L.tmp(N.Logical("and", N.Compare("lt", grow, lp.M), N.Compare("lt", gcol, lp.K)), "ok")
            cp_async16(L, sa(N.BinOp("add", abase, off, I32)), TN.GlobalAddress(lp.A, [grow, gcol]), ok, a_safe)
        for off, brow, bcol in b_desc:
            k_at = L.tmp(N.BinOp("add", N.BinOp("mul", kt64, N.Const(bk, INDEX), INDEX),
                                 bcol if kmaj else brow, INDEX), "gk")
            grow, gcol = (brow, k_at) if kmaj else (k_at, bcol)
            ok = L.tmp(N.Logical("and", N.Compare("lt", k_at, lp.Kb),
                                 N.Compare("lt", brow if kmaj else bcol, lp.Nn)), "ok")
            cp_async16(L, sb(N.BinOp("add", bbase, off, I32)), TN.GlobalAddress(lp.B, [grow, gcol]), ok, b_safe)
    return issue


def _fragment_offsets(L, plan: MmaPlan, lp: _Loop, wg: bool) -> tuple[dict, dict, int, int]:
    """Fragment address offsets (loop invariant): A rows per m-tile, B k-rows per k step; and the
    warp's m-tile and n-tile counts. wgmma reads its operands through descriptors: none."""
    bm, bn, bk, es, kmaj = plan.bm, plan.bn, plan.bk, plan.esize, plan.b_kmajor
    ca, cb, lane = lp.ca, lp.cb, lp.lane
    wtm, wtn = bm // plan.wm, bn // plan.wn
    mt_n, nt_n = wtm // 16, wtn // 8
    wr0 = L.tmp(ir32(imul(plan.wm_i, wtm)), "fa")  # type: ignore[attr-defined]
    wc0 = L.tmp(ir32(imul(plan.wn_i, wtn // 8)), "fb")  # type: ignore[attr-defined]
    sel8 = L.tmp(ir32(imul(iand(ishr(lane, 3), 1), 8)), "s8")
    hi = L.tmp(ir32(ishr(lane, 4)), "hi")
    lo7 = L.tmp(ir32(iand(lane, 7)), "l7")
    a_off, b_off = {}, {}
    kstep = 32 // es
    if es == 4 and not kmaj:   # tf32 B fragments: b0 = B[k0+t][n0+g], b1 = B[k0+t+4][n0+g] (t = lane%4, g = lane/4)
        t4 = L.tmp(ir32(iand(lane, 3)), "t4")
        g8 = L.tmp(ir32(ishr(lane, 2)), "g8")
        wcol = L.tmp(ir32(iadd(imul(plan.wn_i, wtn), g8)), "wcol")  # type: ignore[attr-defined]
    for kk in range(0 if wg else bk // kstep):
        for mt in range(mt_n):
            row = L.tmp(ir32(iadd(wr0, iadd(lo7, iadd(sel8, mt * 16)))), "ar")
            chunk = iadd(hi, kk * 2)
            a_off[kk, mt] = L.tmp(ir32(iadd(imul(row, bk), imul(_swz(row, chunk, ca), lp.epc))), "ao")
        if kmaj:   # ldmatrix.x4 of Bt rows: n rows lo7 + 8 * (lane / 16), 16-byte chunk 2 kk + lane / 8 % 2
            for np_ in range(nt_n // 2):
                row = L.tmp(ir32(iadd(imul(plan.wn_i, wtn), iadd(lo7, iadd(imul(hi, 8), np_ * 16)))),  # type: ignore[attr-defined]
                            "br")
                chunk = iadd(ishr(sel8, 3), kk * 2)
                b_off[kk, np_] = L.tmp(ir32(iadd(imul(row, bk), imul(_swz(row, chunk, ca), lp.epc))), "bo")
            continue
        if es == 4:
            for nt in range(nt_n):
                col = L.tmp(ir32(iadd(wcol, nt * 8)), "bc")
                for half in range(2):
                    krow = L.tmp(ir32(iadd(t4, kk * 8 + half * 4)), "kr")
                    b_off[kk, nt, half] = L.tmp(ir32(iadd(imul(krow, bn), iadd(
                        imul(_swz(krow, ishr(col, 2), cb), 4), iand(col, 3)))), "bo")
            continue
        for np_ in range(nt_n // 2):
            krow = L.tmp(ir32(iadd(lo7, iadd(sel8, kk * 16))), "kr")
            chunk = L.tmp(ir32(iadd(wc0, iadd(hi, np_ * 2))), "nc")
            b_off[kk, np_] = L.tmp(ir32(iadd(imul(krow, bn), imul(_swz(krow, chunk, cb), 8))), "bo")
    return a_off, b_off, mt_n, nt_n


def _pipelined_loop(L, plan: MmaPlan, lp: _Loop, issue, compute, acc_vars: list, wg: bool) -> None:
    """The S-stage loop. Copies run `ahead` stages in front of the compute. mma.sync finishes within
    its stage, so the stage computed last iteration is free: ahead = S-1. wgmma leaves one group in
    flight (wait_group 1), so the stage computed last iteration may still be read: ahead = S-2, and
    the barrier at the top of each iteration (after every warpgroup's wait_group 1 of the previous
    one) frees stage it-2."""
    S, kt_n = plan.stages, lp.kt_n
    ahead = S - 2 if wg else S - 1
    for st in range(ahead):
        L.emit(N.If(N.Compare("lt", c32(st), kt_n), L.block_of(lambda st=st: issue(c32(st), c32(st))), []))
        cp_async_commit(L)
    it = L.new_var(I32, "kit")

    def body() -> None:
        cp_async_wait(L, ahead - 1)
        if wg:   # make the cp.async (generic proxy) writes visible to wgmma (async proxy)
            fence_proxy_async(L)
        L.sync()
        pre = L.tmp(N.BinOp("add", N.ReadVar(it), c32(ahead), I32), "pre")
        pst = L.tmp(N.BinOp("mod", pre, c32(S), I32), "pst")
        L.emit(N.If(N.Compare("lt", pre, kt_n), L.block_of(lambda: issue(pre, pst)), []))
        cp_async_commit(L)
        compute(L.tmp(N.BinOp("mod", N.ReadVar(it), c32(S), I32), "cst"))
    L.emit(N.ForRange(it, c32(0), kt_n, c32(1), L.block_of(body), plan.loop.loc))
    if wg:
        from dsl.tile.lower.matmul.wgmma import wait_wgmma
        wait_wgmma(L, 0, acc_vars)
    cp_async_wait(L, 0)
    L.sync()
    L.relied.update({plan.a.param.name, plan.b.param.name})


def _mma_compute(L, plan, sa, sb, a_off, b_off, acc_vars, mt_n, nt_n, tname):
    """The per-stage mma.sync body. A fragments: ldmatrix.x4 of the swizzled rows, for every element
    size: each fragment register is 4 consecutive bytes of a row (two b16, one tf32, four f8), which
    is what ldmatrix gives lane l (row l/4, bytes 4(l%4)..+3 of each 8x16-byte matrix). B fragments:
    K-major B rows the same way; row-major B by ldmatrix.x4.trans for 16-bit elements, and for f32
    (tf32, m16n8k8) one 32-bit load per element, since .trans would split them. tf32 operands are
    rounded with cvt.rna, as the simulator does. `tname`: the PTX types of A and B."""
    bm, bn, bk = plan.bm, plan.bn, plan.bk
    tf32 = plan.esize == 4
    kstep = 32 // plan.esize

    def rna(x: N.Expr, hint: str) -> N.Expr:
        return L.tmp(instruction("cvt.rna.tf32.f32", [x]), hint)

    def compute(stage: N.Expr) -> None:
        abase = L.tmp(ir32(imul(stage, bm * bk)), "cab")
        bbase = L.tmp(ir32(imul(stage, bk * bn)), "cbb")
        for kk in range(bk // kstep):
            afr, bfr = {}, {}
            for mt in range(mt_n):
                addr = sa(N.BinOp("add", abase, a_off[kk, mt], I32))
                regs = ldmatrix_x4(L, addr, False)
                afr[mt] = [rna(r, "a32") for r in regs] if tf32 else regs
            if plan.b_kmajor:   # Bt rows are the .col B fragments as they are (both element sizes)
                for np_ in range(nt_n // 2):
                    addr = sb(N.BinOp("add", bbase, b_off[kk, np_], I32))
                    regs = ldmatrix_x4(L, addr, False)
                    if tf32:
                        regs = [rna(r, "b32t") for r in regs]
                    bfr[2 * np_], bfr[2 * np_ + 1] = regs[0:2], regs[2:4]
            elif tf32:
                for nt in range(nt_n):
                    regs = []
                    for half in range(2):
                        addr = sb(N.BinOp("add", bbase, b_off[kk, nt, half], I32))
                        raw = L.tmp(instruction("ld.shared.b32", [addr]), "b32")
                        regs.append(rna(raw, "b32t"))
                    bfr[nt] = regs
            else:
                for np_ in range(nt_n // 2):
                    addr = sb(N.BinOp("add", bbase, b_off[kk, np_], I32))
                    regs = ldmatrix_x4(L, addr, True)
                    bfr[2 * np_], bfr[2 * np_ + 1] = regs[0:2], regs[2:4]
            emit_mmas(L, mma_sync(f"m16n8k{kstep}", *tname), afr, bfr, acc_vars, mt_n, nt_n)

    return compute


