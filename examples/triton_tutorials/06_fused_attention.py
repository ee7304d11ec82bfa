"""Triton tutorial 06, fused attention forward, as a dsl.tile kernel written the way the tutorial writes
it: Q, K and V flattened into (Z*H*N_CTX, HEAD_DIM) row stacks, one block per BLOCK_M query rows of one
(batch, head), per-head offsets computed from the block number, the loads named before their products
(`k = tile.load(...)`, `qk = tile.matmul(q, tile.transpose(k))`), scores in base 2 (`qk_scale = sm_scale
* log2 e`, exp2), for causal attention the two stages of the tutorial (the key blocks left of the
diagonal without a mask, then the diagonal block with one), and O written in the inputs' dtype (f16)
as the tutorial writes it. Checked against NumPy float64.

    python examples/triton_tutorials/06_fused_attention.py              # GPU when present, else the simulator
    python examples/triton_tutorials/06_fused_attention.py --simulate

The named loads go back into their products before lowering (dsl/tile/forward.py), so the products run
where examples/flash_attention.py's do (wgmma on sm_90, mma.sync on sm_80); if a change of style ever
takes one off the tensor cores, `python -m dsl compile --explain` names the line and the reason.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import TypeVar, f32, tile

E = TypeVar("E")
LOG2E = 1.4426950408889634


@tile.func
def attn_inner(acc, l_i, m_i, q, k, v, kv_row0, lo, hi, qk_scale, BLOCK_N, MASKED, offs_m):
    """One stage of the tutorial's `_attn_fwd_inner`: key blocks lo..hi of this head, online softmax."""
    for start_n in range(lo, hi):
        k_blk = tile.load(k, (kv_row0 + start_n, 0), (BLOCK_N, q.shape[1]))
        qk = tile.matmul(q, tile.transpose(k_blk))
        if MASKED:
            offs_n = start_n * BLOCK_N + tile.arange(BLOCK_N)[None, :]
            qk = qk * qk_scale + tile.where(offs_m[:, None] >= offs_n, 0.0, -1.0e6)
            m_ij = tile.maximum(m_i, tile.max(qk, axis=1))
            qk = qk - m_ij[:, None]
        else:
            m_ij = tile.maximum(m_i, tile.max(qk, axis=1) * qk_scale)
            qk = qk * qk_scale - m_ij[:, None]
        p = tile.exp2(qk)
        alpha = tile.exp2(m_i - m_ij)
        l_i = l_i * alpha + tile.sum(p, axis=1)
        v_blk = tile.load(v, (kv_row0 + start_n, 0), (BLOCK_N, q.shape[1]))
        acc = acc * alpha[:, None] + tile.matmul(p.astype(v.dtype), v_blk)
        m_i = m_ij
    return acc, l_i, m_i


@tile.kernel
def attn_fwd(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], o: tile.Partition[E, 2],
             sm_scale: f32, N_CTX: tile.Constant[int], BLOCK_N: tile.Constant[int], CAUSAL: tile.Constant[bool]):
    BLOCK_M, HEAD_DIM = o.tile_shape
    pid = tile.bid(0)
    start_m = pid % (N_CTX // BLOCK_M)                 # query block within its head
    off_hz = pid // (N_CTX // BLOCK_M)                 # which (batch, head)
    kv_row0 = off_hz * (N_CTX // BLOCK_N)              # the head's first key block, in key-block units
    offs_m = start_m * BLOCK_M + tile.arange(BLOCK_M)
    m_i = tile.full((BLOCK_M,), -tile.inf, f32)
    l_i = tile.zeros((BLOCK_M,), f32)
    acc = tile.zeros((BLOCK_M, HEAD_DIM), f32)
    qk_scale = sm_scale * LOG2E
    q_blk = tile.load(q, (pid, 0), (BLOCK_M, HEAD_DIM))
    if CAUSAL:
        diag = start_m * BLOCK_M // BLOCK_N            # stage 1: the blocks left of the diagonal
        acc, l_i, m_i = attn_inner(acc, l_i, m_i, q_blk, k, v, kv_row0, 0, diag, qk_scale, BLOCK_N, False, offs_m)
        stop = (start_m + 1) * BLOCK_M // BLOCK_N      # stage 2: the diagonal, masked
        acc, l_i, m_i = attn_inner(acc, l_i, m_i, q_blk, k, v, kv_row0, diag, stop, qk_scale, BLOCK_N, True, offs_m)
    else:
        acc, l_i, m_i = attn_inner(acc, l_i, m_i, q_blk, k, v, kv_row0, 0, N_CTX // BLOCK_N, qk_scale, BLOCK_N,
                                   False, offs_m)
    o.store((acc / l_i[:, None]).astype(o.dtype))     # O in the inputs' dtype, as the tutorial writes it


def launch_args(q: Any, k: Any, v: Any, out: Any, n_ctx: int, causal: bool, block_m: int = 64,
                block_n: int = 64) -> tuple:
    """attn_fwd's arguments for (Z*H*N_CTX, HEAD_DIM) row stacks and an output of that shape and of
    the inputs' dtype."""
    rows, d = q.shape
    if n_ctx <= 0 or rows % n_ctx or n_ctx % block_m or n_ctx % block_n or block_m % block_n:
        raise ValueError(f"q: {rows} rows of sequences of {n_ctx}: expected whole sequences, N_CTX a multiple "
                         f"of BLOCK_M={block_m} and BLOCK_N={block_n}, BLOCK_M a multiple of BLOCK_N")
    for name, x in (("k", k), ("v", v), ("out", out)):
        if tuple(x.shape) != (rows, d):
            raise ValueError(f"{name}: expected shape {(rows, d)} like q, got {tuple(x.shape)}")
    return q, k, v, tile.partition(out, (block_m, d)), float(d ** -0.5), n_ctx, block_n, bool(causal)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_ctx: int, causal: bool) -> np.ndarray:
    d = q.shape[1]
    q3, k3, v3 = (x.astype(np.float64).reshape(-1, n_ctx, d) for x in (q, k, v))
    s = q3 @ k3.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((n_ctx, n_ctx), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return ((p / p.sum(-1, keepdims=True)) @ v3).reshape(-1, d)


def run(simulate: bool) -> None:
    import bridge
    rng = np.random.default_rng(0)
    n_ctx, heads = (128, 2) if simulate else (1024, 8)
    for d in (64, 128):
        q, k, v = (rng.standard_normal((heads * n_ctx, d)).astype(np.float16) for _ in range(3))
        for causal in (False, True):
            out = np.full((heads * n_ctx, d), np.nan, np.float16)
            args = launch_args(q, k, v, out, n_ctx, causal)
            if simulate:
                attn_fwd.simulate(*args)
                got = out
            else:
                import cupy as cp
                dq, dk, dv, dout = (cp.asarray(x) for x in (q, k, v, out))
                attn_fwd(*launch_args(dq, dk, dv, dout, n_ctx, causal))
                bridge.synchronize()
                got = cp.asnumpy(dout)
            err = float(np.abs(got.astype(np.float64) - reference(q, k, v, n_ctx, causal)).max())
            print(f"{'simulator' if simulate else 'GPU'} N_CTX {n_ctx} D{d} causal={causal}: "
                  f"max |ours - NumPy| = {err:.2e}")
            assert err < 2e-2, err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    on_gpu = bridge.gpu_available() and not args.simulate
    run(simulate=not on_gpu)
    print("ran on the GPU" if on_gpu else "ran on the CPU simulator" +
          ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
