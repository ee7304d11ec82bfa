"""What the tensor-core tile.matmul (matmul/products.py) and the loop pipeline that feeds it
(pipeline.py) both decide: how the warps split a product, and whether and how an operand is
copied by cp.async."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, INDEX, U32, ArrayType
from dsl.tile import ir as T
from dsl.tile.lower.layout import c32, iadd, iand, imul, ir32, ishr, log2
from dsl.tile.lower.matmul.stages import SWIZZLE_ALIGN
from dsl.tile.lower.copies import cp_async16
from dsl.tile.lower.matmul.mma_sync import atom128_offset
from dsl.tile.lower.matmul.swizzled import SwizzledA
from dsl.tile.types import chunked_rows


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


def async_ok(L, op: T.TExpr) -> bool:
    """Can `op` be staged by cp.async: a tile.load of 16-bit elements from a C-contiguous,
    16-byte-aligned array whose rows are multiples of 8 elements (the GEMM loop's launch facts, stated
    in the contract), on sm_80+."""
    if not (isinstance(op, T.Load) and op.padding == 0 and op.type.dtype in (F16, BF16) and L.cc >= 80):
        return False
    return chunked_rows(L.facts.get(op.param.name, {}), op.type.dtype.itemsize) and op.type.shape[1] % 8 == 0


def wgmma_b(L, m: int, n: int, k: int, a_dtype, b: T.TExpr) -> T.Load | T.Read | None:
    """The B load of an m x n x k product that runs on sm_90 warpgroup MMA (matmul/wgmma_products.py),
    else None: 16-bit operands, warps that split M in 16-row slices (one m64 wgmma per warpgroup, or
    under wgmma_slices one a slice of the warpgroup's rows; each warp's 16 rows the mma.sync
    fragments' rows, so S, P and the row statistics keep their layout), and a B tile.load that
    cp.async can stage in 128-byte swizzle atoms (rows of a multiple of 64 elements), or a read of a
    variable already kept in such atoms (matmul/swizzled.SwizzledA: the keys of the fused attention
    backward, A of S^T = K Q^T and B of dQ = dS K). The loop pipeline (pipeline.py) asks the same question to lay out B's stage."""
    got = _wgmma_b_or_why(L, m, n, k, a_dtype, b)
    return None if isinstance(got, str) else got


def wgmma_refusal(L, m: int, n: int, k: int, a_dtype, b: T.TExpr) -> str:
    """Why an m x n x k product that wgmma_b refused runs on mma.sync (perf kind "mma-sync-product"):
    the first of its conditions it misses, in words, with what would meet it."""
    got = _wgmma_b_or_why(L, m, n, k, a_dtype, b)
    return got if isinstance(got, str) else "warpgroup MMA takes it"


def _wgmma_b_or_why(L, m: int, n: int, k: int, a_dtype, b: T.TExpr) -> T.Load | T.Read | str | None:
    """wgmma_b's answer, or in words the first of its conditions the product misses (None: the switch
    is off or the target has no warpgroup MMA, which is no slow path to report)."""
    warps = L.T // 32
    rows = 16 * warps
    if not (L.wgmma_products and L.cc >= 90):
        return None
    if L.T % 128:
        return f"the block's {warps} warps are not whole warpgroups (launch a multiple of 4 warps)"
    if n > 256:
        return f"N = {n} is more than the 256 columns of one wgmma (use tiles of at most 256 columns)"
    if m != rows and not (L.wgmma_slices and m % rows == 0):
        fix = (f"launch {m // 16} warps, or use tiles of {rows} rows" if m % 64 == 0
               else f"use tiles of {rows} rows")
        return (f"its {m} rows are not one m64 slice a warpgroup ({rows} rows on {warps} warps; warpgroups "
                "split N instead only for A = tile.transpose(x) of a 64-row tile computed in registers, B "
                f"in swizzle atoms, each warpgroup whole or equal parts of B's 64-column panels); {fix}")
    # tc_warps checks the switch, the dtypes and n, k; (warps, 1) with m = 16 x warps, or under
    # wgmma_slices a multiple of it: each warpgroup's rows are m64 slices (frags.warpgroup_rows)
    if tc_warps(L, m, n, k, a_dtype, b.type.dtype) != (warps, 1):
        return f"its {m}x{n}x{k} shape does not give each warp 16 rows"
    return wgmma_b_operand(L, b) or (
        "its B is neither a tile.load that cp.async can stage in 128-byte swizzle atoms (16-bit, "
        "C-contiguous, 16-byte aligned, a multiple of 64 columns and 8 rows) nor a variable kept in "
        "such atoms; load B as it is from such an array")


def wgmma_b_operand(L, b: T.TExpr) -> T.Load | T.Read | None:
    """wgmma_b's question about the operand alone: the load (or swizzled variable's read) that B
    `b` comes from, if the tensor cores can read it from swizzle atoms, else None."""
    op = b.operand if isinstance(b, T.Permute) and tuple(b.axes) == (1, 0) else b
    if isinstance(op, T.Read):      # a variable kept in swizzle atoms (matmul/shared_a.py): read there
        got = L.vars.get(id(op.var))
        return op if got is not None and isinstance(got[0], SwizzledA) else None
    if not async_ok(L, op):
        return None
    rows, cols = op.type.shape
    return op if cols % 64 == 0 and rows % 8 == 0 else None


STAGE_SLACK_ELEMS = SWIZZLE_ALIGN // 2        # see wgmma_stage


def wgmma_stage(L, dtype, elems: int, key: tuple) -> N.Expr:
    """A stage buffer for `elems` elements of a wgmma operand, in dynamic shared memory (where the
    GEMM loops keep theirs: the simulator's matrix descriptors, like the hardware's, address one
    shared window), SWIZZLE_ALIGN bytes longer so aligned_base finds its start; one per `key` per
    lowering. Callers pass STAGE_SLACK_ELEMS more elements than the tile holds: the layout the H200
    measured (docs/results/gpu_check_2026-12-02_0142); the slack is counted twice, 1 KiB a stage
    that could go once a GPU run confirms the tighter layout."""
    got = L.wgmma_stages.get(key)
    if got is None:
        at = (L.dyn_bytes + SWIZZLE_ALIGN - 1) // SWIZZLE_ALIGN * SWIZZLE_ALIGN
        alloc = N.SharedAlloc(f"wgmma_stage{len(L.wgmma_stages)}",
                              ArrayType(dtype, 1, writable=True, space="shared", shape=(-1,)), align=SWIZZLE_ALIGN,
                              offset=at)
        L.extra_shared.append(alloc)
        L.dyn_bytes = at + elems * dtype.itemsize + SWIZZLE_ALIGN
        got = L.wgmma_stages[key] = N.SharedArray(alloc)
        L.stage_ends[key] = L.dyn_bytes
    return got


def issue_copies(L, op: T.Load, buf: N.Expr, stride: int, base: list[N.Expr], swizzled: N.Expr | None = None) -> None:
    """cp.async of tile `base` (tile indices) of `op`'s array into `buf` with rows of `stride`
    elements: 16-byte chunks, zero-filled past the array's edge (a chunk is wholly in or out, the
    rows being multiples of 8 elements). `swizzled`: instead, the aligned start (gemm_stages.aligned_base)
    of a stage in wgmma's 128-byte swizzle atoms (lower_mma.atom128_offset) of 16-bit elements."""
    rows, cols = op.type.shape
    arr = L.pref(op.param)
    nrows, ncols = L.tmp(N.ArrayLen(arr, 0), "srows"), L.tmp(N.ArrayLen(arr, 1), "scols")
    zero = N.Const(0, INDEX)
    safe = L.tmp(TN.GlobalAddress(arr, [zero, zero]), "ssafe")
    r0 = L.tmp(N.BinOp("mul", N.Cast(base[0], INDEX), N.Const(rows, INDEX), INDEX), "sr0")
    c0 = L.tmp(N.BinOp("mul", N.Cast(base[1], INDEX), N.Const(cols, INDEX), INDEX), "sc0")
    chunks, per_row = rows * cols // 8, cols // 8
    for r in range((chunks + L.T - 1) // L.T):
        q = iadd(r * L.T, L.geo.tid)
        row, ch = ishr(q, log2(per_row)), iand(q, per_row - 1)
        grow = L.tmp(N.BinOp("add", r0, N.Cast(ir32(row), INDEX), INDEX), "sgr")
        gcol = L.tmp(N.BinOp("add", c0, N.Cast(ir32(imul(ch, 8)), INDEX), INDEX), "sgc")
        ok = L.tmp(N.Logical("and", N.Logical("and", N.Compare("ge", grow, zero), N.Compare("lt", grow, nrows)),
                             N.Logical("and", N.Compare("ge", gcol, zero), N.Compare("lt", gcol, ncols))), "sok")
        if swizzled is not None:
            dst = N.BinOp("add", swizzled, N.Cast(ir32(atom128_offset(row, ch, rows, unit=2)), U32), U32)
        else:
            dst = TN.SharedAddress(buf, N.Cast(ir32(iadd(imul(row, stride), imul(ch, 8))), INDEX))
        L.guarded(True if chunks % L.T == 0 or r < chunks // L.T else N.Compare("lt", ir32(q), c32(chunks)),
                  lambda dst=dst, grow=grow, gcol=gcol, ok=ok: cp_async16(L, dst, TN.GlobalAddress(arr, [grow, gcol]),
                                                                         ok, safe))
    L.relied.add(op.param.name)


