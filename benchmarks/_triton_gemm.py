"""The plain Triton GEMM peer of benchmarks/gemm.py: what a Triton user writes in twenty lines (a
`tl.dot` loop over K with masked loads, grouped tile order, f32 accumulation and output), run with a
handful of common configurations; the best one is the peer. No hand tuning beyond that."""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# (BM, BN, BK, warps, stages): the usual Hopper starting points
CONFIGS = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
           (128, 128, 32, 4, 4))
GROUP_M = 8


@triton.jit
def _gemm(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    in_group = GROUP * tiles_n                 # tiles of one group of GROUP tile rows
    first_m = (pid // in_group) * GROUP
    rows_here = min(tiles_m - first_m, GROUP)
    pm = first_m + (pid % in_group) % rows_here
    pn = (pid % in_group) // rows_here
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    pa = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    pb = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BK)):
        left = K - kt * BK
        x = tl.load(pa, mask=(rm[:, None] < M) & (rk[None, :] < left), other=0.0)
        y = tl.load(pb, mask=(rk[:, None] < left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(x, y, acc)
        pa += BK * s_ak
        pb += BK * s_bk
    pc = c_ptr + rm[:, None] * s_cm + rn[None, :] * s_cn
    tl.store(pc, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm(a: Any, b: Any, c: Any, config: tuple[int, int, int, int, int]) -> Any:
    """c (f32) = a @ b for torch tensors on the current torch stream; returns the compiled kernel."""
    bm, bn, bk, warps, stages = config
    m, k = a.shape
    n = b.shape[1]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    return _gemm[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                BM=bm, BN=bn, BK=bk, GROUP=GROUP_M, num_warps=warps, num_stages=stages)
