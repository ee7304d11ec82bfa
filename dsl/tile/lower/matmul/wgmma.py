"""sm_90 warpgroup MMA for the GEMM main loop of matmul/mma_sync.py (plan.kind == "wgmma").

Shared-memory operands are read by the tensor cores through matrix descriptors: A is K-major with
the 64-byte or 128-byte swizzle (rows of BK * esize bytes): one swizzle row per tile row; B is
either K-major the same way (stored N x K, or a row-major f32 B transposed through registers,
matmul/transposing.py) or, for 16-bit types, MN-major in 128-byte swizzle atoms
([BN/64][BK][64], see the copy offsets in matmul/mma_sync.py). tf32 and f8 need K-major B. Two warpgroups each own 64 rows of the
128-row tile; each 32-byte step of K is one `wgmma.mma_async` (k16, or k8 for tf32) per warpgroup. A stage's group is
committed and left in flight (wait_group 1): the tensor cores work on it while the threads wait for the
next stage's copies, pass the barrier and issue the copies after it.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, I32, U32, U64
from dsl.tile.lower.layout import c32, imul, ir32
from dsl.tile.ptx.table import instruction
from dsl.tile.ptx.mma_types import WgmmaOp, mma_type

SWIZZLE_128B, SWIZZLE_64B = 1, 2
_MODE = {128: SWIZZLE_128B, 64: SWIZZLE_64B}


def kmajor_swizzle(plan) -> int:
    """The swizzle width (bytes) of a K-major operand's rows of BK * esize = 64 or 128 bytes: what
    the TMA boxes (matmul/tma.py) or the cp.async offsets write and the descriptors' mode reads."""
    return 128 if plan.bk * plan.esize == 128 else 64


def matrix_descriptor(L, addr: N.Expr, lbo: int, sbo: int, mode: int) -> N.Expr:
    """64-bit wgmma matrix descriptor: start address, leading/stride byte offsets (>> 4), swizzle."""
    const = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | (mode << 62)
    start = N.BinOp("rshift", N.BinOp("and_", N.Cast(addr, U64), N.Const(0x3FFFF, U64), U64),
                    N.Const(4, U64), U64)
    return L.tmp(N.BinOp("or_", start, N.Const(const, U64), U64), "desc")


def start_field(L, base: N.Expr) -> N.Expr:
    """The start-address field of descriptors at shared address `base` (u32): base >> 4, 14 bits."""
    return L.tmp(N.BinOp("rshift", N.BinOp("and_", base, N.Const(0x3FFFF, U32), U32), N.Const(4, U32), U32), "dstart")


def descriptor_at(L, start: N.Expr, offset: int, lbo: int, sbo: int, mode: int) -> N.Expr:
    """matrix_descriptor of address base + `offset` bytes (`start`: start_field(base)), made where it is
    used (wgmma.desc): a loop over products then holds `start`, one register, where hoisted 64-bit
    descriptors took two a k-step (64 registers in the fused attention backward on 8 warps, which spilled)."""
    lo = (offset >> 4) + ((lbo >> 4) << 16)
    hi = (sbo >> 4) | (mode << 30)
    return L.tmp(instruction("wgmma.desc", [start], lo=lo, hi=hi), "desc")



def compute_wgmma(L, plan, sa, sb, stage: N.Expr, acc_vars: list[N.Var], after_issue=None) -> None:
    """sa/sb: element index → shared address of the A/B stage buffers. Each step is 32 bytes of K
    (k16 of f16/bf16, k8 of tf32); a K-major operand's rows are bk * esize = 64 or 128 bytes.
    `after_issue()`: code run once the group is committed, before wait_group 1 (the register-staged
    operands' stores and loads, matmul/transposing.py), while the tensor cores work on the group."""
    bm, bn, bk, es = plan.bm, plan.bn, plan.bk, plan.esize
    b_kmajor = plan.b_kmajor or "b" in plan.staged    # a row-major f32 B is staged K-major
    ta, tb = mma_type(plan.a.type.dtype), mma_type(plan.b.type.dtype)
    row_bytes = bk * es
    kmode = _MODE[kmajor_swizzle(plan)]
    _, warp = L.lane_warp()
    wg = ir32(N.BinOp("rshift", warp, c32(2), I32))
    a_elem = N.BinOp("add", ir32(imul(stage, bm * bk)), N.BinOp("mul", wg, c32(64 * bk), I32), I32)
    a_base = L.tmp(sa(a_elem), "wa")
    b_base = L.tmp(sb(ir32(imul(stage, bk * bn))), "wb")
    regs = bn // 2
    # f16/bf16 B MN-major is transposed (imm-trans-b); tf32 and f8 have no transpose, K-major B
    op = WgmmaOp(bn, ta, tb, es == 2 and not b_kmajor)
    for kk in range(row_bytes // 32):
        a_addr = N.BinOp("add", a_base, N.Const(kk * 32, U32), U32)
        da = matrix_descriptor(L, a_addr, 16, 8 * row_bytes, kmode)
        if b_kmajor:         # [bn][bk] rows, swizzled like A's
            db = matrix_descriptor(L, N.BinOp("add", b_base, N.Const(kk * 32, U32), U32), 16, 8 * row_bytes, kmode)
        else:                # MN-major atoms [bn/64][bk][64]: 16 rows of 128 B per step
            b_addr = N.BinOp("add", b_base, N.Const(kk * 16 * 128, U32), U32)
            db = matrix_descriptor(L, b_addr, bk * 128, 8 * 128, SWIZZLE_128B)
        # the fence rides in the first wgmma's statement: the register copies the compiler makes for
        # the tied accumulators (the zeroed ones of the first k tile, say) then come before it, and
        # ptxas need not insert a warpgroup.arrive (which in a divergent path serialises the wgmmas)
        out = L.new_var(TN.tuple_of(F32, regs), "wgmma")
        L.emit(N.Assign(out, instruction("wgmma.mma_async.ss", [da, db, N.Const(1, U32),
                                                                *[N.ReadVar(v) for v in acc_vars]],
                                         op=op, fence=kk == 0)))
        for i, v in enumerate(acc_vars):
            L.emit(N.Assign(v, N.TupleGet(N.ReadVar(out), i, F32)))
    L.asm("wgmma.commit_group")
    if after_issue is not None:
        after_issue()
    wait_wgmma(L, 1, acc_vars)


def wait_wgmma(L, pending: int, acc_vars: list[N.Var]) -> None:
    """wgmma.wait_group `pending`, with the accumulators passed through it (tied in/out operands,
    no instructions) so that no use of them can be scheduled before the wait."""
    n = len(acc_vars)
    ty = TN.tuple_of(F32, n)
    out = L.new_var(ty, "wgwait")
    L.emit(N.Assign(out, instruction("wgmma.wait_group", [N.ReadVar(v) for v in acc_vars], pending=pending, n=n)))
    for i, v in enumerate(acc_vars):
        L.emit(N.Assign(v, N.TupleGet(N.ReadVar(out), i, F32)))
