"""sm_90 warpgroup-MMA products whose A operand is the transpose of a tile computed in registers:
the fused attention backward's dQ = dS K, where the tensor cores hand back dS^T (S^T = K Q^T keeps a
block's key rows in its warps). The tile x (K rows, M columns) is written ONCE from its registers into
128-byte swizzle atoms [M / 64][K][64] of shared memory, which is x^T as an MN-major A operand
(imm-trans-a, 16-bit types), and the product is an SS wgmma reading it through descriptors. Without
this, x^T went into A fragments through shared memory (the transpose) and, on mma.sync, through it
again (the staging), with a block barrier after each trip.

Warpgroup w's M rows 64w..64w+63 are atom panel w (or, where the warpgroups split N instead,
warpgroup_columns, all read panel 0): descriptor start base + w K 128 + ks 16 128 bytes (16 rows of K a step), LBO the panel stride K 128 (one panel a warpgroup: unused), SBO 1024 (8 rows
of 128 bytes); the MN-major operand's addressing is the simulator's (dsl/tile/ptx/sm90.py), the one
the H200 ran for attention's V (MN-major B).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BF16, F16, I32, U32
from dsl.tile import ir as T
from dsl.tile.lower.copies import fence_proxy_async
from dsl.tile.lower.layout import FragLayout, c32, iadd, iand, imul, ir32, ishr
from dsl.tile.lower.matmul.fragments import pack_pairs
from dsl.tile.lower.matmul.mma_sync import atom128_offset
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, wgmma_b_operand, wgmma_stage
from dsl.tile.lower.matmul.stages import aligned_base
from dsl.tile.lower.matmul.swizzled import ATOM_BYTES, atom_element, atom_skew
from dsl.tile.lower.matmul.wgmma import SWIZZLE_128B, descriptor_at, start_field

class TransposedA:
    """x^T waiting in shared memory as wgmma's MN-major A operand (x: `shape` = (K, M)); `wg_base`:
    this thread's warpgroup's panel."""

    mn_major = True

    def __init__(self, shape: tuple[int, int], wg_base: N.Expr) -> None:
        self.shape, self.wg_base = shape, wg_base

    def __repr__(self) -> str:
        return f"TransposedA({self.shape})"

    def descriptor(self, L, ks: int) -> N.Expr:
        """The A descriptor of k-step `ks` (16 rows of x)."""
        return descriptor_at(L, start_field(L, self.wg_base), ks * 16 * ATOM_BYTES, self.shape[0] * ATOM_BYTES,
                             8 * ATOM_BYTES, SWIZZLE_128B)


def transposed_operand(L, e: T.Matmul) -> T.TExpr | None:
    """x when product `e`'s A is tile.transpose(x) of a tile computed in registers (not a load) that
    fits the SS wgmma: 16-bit elements, M one m64 slice a warpgroup (the rows wgmma_b asks for) or 64
    rows that every warpgroup reads (warpgroup_columns), K a multiple of 16; else None."""
    a = e.a
    if not (isinstance(a, T.Permute) and tuple(a.axes) == (1, 0)) or isinstance(a.operand, T.Load):
        return None
    m, k = a.type.shape
    ok = a.type.dtype in (F16, BF16) and m in (16 * (L.T // 32), 64) and m % 64 == 0 and k % 16 == 0
    return a.operand if ok else None


def warpgroup_columns(L, e: T.Matmul) -> int | None:
    """The warpgroups, when product `e` (A the transpose of a register tile, 64 rows) runs with the
    kernel's two or more warpgroups splitting N: each one m64 wgmma over its n / G columns, reading
    all of A (FlashAttention-3's dQ = dS K on 8 warps, where 128 key rows make dS^T). Each
    warpgroup's columns are whole 64-column panels of B's atoms, or an equal part of one panel (head
    dim 64 on two warpgroups: 32 columns each, issue_product_ss starts the second one 64 bytes into
    the panel's swizzled rows); else None."""
    groups = L.T // 128
    if not (L.wgmma_products and L.cc >= 90 and L.T % 128 == 0 and groups > 1):
        return None
    (m, _), n = e.a.type.shape, e.b.type.shape[1]
    cols = n // groups
    if m != 64 or n % groups or cols > 256 or e.a.type.dtype != e.b.type.dtype:
        return None
    if cols % 64 and (cols % 8 or 64 % cols):
        return None
    if transposed_operand(L, e) is None or wgmma_b_operand(L, e.b) is None:
        return None
    return groups


def stage_transposed(L, e: T.Matmul, x: T.TExpr) -> TransposedA:
    """Write x's elements (where its layout holds them) into the product's swizzle atoms, make them
    visible to the tensor cores, and return the operand. With more than one warpgroup a barrier first
    waits for every warpgroup's reads of the previous value (one warpgroup's own wait_group has)."""
    k, m = x.type.shape
    v = L.concrete(L.expr(x))
    buf = wgmma_stage(L, x.type.dtype, k * m + STAGE_SLACK_ELEMS, ("AT", id(e)))
    base = aligned_base(L, buf, "atswz")
    if L.T > 128:
        L.sync()
    lay = v.layout
    if isinstance(lay, FragLayout):
        owner = True if lay.owner is None else lay.owner
    else:           # "D": the threads geo.owner names; "U": every thread holds all, thread 0 writes
        owner = N.Compare("eq", L.geo.tid, c32(0)) if lay == "U" else L.geo.owner(v.size)

    coords = L.coords_of(lay, v.shape)

    def write() -> None:
        if getattr(lay, "pairs", False):    # side-by-side pairs at even columns: one 32-bit store each
            for i in range(0, len(v.elems), 2):
                r, c = coords[i]
                at = N.BinOp("add", base, N.Cast(ir32(iadd(atom128_offset(r, ishr(c, 3), k, unit=2),
                                                           imul(iand(c, 7), 2))), U32), U32)
                (word,) = pack_pairs(L, v.elems[i:i + 2], x.type.dtype)
                L.asm("st.shared.b32", [L.tmp(at, "atst"), word])
            return
        skew = atom_skew(L, buf, base)
        for el, (r, c) in zip(v.elems, coords):
            L.smem_store(buf, atom_element(skew, r, c, k), el)
    L.guarded(owner, write)
    fence_proxy_async(L)
    L.sync()
    wg_base = base
    if L.T > 128 and m > 64:        # warpgroups split M: each reads its own panel
        _, warp = L.lane_warp()
        wg = N.Cast(N.BinOp("rshift", warp, c32(2), I32), U32)
        wg_base = L.tmp(N.BinOp("add", base, N.BinOp("mul", wg, N.Const(k * ATOM_BYTES, U32), U32), U32), "atwg")
    return TransposedA((k, m), wg_base)
