"""Operands of the tf32 wgmma GEMM loop staged through registers (plan.kind "tma-transpose",
matmul/tma.py): a row-major B (K x N, N contiguous: "NN") or an A stored K x M ("TN").

Why: tf32 wgmma reads both operands K-major from shared memory, and neither TMA nor cp.async can
transpose 4-byte elements on the way in, so these operands used to keep the loop on mma.sync (B) or
the portable FMA path (A). Here each thread loads 16-byte runs of the operand's rows (4 consecutive
M or N elements at one k) with ld.global.nc.v4 into registers and writes the 4 elements, one
st.shared.b32 each, into 4 rows of the K-major stage [rows][BK] with the swizzle the descriptors read
(matmul/wgmma.py: 128-byte rows for BK = 32, 64-byte for BK = 16), the layout a TMA box of a K-major
operand gets. The other operand, if K-major, still comes by TMA. The words are stored as loaded:
wgmma reads them as tf32 (dropping the low mantissa bits) as it reads the TMA-copied ones.

Thread mapping (T = 256): a thread's chunk r of a k tile is k row k0 + 16 kh, rows n0 + 64 m .. + 3,
with k0 = tid / 2 % 16, n0 = 4 (tid % 2) + 8 (tid / 32), (kh, m) = divmod(r, rows / 64). A warp
covers 16 k rows x 2 chunks: its loads read 32 contiguous bytes of each of 16 rows (whole sectors),
and with 128-byte rows its 32 stores of one element position hit 32 distinct banks (the swizzle
XORs k / 4 with n % 8).

Pipelining (sync TMA loop, S stages, TMA copies S - 2 tiles ahead): the registers hold k tile
it + S - 2 while the wgmma of tile it is issued; then (wgmma group committed, before its
wait_group 1) they are stored into that tile's stage, freed by the barrier at the top of the
iteration, fenced for the async proxy, and the loads of tile it + S - 1 are issued, so a load has
a whole iteration to land. Elements outside the array are zeros (predicated loads).
Unmeasured on the GPU (docs/tile.md).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, I32, INDEX, U32
from dsl.tile.ptx.table import instruction
from dsl.tile.lower.layout import c32, iadd, iand, imul, ir32, ishr
from dsl.tile.lower.layout import swizzle_chunk as _swz
from dsl.tile.lower.copies import fence_proxy_async
from dsl.tile.lower.runs import load_hint

EPC = 4                 # f32 elements per 16-byte chunk


class StagedOperand:
    """One operand stored K x rows (rows contiguous; rows = BM of A, BN of B): per-thread chunk
    descriptors (loop invariant), the registers holding one k tile, its load and its transposed store.
    `first`: the element index (in the operands' shared array) of the operand's stage 0."""

    def __init__(self, L, plan, which: str, first: N.Expr) -> None:
        assert L.T == 256 and plan.bk in (16, 32), "the tf32 wgmma loop: 8 warps, 64- or 128-byte rows"
        load = plan.a if which == "a" else plan.b
        self.L, self.bk, self.first = L, plan.bk, first
        self.rows = plan.bm if which == "a" else plan.bn
        self.arr = L.pref(load.param)
        self.kext = L.tmp(N.ArrayLen(self.arr, 0), which + "xk")
        rext = L.tmp(N.ArrayLen(self.arr, 1), which + "xr")
        r0 = L.tmp(N.BinOp("mul", N.Cast(L.scalar(load.index[1]), INDEX), N.Const(self.rows, INDEX), INDEX),
                   which + "xr0")
        # chunk r of this thread: k row k0 + 16 kh(r), rows n0 + 64 m(r) .. + 3 (see the module doc)
        tid = L.geo.tid
        per = self.rows // 64                            # chunks of a warp's 16 k rows, across the rows
        self.k0 = L.tmp(ir32(iand(ishr(tid, 1), 15)), which + "xk0")
        self.n0 = L.tmp(ir32(iadd(imul(iand(tid, 1), EPC), imul(ishr(tid, 5), 2 * EPC))), which + "xn0")
        self.spots = [(r // per, r % per) for r in range(self.bk * self.rows // EPC // L.T)]     # (kh, m)
        self.chunks = []                                 # (global k row within the tile, column, in range)
        for kh, m in self.spots:
            gcol = L.tmp(N.BinOp("add", r0, N.Cast(iadd(self.n0, 64 * m), INDEX), INDEX), which + "xgc")
            self.chunks.append((iadd(self.k0, 16 * kh), gcol, L.tmp(N.Compare("lt", gcol, rext), which + "xok")))
        self.regs = [[L.new_var(F32, which + "xv") for _ in range(EPC)] for _ in self.chunks]
        # stage offset of element j of a chunk at k half kh and m = 0; m adds 64 * m rows (the swizzle
        # reads n % 8 only, and k / 4 only through its low bits, so one offset serves every m)
        self.offs = {(j, kh): L.tmp(ir32(self._offset(iadd(self.n0, j), iadd(self.k0, 16 * kh))), which + "xo")
                     for j in range(EPC) for kh in range(self.bk // 16)}

    def _offset(self, n, k):
        """Element (row n, k) of a K-major stage: n * BK + the swizzled 16-byte chunk of k (as wgmma's
        K-major descriptors and TMA's swizzle place it) + k % 4."""
        return iadd(imul(n, self.bk), iadd(imul(_swz(n, ishr(k, 2), self.bk // EPC), EPC), iand(k, EPC - 1)))

    def load(self, kt: N.Expr) -> None:
        """The registers := k tile `kt` (ld.global.nc.v4, zeros outside the array)."""
        L = self.L
        k0 = L.tmp(N.BinOp("mul", N.Cast(kt, INDEX), N.Const(self.bk, INDEX), INDEX), "xk0")
        for (k, gcol, col_ok), regs in zip(self.chunks, self.regs):
            grow = L.tmp(N.BinOp("add", k0, N.Cast(k, INDEX), INDEX), "xgr")
            ok = L.tmp(N.Cast(N.Logical("and", col_ok, N.Compare("lt", grow, self.kext)), I32), "xp")
            got = L.new_var(TN.tuple_of(F32, EPC), "xld")
            L.emit(N.Assign(got, instruction("ld.global.run", [TN.GlobalAddress(self.arr, [grow, gcol]), ok,
                                                               N.Const(0.0, F32)], dtype=F32, n=EPC, nc=True,
                                             hint=load_hint(L))))
            for j, v in enumerate(regs):
                L.emit(N.Assign(v, N.TupleGet(N.ReadVar(got), j, F32)))

    def store(self, buf: N.Expr, stage: N.Expr) -> None:
        """The registers, transposed, into stage `stage`: one 4-byte store per element, at a
        per-tile base (one per element position and k half) plus a constant."""
        L, bk = self.L, self.bk
        base = L.tmp(ir32(iadd(self.first, imul(stage, self.rows * bk))), "xsb")
        at = {key: L.tmp(N.Cast(ir32(iadd(base, off)), INDEX), "xsa") for key, off in self.offs.items()}
        for (kh, m), regs in zip(self.spots, self.regs):
            for j, v in enumerate(regs):
                idx = N.BinOp("add", at[j, kh], N.Const(64 * m * bk, INDEX), INDEX)
                L.emit(N.Store(buf, [idx], N.ReadVar(v), "unchecked", 0))


class RegisterStages:
    """The loop's register-staged operands (plan.staged) and when they move: `prologue` before the
    k loop, `step` inside it after the wgmma of tile `it` is issued. `base_a`: the aligned start
    address of the operand stages (stages.operand_stages); stage s of A holds BM x BK elements, the
    B stages follow the S A stages. `start`: the k loop's first k tile (k tile it of the loop reads
    k tile start + it of the operands; split-K kernels start past 0)."""

    def __init__(self, L, plan, base_a: N.Expr, start: N.Expr) -> None:
        self.L, self.S, self.start = L, plan.stages, start
        self.buf = plan.operand_buf
        raw = TN.SharedAddress(self.buf, N.Const(0, INDEX))
        pad = L.tmp(N.Cast(N.BinOp("rshift", N.BinOp("sub", base_a, raw, U32), N.Const(2, U32), U32), I32), "xpad")
        b_first = L.tmp(ir32(iadd(pad, plan.stages * plan.bm * plan.bk)), "xbfirst")
        self.ops = [StagedOperand(L, plan, w, pad if w == "a" else b_first) for w in plan.staged]

    def _when(self, cond: N.Expr, fn) -> None:
        self.L.emit(N.If(cond, self.L.block_of(fn), []))

    def _store(self, kt: N.Expr) -> None:
        stage = self.L.tmp(N.BinOp("mod", kt, c32(self.S), I32), "xst")
        for op in self.ops:
            op.store(self.buf, stage)

    def _load(self, kt: N.Expr) -> None:
        at = self.L.tmp(N.BinOp("add", kt, self.start, I32), "xkt")     # the loop's own k tile
        for op in self.ops:
            op.load(at)

    def prologue(self, ahead: int, kt_n: N.Expr) -> None:
        """Tiles 0 .. ahead-1 into their stages, tile `ahead` into the registers."""
        for st in range(ahead):
            self._when(N.Compare("lt", c32(st), kt_n), lambda st=st: (self._load(c32(st)), self._store(c32(st))))
        self._when(N.Compare("lt", c32(ahead), kt_n), lambda: self._load(c32(ahead)))
        fence_proxy_async(self.L)

    def step(self, pre: N.Expr, kt_n: N.Expr) -> None:
        """Tile `pre` (= it + ahead, loaded last iteration) into its stage, then the loads of tile
        pre + 1; the fence makes the stores visible to the wgmmas after the next barrier."""
        L = self.L
        self._when(N.Compare("lt", pre, kt_n), lambda: self._store(pre))
        nxt = L.tmp(N.BinOp("add", pre, c32(1), I32), "xnext")
        self._when(N.Compare("lt", nxt, kt_n), lambda: self._load(nxt))
        fence_proxy_async(L)
