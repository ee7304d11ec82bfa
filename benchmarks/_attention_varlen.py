"""The variable-length case of benchmarks/attention.py (`--varlen`): examples/flash_attention_varlen.py on
16 packed sequences of ragged lengths (seeded, 256..4096 rows, H16 D128 bf16), causal and not, forward
(sequence_bounds + flash_fwd_varlen: its default cp.async loop, with the TMA ring + fp_fusion + ftz,
and the edge-masked kernel flash_fwd_varlen_lse_edges in both) and backward (preprocess + dK/dV + dQ, and the fused
backward in its two forms, given the forward's O and
log-sum-exp), against torch's own varlen paths on the same packed tensors: `torch.nn.attention.varlen.
varlen_attn` (FlashAttention's varlen kernels, causal as window (-1, 0)) and SDPA over jagged nested
tensors under its flash and cuDNN backends (no causal there); a peer that refuses is listed as not run. Each result
is checked against SDPA run one sequence at a time before timing; interleaved rounds, medians. TFLOP/s
count the sequences' own work: 4*H*D*sum(L^2) (halved when causal), the backward 2.5x that. Report rows
only (issue 29 asks for the varlen figures; its bars are on the fixed-length shapes).
"""
from __future__ import annotations

import importlib.util
from typing import Any

from _bench_kit import ROOT, time_interleaved

VARLEN_HEADS, VARLEN_D, VARLEN_SEQS = 16, 128, 16
MAX_REL_ERR = 2e-2
RING = {"loop_pipeline": "tma", "fp_fusion": True, "ftz": True}


def load_varlen():
    spec = importlib.util.spec_from_file_location("flash_attention_varlen", ROOT / "examples" / "flash_attention_varlen.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _lengths() -> list[int]:
    import numpy as np
    return [int(x) for x in np.random.default_rng(29).integers(256, 4097, VARLEN_SEQS)]


def _per_sequence(torch, q, k, v, dout, cu: list[int], causal: bool) -> tuple:
    """(o, dq, dk, dv) of SDPA one sequence at a time, autograd in f32: the check, not a peer."""
    import torch.nn.functional as F
    h, d = VARLEN_HEADS, VARLEN_D
    outs = [torch.empty(x.shape, device="cuda") for x in (q, q, k, v)]
    for a, e in zip(cu[:-1], cu[1:]):
        leaves = [x[a:e].float().reshape(e - a, h, d).transpose(0, 1).requires_grad_() for x in (q, k, v)]
        o = F.scaled_dot_product_attention(*leaves, is_causal=causal)
        grads = torch.autograd.grad(o, leaves, dout[a:e].float().reshape(e - a, h, d).transpose(0, 1))
        for out, x in zip(outs, (o.detach(), *grads)):
            out[a:e] = x.transpose(0, 1).reshape(e - a, -1)
    return tuple(outs)


def _torch_peers(rep: Any, torch, name: str, q, k, v, dout, cu, max_len: int, causal: bool) -> tuple[dict, dict]:
    """({label: fn(i)} forward, {label: fn(i)} backward) of torch's varlen_attn and of SDPA over jagged
    nested tensors under each backend that takes them; a backward is autograd.grad of a forward recorded
    once (retain_graph), so it holds no forward work. Peers that refuse are "not run" rows."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    h, d = VARLEN_HEADS, VARLEN_D
    offsets = cu.long()

    def nested(xs):
        return [torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2) for x in xs]

    def varlen_attn(leaves):
        from torch.nn.attention.varlen import varlen_attn
        return varlen_attn(*leaves, cu, cu, max_len, max_len, window_size=(-1, 0) if causal else (-1, -1))

    def sdpa(backend):
        def run(leaves):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(*nested(leaves), is_causal=causal).transpose(1, 2).values()
        return run

    fwd_fns, bwd_fns = {}, {}
    grad_out = dout.reshape(-1, h, d)
    for label, run in (("varlen_attn", varlen_attn), ("sdpa nested flash", sdpa(SDPBackend.FLASH_ATTENTION)),
                       ("sdpa nested cuDNN", sdpa(SDPBackend.CUDNN_ATTENTION))):
        leaves = [x.reshape(-1, h, d).detach().requires_grad_() for x in (q, k, v)]
        try:
            values = run(leaves)
            torch.autograd.grad(values, leaves, grad_out, retain_graph=True)
        except (RuntimeError, NotImplementedError, ValueError, ImportError, TypeError) as exc:
            rep.row(f"{name}: torch {label}", None, "TFLOP/s", note=f"not run: {exc}"[:300])
            continue
        fwd_fns[label] = (lambda i, run=run, leaves=leaves: run(leaves))
        bwd_fns[label] = (lambda i, values=values, leaves=leaves: torch.autograd.grad(values, leaves, grad_out,
                                                                                       retain_graph=True))
    return fwd_fns, bwd_fns


def _rows(rep: Any, name: str, ms: dict, flops: float, ours: dict[str, str]) -> None:
    """Rows of `ms` (label -> median ms): ours (label -> row name) with their ratios to each peer."""
    tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
    peers = [n for n in ms if n not in ours]
    for key, label in ours.items():
        if key in tf:
            rep.row(f"{name}: {label}", tf[key], "TFLOP/s", ms=round(ms[key], 3),
                    **{f"vs_{p.replace(' ', '_').lower()}": round(tf[key] / tf[p], 3) for p in peers})
    for p in peers:
        rep.row(f"{name}: torch {p.replace('sdpa', 'SDPA')}", tf[p], "TFLOP/s", ms=round(ms[p], 3))


def varlen_cases(rep: Any, torch, reps: int) -> list[str]:
    """Forward and backward rows for the ragged batch into `rep`; returns the wrong results."""
    from dsl import tile
    vl = load_varlen()
    h, d = VARLEN_HEADS, VARLEN_D
    lengths = _lengths()
    cu_list = [0]
    for n in lengths:
        cu_list.append(cu_list[-1] + n)
    total = cu_list[-1]
    cu = torch.tensor(cu_list, dtype=torch.int32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(total)
    q, k, v, dout = (torch.randn(total, h * d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))

    def new(*shape, dtype=torch.float32):
        return torch.full(shape, float("nan") if dtype == torch.float32 else -1, device="cuda", dtype=dtype)
    starts, ends = new(total, dtype=torch.int32), new(total, dtype=torch.int32)
    bounds = vl.bounds_args(cu, starts, ends)
    failed: list[str] = []
    for causal in (False, True):
        name = f"varlen {len(lengths)} seqs of 256..4096 (total {total}) H{h} D{d} {'causal' if causal else 'full'}"
        want = _per_sequence(torch, q, k, v, dout, cu_list, causal)
        o, lse, delta = new(total, h * d), new(total, h), new(total, h)
        dq, dk, dv = new(total, h * d), new(total, h * d), new(total, h * d)
        fwd_args = vl.launch_args(q, k, v, o, starts, ends, h, causal, lse=lse)
        steps = vl.backward_launch_args(q, k, v, o, dout, lse, delta, starts, ends, dq, dk, dv, h, causal)

        def forward(i, kern=vl.flash_fwd_varlen_lse):
            vl.sequence_bounds(*bounds)
            kern(*fwd_args)

        def backward(i):
            for kern, args in steps:
                kern(*args)
        forward(0)
        backward(0)
        err = max(((x.float() - w).abs().max() / w.abs().max()).item() for x, w in zip((o, dq, dk, dv), want))
        if not err < MAX_REL_ERR:
            failed.append(f"{name}: DSL tile varlen: max |ours - SDPA per sequence| / max = {err:.3g}")
            continue
        ours_fwd = {"ours": "DSL tile flash_fwd_varlen (bounds + forward)"}
        fwd_fns = {"ours": forward}
        others = {"ours ring": ("tma + fp_fusion + ftz", tile.kernel(vl.flash_fwd_varlen_lse.pyfunc, lowering=RING)),
                  "ours edges": ("edge masks only", vl.flash_fwd_varlen_lse_edges),
                  "ours edges ring": ("edge masks only, tma + fp_fusion + ftz",
                                      tile.kernel(vl.flash_fwd_varlen_lse_edges.pyfunc, lowering=RING))}
        for key, (what, kern) in others.items():
            o.fill_(float("nan"))
            forward(0, kern)
            other_err = ((o.float() - want[0]).abs().max() / want[0].abs().max()).item()
            if other_err < MAX_REL_ERR:
                ours_fwd[key] = f"DSL tile flash_fwd_varlen {what} (bounds + forward)"
                fwd_fns[key] = (lambda i, kern=kern: forward(i, kern))
            else:
                failed.append(f"{name}: varlen {what}: max |ours - SDPA per sequence| / max = {other_err:.3g}")
        ours_bwd = {"ours": "DSL tile varlen backward"}
        bwd_fns = {"ours": backward}
        # the fused backward (one pass over the keys, dQ added atomically: per element, or by TMA reduce-adds)
        for key, (what, lowering) in {"ours fused": ("fused, atomic dQ", None),
                                      "ours fused tma": ("fused, TMA reduce dQ", {"tma_store": True})}.items():
            fsteps = vl.fused_backward_launch_args(q, k, v, o, dout, lse, delta, starts, ends, dq, dk, dv, h, causal,
                                                   lowering=lowering)

            def fused(i, fsteps=fsteps):
                for kern, args in fsteps:
                    kern(*args)
            forward(0)
            dq.fill_(float("nan"))
            fused(0)
            ferr = max(((x.float() - w).abs().max() / w.abs().max()).item() for x, w in zip((dq, dk, dv), want[1:]))
            if ferr < MAX_REL_ERR:
                ours_bwd[key] = f"DSL tile varlen backward {what}"
                bwd_fns[key] = fused
            else:
                failed.append(f"{name}: varlen backward {what}: max |ours - SDPA per sequence| / max = {ferr:.3g}")
        fwd_peers, bwd_peers = _torch_peers(rep, torch, name, q, k, v, dout, cu, max(lengths), causal)
        flops = 4 * h * d * sum(n * n for n in lengths) / (2 if causal else 1)
        _rows(rep, name, time_interleaved({**fwd_fns, **fwd_peers}, reps=reps), flops, ours_fwd)
        _rows(rep, f"{name} backward", time_interleaved({**bwd_fns, **bwd_peers}, reps=reps), 2.5 * flops, ours_bwd)
    return failed
