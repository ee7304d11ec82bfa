"""The Triton peers of benchmarks/triton_tutorials.py: Triton's tutorials 01-06 written as a
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
- 05 layer norm backward: the dx kernel (one program per row, the whole row; dx from c1 and c2) adds
  the row's dw and db into partial row `row % GROUP_SIZE_M` of buffers of x's dtype under a spin lock
  per partial row (a count per row tells the first writer to store instead of add), then the dwdb
  kernel sums the partial rows by columns (BLOCK_SIZE_M 32, BLOCK_SIZE_N 128); GROUP_SIZE_M by N and
  the warps of the forward, as the tutorial picks them.
- 06 fused attention forward: `_attn_fwd` (one program per BLOCK_M query rows of one (batch, head))
  and `_attn_fwd_inner` (the online softmax over key blocks, base 2), causal in two stages (the
  blocks left of the diagonal unmasked, then the diagonal masked), O stored in the inputs' dtype and
  the rows' log-sum-exp beside it (for a backward); Q/K/V/O read and written through host TMA tensor
  descriptors as the tutorial does on Hopper (or plain pointers: the fallback row); a few of the
  tutorial's Hopper configurations (ATTN_CONFIGS: the benchmark times each, like an autotuner).

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



@triton.jit
def _layer_norm_bwd_dx_fused_kernel(dx_ptr, dy_ptr, dw_part_ptr, db_part_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr,
                                    lock_ptr, stride, N, GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    inside = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * stride + cols, mask=inside, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    mu = tl.load(mean_ptr + row)
    rs = tl.load(rstd_ptr + row)
    xhat = tl.where(inside, (x - mu) * rs, 0.0)
    wdy = tl.where(inside, w * dy, 0.0)
    c1 = tl.sum(xhat * wdy, axis=0) / N
    c2 = tl.sum(wdy, axis=0) / N
    tl.store(dx_ptr + row * stride + cols, (wdy - (xhat * c1 + c2)) * rs, mask=inside)
    # this row's dw and db into partial row `slot`, one row at a time under the slot's lock
    slot = row % GROUP_SIZE_M
    lock = lock_ptr + slot
    written = lock_ptr + GROUP_SIZE_M + slot        # 0 until a first row has stored into the slot
    dw_ptrs = dw_part_ptr + slot * N + cols
    db_ptrs = db_part_ptr + slot * N + cols
    part_dw = dy * xhat
    part_db = dy
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    if tl.load(written) == 0:
        tl.atomic_xchg(written, 1)
    else:
        part_dw += tl.load(dw_ptrs, mask=inside, other=0.0).to(tl.float32)
        part_db += tl.load(db_ptrs, mask=inside, other=0.0).to(tl.float32)
    tl.store(dw_ptrs, part_dw, mask=inside)
    tl.store(db_ptrs, part_db, mask=inside)
    tl.debug_barrier()                              # every thread's stores before the release
    tl.atomic_xchg(lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb_kernel(dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, M, N, BLOCK_SIZE_M: tl.constexpr,
                                BLOCK_SIZE_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    sum_dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    sum_db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_SIZE_M):
        rows = start + tl.arange(0, BLOCK_SIZE_M)
        inside = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        sum_dw += tl.load(dw_part_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        sum_db += tl.load(db_part_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    tl.store(dw_ptr + cols, tl.sum(sum_dw, axis=0), mask=cols < N)
    tl.store(db_ptr + cols, tl.sum(sum_db, axis=0), mask=cols < N)


LN_BWD_BLOCK_M, LN_BWD_BLOCK_N = 32, 128


def layer_norm_group_size(n: int) -> int:
    """GROUP_SIZE_M, the partial rows of dw and db, by the row length N, as the tutorial picks it."""
    return 256 if n <= 1024 else 128 if n <= 4096 else 96 if n <= 8192 else 64


def layer_norm_bwd(dy: Any, x: Any, w: Any, mean: Any, rstd: Any, dx: Any, dw: Any, db: Any) -> None:
    """dx (M, N), dw and db (N,) of the layer norm of x for the upstream gradient dy, from the
    forward's f32 mean and rstd; the buffers allocated per call, as the tutorial's backward does."""
    import torch
    m, n = x.shape
    block = min(65536 // x.element_size(), triton.next_power_of_2(n))
    if n > block:
        raise ValueError(f"x: rows of {n} columns are longer than the tutorial's largest block ({block})")
    warps = min(max(block // 256, 1), 8)                  # the forward's, as the tutorial reuses them
    group = layer_norm_group_size(n)
    locks = torch.zeros(2 * group, dtype=torch.int32, device=x.device)
    dw_part = torch.empty((group, n), dtype=x.dtype, device=x.device)
    db_part = torch.empty((group, n), dtype=x.dtype, device=x.device)
    _layer_norm_bwd_dx_fused_kernel[(m,)](dx, dy, dw_part, db_part, x, w, mean, rstd, locks, x.stride(0), n,
                                          GROUP_SIZE_M=group, BLOCK_SIZE_N=block, num_warps=warps)
    _layer_norm_bwd_dwdb_kernel[(triton.cdiv(n, LN_BWD_BLOCK_N),)](dw_part, db_part, dw, db, min(group, m), n,
                                                                   BLOCK_SIZE_M=LN_BWD_BLOCK_M,
                                                                   BLOCK_SIZE_N=LN_BWD_BLOCK_N)


# ---------------------------------------------------------------------------------------------- 06
# (BLOCK_M, BLOCK_N, warps, stages): the tutorial's Hopper candidates for f16 at HEAD_DIM 64 / 128 (its
# pruning drops 8 warps on tiles smaller than 128 x 128 on sm_90)
ATTN_CONFIGS = ((128, 64, 4, 3), (128, 64, 4, 4), (128, 128, 8, 3), (128, 128, 8, 4))


@triton.jit
def _attn_rows(src, row, ROWS: tl.constexpr, HEAD_DIM: tl.constexpr, USE_DESC: tl.constexpr):
    """Rows row .. row + ROWS of a (Z*H*N_CTX, HEAD_DIM) stack: a TMA descriptor or a pointer."""
    if USE_DESC:
        block = src.load([row, 0])
    else:
        offs = (row + tl.arange(0, ROWS))[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
        block = tl.load(src + offs)
    return block


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, start_m, qk_scale, offs_m, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, STAGE: tl.constexpr, N_CTX: tl.constexpr,
                    USE_DESC: tl.constexpr):
    if STAGE == 1:              # causal: the key blocks left of the diagonal, no mask
        lo, hi = 0, start_m * BLOCK_M
    elif STAGE == 2:            # causal: the key blocks on the diagonal, masked
        lo, hi = start_m * BLOCK_M, (start_m + 1) * BLOCK_M
        lo = tl.multiple_of(lo, BLOCK_M)
    else:                       # not causal: every key block
        lo, hi = 0, N_CTX
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in tl.range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        k = _attn_rows(k_src, row0 + start_n, BLOCK_N, HEAD_DIM, USE_DESC)
        qk = tl.dot(q, tl.trans(k))
        if STAGE == 2:
            visible = offs_m[:, None] >= (start_n + offs_n[None, :])
            qk = qk * qk_scale + tl.where(visible, 0, -1.0e6)
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            qk -= m_ij[:, None]
        else:
            m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tl.math.exp2(qk)
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = _attn_rows(v_src, row0 + start_n, BLOCK_N, HEAD_DIM, USE_DESC)
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit
def _attn_fwd(sm_scale, lse_ptr, q_src, k_src, v_src, o_src, N_CTX: tl.constexpr, HEAD_DIM: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STAGE: tl.constexpr, USE_DESC: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    row0 = off_hz * N_CTX                           # the (batch, head)'s first row in the stacks
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504                # scores in base 2: exp2
    q = _attn_rows(q_src, row0 + start_m * BLOCK_M, BLOCK_M, HEAD_DIM, USE_DESC)
    if STAGE & 1:               # STAGE 1 (not causal): every block; STAGE 3 (causal): left of the diagonal
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, start_m, qk_scale, offs_m,
                                        BLOCK_M, BLOCK_N, HEAD_DIM, 4 - STAGE, N_CTX, USE_DESC)
    if STAGE & 2:               # causal: the diagonal
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, k_src, v_src, row0, start_m, qk_scale, offs_m,
                                        BLOCK_M, BLOCK_N, HEAD_DIM, 2, N_CTX, USE_DESC)
    tl.store(lse_ptr + off_hz * N_CTX + offs_m, m_i + tl.math.log2(l_i))
    o = (acc / l_i[:, None]).to(q.dtype)
    if USE_DESC:
        o_src.store([row0 + start_m * BLOCK_M, 0], o)
    else:
        offs = (row0 + offs_m)[:, None] * HEAD_DIM + tl.arange(0, HEAD_DIM)[None, :]
        tl.store(o_src + offs, o)


def attn_fwd(q: Any, k: Any, v: Any, o: Any, causal: bool, sm_scale: float, config: tuple[int, int, int, int],
             descriptors: bool = True) -> None:
    """o = softmax(q k^T * sm_scale) v of contiguous (Z, H, N_CTX, HEAD_DIM) tensors, causal or not,
    for one of ATTN_CONFIGS; Q/K/V/O through host TMA descriptors (`descriptors`) or pointers."""
    import torch
    bm, bn, warps, stages = config
    z, h, n_ctx, d = q.shape
    if n_ctx % bm or n_ctx % bn:
        raise ValueError(f"q: N_CTX {n_ctx} is not a multiple of BLOCK_M {bm} and BLOCK_N {bn}")
    lse = torch.empty((z * h, n_ctx), dtype=torch.float32, device=q.device)
    srcs = [q, k, v, o]
    if descriptors:
        from triton.tools.tensor_descriptor import TensorDescriptor
        srcs = [TensorDescriptor(t, shape=[z * h * n_ctx, d], strides=[d, 1], block_shape=[rows, d])
                for t, rows in zip(srcs, (bm, bn, bn, bm))]
    _attn_fwd[(n_ctx // bm, z * h)](sm_scale, lse, *srcs, N_CTX=n_ctx, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn,
                                    STAGE=3 if causal else 1, USE_DESC=descriptors, num_warps=warps,
                                    num_stages=stages)
