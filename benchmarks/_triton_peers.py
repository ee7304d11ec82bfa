"""The Triton peers of benchmarks/triton_tutorials.py: Triton's tutorials 01-05 (forward) written as a
Triton user writes them, with the tutorials' techniques and launch heuristics, each a `@triton.jit`
kernel and a small host function taking torch tensors on the current torch stream.

- 01 vector add: one program per BLOCK_SIZE slice, masked loads and stores.
- 02 fused softmax: whole rows (BLOCK_SIZE = next power of two of the row), persistent programs, as
  many as the occupancy allows (registers and shared memory of the compiled kernel), 8 warps,
  `tl.range` software-pipelined over rows.
- 03 matmul: `tl.dot` K loop with an f32 accumulator, grouped tile order (GROUP_SIZE_M 8),
  leaky-ReLU epilogue, f16 store; a handful of the tutorial's Hopper configurations (the benchmark
  times them all, like an autotuner, and the best is the peer).
- 04 low-memory dropout: `tl.rand(seed, offsets)` (Philox) per element, keep above p, scale by 1/(1-p).
- 05 layer norm forward: one program per row, three passes of BLOCK_SIZE columns (mean, variance,
  normalise), BLOCK_SIZE = min(64 KiB / element size, next power of two of N), warps from BLOCK_SIZE.

Importing this module imports triton: the benchmark imports it lazily and reports a missing Triton.
"""
from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages): the tutorial's Hopper-class starting points for f16
MATMUL_CONFIGS = ((128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4),
                  (64, 256, 32, 4, 4))
GROUP_SIZE_M = 8


# ---------------------------------------------------------------------------------------------- 01
@triton.jit
def _add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=inside) + tl.load(y_ptr + offs, mask=inside), mask=inside)


def add(x: Any, y: Any, out: Any, block: int = 1024) -> None:
    n = out.numel()
    _add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK_SIZE=block)


# ---------------------------------------------------------------------------------------------- 02
@triton.jit
def _softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                    STAGES: tl.constexpr):
    cols = tl.arange(0, BLOCK_SIZE)
    inside = cols < n_cols
    for r in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=STAGES):
        v = tl.load(in_ptr + r * in_stride + cols, mask=inside, other=-float("inf"))
        e = tl.exp(v - tl.max(v, axis=0))
        tl.store(out_ptr + r * out_stride + cols, e / tl.sum(e, axis=0), mask=inside)


_SOFTMAX_PROGRAMS: dict = {}     # (row block, warps, stages) -> persistent program count, per process


def softmax_programs(x: Any, out: Any, block: int, warps: int, stages: int) -> int:
    """Persistent programs for the softmax, as the tutorial sizes them: the SMs times the programs an
    SM holds by the compiled kernel's registers and shared memory (n_rows programs, one row each,
    when the compiled kernel cannot be inspected)."""
    import torch
    key = (block, warps, stages)
    if key not in _SOFTMAX_PROGRAMS:
        props = torch.cuda.get_device_properties(x.device)
        try:
            k = _softmax_kernel.warmup(out, x, x.stride(0), out.stride(0), x.shape[0], x.shape[1],
                                       BLOCK_SIZE=block, STAGES=stages, num_stages=stages, num_warps=warps,
                                       grid=(1,))
            k._init_handles()
            per_sm = getattr(props, "regs_per_multiprocessor", 65536) // max(1, k.n_regs * 32 * warps)
            if k.metadata.shared:
                per_sm = min(per_sm, getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
                             // k.metadata.shared)
            _SOFTMAX_PROGRAMS[key] = props.multi_processor_count * max(1, per_sm)
        except Exception:  # noqa: BLE001 - an inspection API that moved: one row a program
            _SOFTMAX_PROGRAMS[key] = 1 << 31
    return min(_SOFTMAX_PROGRAMS[key], x.shape[0])


def softmax(x: Any, out: Any) -> None:
    """out = softmax(x) along rows (2-D, last axis contiguous)."""
    import torch
    block = triton.next_power_of_2(x.shape[1])
    smem_sm = getattr(torch.cuda.get_device_properties(x.device), "shared_memory_per_multiprocessor", 228 * 1024)
    warps, stages = 8, 4 if smem_sm > 200_000 else 2
    programs = softmax_programs(x, out, block, warps, stages)
    _softmax_kernel[(programs,)](out, x, x.stride(0), out.stride(0), x.shape[0], x.shape[1], BLOCK_SIZE=block,
                                 STAGES=stages, num_stages=stages, num_warps=warps)


# ---------------------------------------------------------------------------------------------- 03
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   LEAKY_RELU: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n                 # programs of one group of GROUP_M tile rows
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M     # wrapped rows: loads need no row mask
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * s_am + rk[None, :] * s_ak
    b_ptrs = b_ptr + rk[:, None] * s_bk + rn[None, :] * s_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=rk[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk
    if LEAKY_RELU:
        acc = tl.where(acc >= 0, acc, 0.01 * acc)
    c = acc.to(tl.float16)
    cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(c_ptr + cm[:, None] * s_cm + cn[None, :] * s_cn, c, mask=(cm[:, None] < M) & (cn[None, :] < N))


def matmul(a: Any, b: Any, c: Any, config: tuple[int, int, int, int, int], leaky_relu: bool = True) -> None:
    """c (f16) = leaky_relu(a @ b) with f32 accumulation, for one of MATMUL_CONFIGS."""
    bm, bn, bk, warps, stages = config
    (m, k), n = a.shape, b.shape[1]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    _matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                         c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_SIZE_M,
                         LEAKY_RELU=leaky_relu, num_warps=warps, num_stages=stages)


# ---------------------------------------------------------------------------------------------- 04
@triton.jit
def _seeded_dropout_kernel(x_ptr, out_ptr, n, p, seed, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    inside = offs < n
    x = tl.load(x_ptr + offs, mask=inside)
    keep = tl.rand(seed, offs) > p
    tl.store(out_ptr + offs, tl.where(keep, x / (1 - p), 0.0), mask=inside)


def seeded_dropout(x: Any, out: Any, p: float, seed: int, block: int = 1024) -> None:
    n = out.numel()
    _seeded_dropout_kernel[(triton.cdiv(n, block),)](x, out, n, p, seed, BLOCK_SIZE=block)


# ---------------------------------------------------------------------------------------------- 05
@triton.jit
def _layer_norm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, stride, N, eps,
                           BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    x_row, y_row = x_ptr + row * stride, y_ptr + row * stride
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        acc += tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        v = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        d = tl.where(cols < N, v - mean, 0.0)
        acc += d * d
    rstd = 1 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)
    for start in range(0, N, BLOCK_SIZE):
        cols = start + tl.arange(0, BLOCK_SIZE)
        inside = cols < N
        w = tl.load(w_ptr + cols, mask=inside)
        b = tl.load(b_ptr + cols, mask=inside)
        v = tl.load(x_row + cols, mask=inside, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (v - mean) * rstd * w + b, mask=inside)


def layer_norm_fwd(x: Any, y: Any, w: Any, b: Any, mean: Any, rstd: Any, eps: float = 1e-5) -> None:
    """y, mean, rstd of the (M, N) x; mean and rstd are f32 (M,)."""
    m, n = x.shape
    block = min(65536 // x.element_size(), triton.next_power_of_2(n))
    if n > block:
        raise ValueError(f"x: rows of {n} columns are longer than the tutorial's largest block ({block})")
    warps = min(max(block // 256, 1), 8)
    _layer_norm_fwd_kernel[(m,)](x, y, w, b, mean, rstd, x.stride(0), n, eps, BLOCK_SIZE=block, num_warps=warps)
