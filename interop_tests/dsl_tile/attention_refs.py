"""Float64 attention references written for the tests, head by head (not the examples' own `reference`)."""
from __future__ import annotations

import numpy as np


def gqa64(q, k, v, dout, seq, causal, group):
    """Float64 O and (dq, dk, dv) with query head h (rows of every (batch, head) stacked) reading key/value
    head h // group, looped head by head; dk and dv collect every query head of their group."""
    d = q.shape[1]
    q3, k3, v3, do3 = (x.astype(np.float64).reshape(-1, seq, d) for x in (q, k, v, dout))
    o, dq = np.zeros_like(q3), np.zeros_like(q3)
    dk, dv = np.zeros_like(k3), np.zeros_like(v3)
    for h in range(q3.shape[0]):
        kv = h // group
        s = q3[h] @ k3[kv].T / np.sqrt(d)
        if causal:
            s[np.triu_indices(seq, 1)] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        o[h] = p @ v3[kv]
        dp = do3[h] @ v3[kv].T
        ds = p * (dp - (dp * p).sum(axis=1, keepdims=True))
        dq[h] = ds @ k3[kv] / np.sqrt(d)
        dk[kv] += ds.T @ q3[h] / np.sqrt(d)
        dv[kv] += p.T @ do3[h]
    return o.reshape(-1, d), tuple(x.reshape(-1, d) for x in (dq, dk, dv))


def attention64(q, k, v, seq, causal):
    """Float64 softmax(q k^T / sqrt(d)) v per sequence (rows of every head stacked), -inf above the
    diagonal when causal."""
    d = q.shape[1]
    out = np.empty(q.shape, np.float64)
    for h in range(q.shape[0] // seq):
        rows = slice(h * seq, (h + 1) * seq)
        s = q[rows].astype(np.float64) @ k[rows].astype(np.float64).T / np.sqrt(d)
        if causal:
            s[np.triu_indices(seq, 1)] = -np.inf
        w = np.exp(s - s.max(axis=1, keepdims=True))
        out[rows] = (w / w.sum(axis=1, keepdims=True)) @ v[rows].astype(np.float64)
    return out


def assert_matches_sdpa_autograd(q, k, v, dout, o, grads, causal, bound=1e-2):
    """O and (dq, dk, dv) of our kernels against torch autograd of scaled_dot_product_attention in
    float64 on the same (rounded) inputs, each error relative to the largest value (GPU tests; k and v
    may have fewer heads: enable_gqa)."""
    import torch.nn.functional as F
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    ref.backward(dout.double())
    assert ((o.reshape(ref.shape).double() - ref).abs().max() / ref.abs().max()).item() < bound
    for name, got, x in zip(("dq", "dk", "dv"), grads, x64):
        err = ((got.reshape(x.shape).double() - x.grad).abs().max() / x.grad.abs().max()).item()
        assert err < bound, (name, err)


def varlen64(q, k, v, dout, cu, heads, kv_heads, causal):
    """Float64 [o, dq, dk, dv] of packed (total, H*D) q and dout and (total, H_kv*D) k and v, sequence b in
    rows cu[b]:cu[b+1]: each sequence as a (heads, L, d) row stack for gqa64."""
    d = q.shape[1] // heads
    outs = [np.zeros(x.shape) for x in (q, q, k, v)]
    for a, e in zip(cu[:-1], cu[1:]):
        n = int(e - a)
        if n == 0:
            continue
        stack = [np.asarray(x[a:e], np.float64).reshape(n, -1, d).transpose(1, 0, 2).reshape(-1, d)
                 for x in (q, k, v, dout)]
        o, grads = gqa64(*stack, n, causal, heads // kv_heads)
        for out, x in zip(outs, (o, *grads)):
            out[a:e] = x.reshape(-1, n, d).transpose(1, 0, 2).reshape(n, -1)
    return outs


def gpu_error_against_sdpa(fa, kern, d: int, causal: bool, seed: int, out_dtype: str = "float32",
                           tiles: tuple[int, int] = (128, 128), batch: int = 4, heads: int = 8, seq: int = 1024) -> float:
    """Run forward kernel `kern` (examples/flash_attention.py's `fa`.launch_args on `tiles`) on random bf16
    (batch, heads, seq, d) inputs on the GPU, the output poisoned first; max |out - SDPA in float64|.
    The defaults: 256 tiles of 128 rows, more than a persistent grid's blocks (one an SM)."""
    import torch
    import torch.nn.functional as F
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda", dtype=getattr(torch, out_dtype))
    kern(*fa.launch_args(*(x.reshape(-1, d) for x in (q, k, v)), out, seq, causal, tiles=tiles))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    return (out.reshape(ref.shape).double() - ref).abs().max().item()
