"""The grouped-query case of benchmarks/attention.py (`--gqa`): B4 H16 with H_kv = H/8 = 2 key/value heads,
S4096 D128 bf16, causal and not, forward (examples/flash_attention.py's flash_fwd with `group`) and
backward (examples/flash_attention_bwd.py) against torch SDPA with enable_gqa=True under its flash and
cuDNN backends (a backend that refuses GQA is listed as not run). Each result is checked against SDPA
before timing; interleaved rounds, medians. TFLOP/s count the query heads' work: 4*B*H*S^2*D (halved
when causal), the backward 2.5x that. Report rows only: the issue asks for the GQA figures, its bars
are on the H_kv = H shapes.
"""
from __future__ import annotations

from typing import Any

from _attention_bwd import MAX_REL_ERR, load_backward, ours, rel_err, sdpa_forward_peers, sdpa_peers
from _bench_kit import time_interleaved

GQA_SHAPES = [(4, 16, 2, 4096, 128)]          # (B, H, H_kv, S, D)


def _forward(rep: Any, torch, fa, q, k, v, name: str, causal: bool, reps: int) -> list[str]:
    b, h, s, d = q.shape
    group = h // k.shape[1]
    peers, want = sdpa_forward_peers(rep, name, q, k, v, causal)
    if not peers:
        return []
    out = torch.full((b * h * s, d), float("nan"), device="cuda")
    args = fa.launch_args(*(x.reshape(-1, d) for x in (q, k, v)), out, s, causal, group=group)
    fa.flash_fwd(*args)
    err = ((out.reshape(q.shape) - want.float()).abs().max() / want.float().abs().max()).item()
    if not err < MAX_REL_ERR:
        return [f"{name}: DSL tile flash_fwd: max |ours - SDPA| / max |SDPA| = {err:.3g}"]
    ms = time_interleaved({"ours": lambda i: fa.flash_fwd(*args), **peers}, reps=reps)
    flops = 4 * b * h * s * s * d / (2 if causal else 1)
    tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
    rep.row(f"{name}: DSL tile flash_fwd", tf["ours"], "TFLOP/s", ms=round(ms["ours"], 3),
            **{f"vs_{p.replace(' ', '_').lower()}": round(tf["ours"] / tf[p], 3) for p in peers})
    for p in peers:
        rep.row(f"{name}: torch {p.replace('sdpa', 'SDPA')}", tf[p], "TFLOP/s", ms=round(ms[p], 3))
    return []


def _backward(rep: Any, torch, bwd, q, k, v, dout, name: str, causal: bool, reps: int) -> list[str]:
    b, h, s, d = q.shape
    peers = sdpa_peers(rep, torch, name, q, k, v, dout, causal)
    if not peers:
        return []
    fn, got = ours(torch, bwd, q, k, v, dout, s, causal)
    fn(0)
    err = rel_err(got, (peers.get("flash") or peers["cuDNN"])[1])
    if not err < MAX_REL_ERR:
        return [f"{name}: DSL tile flash_bwd: max |ours - SDPA| / max |SDPA| = {err:.3g}"]
    ms = time_interleaved({"ours": fn, **{f"sdpa {p}": f for p, (f, _) in peers.items()}}, reps=reps)
    flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
    tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
    rep.row(f"{name}: DSL tile flash_bwd", tf["ours"], "TFLOP/s", ms=round(ms["ours"], 3),
            **{f"vs_sdpa_{p.lower()}": round(tf["ours"] / tf[f"sdpa {p}"], 3) for p in peers})
    for p in peers:
        rep.row(f"{name}: torch SDPA ({p})", tf[f"sdpa {p}"], "TFLOP/s", ms=round(ms[f"sdpa {p}"], 3))
    return []


def gqa_cases(rep: Any, torch, fa, reps: int) -> list[str]:
    """Forward and backward rows at GQA_SHAPES into `rep`; returns the wrong results."""
    bwd = load_backward()
    failed: list[str] = []
    for b, h, hk, s, d in GQA_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(s + d + hk)
        q, k, v, dout = (torch.randn(b, n, s, d, device="cuda", dtype=torch.bfloat16, generator=g)
                         for n in (h, hk, hk, h))
        for causal in (False, True):
            shape = f"B{b} H{h} H_kv{hk} S{s} D{d} {'causal' if causal else 'full'}"
            failed += _forward(rep, torch, fa, q, k, v, f"GQA {shape}", causal, reps)
            failed += _backward(rep, torch, bwd, q, k, v, dout, f"GQA backward {shape}", causal, reps)
    return failed
