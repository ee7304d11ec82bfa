"""Lowering of tile.matmul / tile.mma (portable path): both operands are staged in shared memory and
each thread accumulates its own output elements in f32 with FMA over K.

Correct on every architecture and for any layout; GEMM loops over aligned, C-contiguous operands take
the tensor-core path instead (matmul/mma_sync.py). f32 inputs are multiplied in full f32 here (the simulator
rounds them to tf32 first, so results agree to tf32 accuracy).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import F32, I32
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, c32, iadd, imul, ir32


def _record_fma(L, e: T.Matmul, m: int, n: int, k: int) -> None:
    """Say why this product is not on the tensor cores (dsl/perf.py, kind "fma-product")."""
    from dsl.ir.types import BF16, F16
    from dsl.perf import SlowPath
    a, b = e.a.type.dtype, e.b.type.dtype
    if not L.tc_matmul:
        why = "the tensor-core lowering is switched off (KB_TILE_TC_MATMUL=0)"
    elif L.cc < 80:
        why = f"the target sm_{L.cc} has no mma.sync (the tensor-core products need sm_80 or newer)"
    elif a != b or a not in (F16, BF16):
        why = (f"its operands are {a} and {b}: a product outside a GEMM loop runs on the tensor cores for two "
               "f16 or two bf16 operands (cast them with .astype(f16))")
    else:
        why = (f"its {m}x{n}x{k} shape does not split into 16x8x16 fragments over the block's "
               f"{L.T // 32} warps (M a multiple of 16, N of 8, K of 16)")
    L.slow_paths.append(SlowPath("fma-product", f"tile.matmul runs on the portable FMA path: {why}",
                                 e.loc.line, e.loc.file))


def lower_matmul(L, e: T.Matmul) -> LV:
    from dsl.tile.lower.matmul.products import lower_matmul_tc
    from dsl.tile.lower.matmul.operands import tc_warps
    (m, k), (_, n) = e.a.type.shape, e.b.type.shape
    warps = tc_warps(L, m, n, k, e.a.type.dtype, e.b.type.dtype)
    if warps is not None:          # tensor-core path (dsl/tile/lower/matmul/products.py)
        return lower_matmul_tc(L, e, *warps)
    _record_fma(L, e, m, n, k)
    a = L.concrete(L.expr(e.a))
    b = L.concrete(L.expr(e.b))
    acc = L.to_layout(L.expr(e.acc), "D") if e.acc is not None else None
    sa = L.write_scratch(a, slot=1)
    sb = L.write_scratch(b, slot=2)
    out = []
    for r in range(L.geo.per_thread(m * n)):
        row, col = L.geo.coords((m, n), r)
        arow = L.tmp(ir32(imul(row, k)), "arow")
        bcol = L.tmp(ir32(col), "bcol")
        v = L.new_var(F32, "macc")
        L.emit(N.Assign(v, acc.elems[r] if acc is not None else N.Const(0.0, F32)))
        j = L.new_var(I32, "kk")

        def body():
            x = L.smem_load(sa, iadd(arow, N.ReadVar(j)), a.dtype)
            y = L.smem_load(sb, iadd(imul(N.ReadVar(j), n), bcol), b.dtype)
            x = N.Cast(x, F32) if a.dtype != F32 else x
            y = N.Cast(y, F32) if b.dtype != F32 else y
            L.emit(N.Assign(v, N.Math("fma", [x, y, N.ReadVar(v)], F32)))
        L.emit(N.ForRange(j, c32(0), c32(k), c32(1), L.block_of(body)))
        out.append(N.ReadVar(v))
    L.sync()
    return LV("D", (m, n), F32, out)
