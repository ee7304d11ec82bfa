"""What the tensor-core tile.matmul (lower_matmul_tc.py) and the loop pipeline that feeds it
(lower_prefetch.py) both decide: how the warps split a product, and whether and how an operand is
copied by cp.async."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import BF16, F16, INDEX
from dsl.tile import ir as T
from dsl.tile.layout import c32, iadd, iand, imul, ir32, ishr, log2
from dsl.tile.lower_mma import cp_async16
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


def issue_copies(L, op: T.Load, buf: N.Expr, stride: int, base: list[N.Expr]) -> None:
    """cp.async of tile `base` (tile indices) of `op`'s array into `buf` with rows of `stride`
    elements: 16-byte chunks, zero-filled past the array's edge (a chunk is wholly in or out, the
    rows being multiples of 8 elements)."""
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
        dst = TN.SharedAddress(buf, N.Cast(ir32(iadd(imul(row, stride), imul(ch, 8))), INDEX))
        L.guarded(True if chunks % L.T == 0 or r < chunks // L.T else N.Compare("lt", ir32(q), c32(chunks)),
                  lambda dst=dst, grow=grow, gcol=gcol, ok=ok: cp_async16(L, dst, TN.GlobalAddress(arr, [grow, gcol]),
                                                                         ok, safe))
    L.relied.add(op.param.name)


