"""The backward case of benchmarks/attention.py (`--backward`): examples/flash_attention_bwd.py
(preprocess + dK/dV + dQ, given the forward's O and log-sum-exp from flash_fwd_lse) against torch SDPA's
flash and cuDNN backward, bf16, and the fused backward (examples/flash_attention_bwd_fused.py: one kernel,
dQ added atomically, per element or by TMA reduce-adds). SDPA's backward is timed alone: autograd.grad of a forward recorded
under each backend (retain_graph), so its time holds the backend's backward kernels and nothing of the
forward; under cuDNN that is its main kernel, its dO.O preprocess (which also zeroes its f32 dQ sum) and its
dQ conversion to 16 bits (torch.profiler, H100 2026-12-07: 2273 + 92 + 73 us at D128 full). Ours is timed
as the SDPA drop-in runs it, the same work: the arrays in its dtypes (O, dK, dV in q's), and the fused
backward's f32 dQ sum converted to q's dtype (until 2026-12-07 07:00 the rows left the dQ sum in f32 and
the dK/dV in f32, which held no conversion: ~3 % in our favour). Each implementation is checked against
SDPA's flash gradients before timing. TFLOP/s count the
backward as 2.5x the forward's 4*B*H*S^2*D (halved when causal), as FlashAttention's papers do. Bar
(issue 29): the best of the examples' backward launches (two kernels, or fused in one of its forms; the
bar's name says which) >= 1.0x SDPA's cuDNN backward, causal and not.
"""
from __future__ import annotations

import functools
import importlib.util
from typing import Any

from _bench_kit import ROOT, time_interleaved

BWD_SHAPES = [(4, 16, 4096, 128)]
# --bwd-sweep: (rows a block owns, rows it streams, warps) for both kernels, beside the example's own
# pick; 128 owned rows on 8 warps (two warpgroups, 16 rows a warp) keep the products on wgmma and share
# each staged operand between the warpgroups (ptxas -v, sm_90a: no spills, 239 / 248 registers at D128)
# (rows owned, rows streamed, warps, lowering switches fixed for both kernels or None); with the loop-
# invariant operands (K, V of dK/dV; Q, dO of dQ) read by the tensor cores from shared memory
# (wgmma_a="shared") ptxas needs fewer registers: dQ at D128 64x64 no longer spills (docs/tile.md)
_SHARED = {"wgmma_a": "shared"}
# fp_fusion + ftz: fma for the scale-and-subtract, exp2 as one ex2.approx.ftz (docs/tile.md, "Per-kernel
# lowering"), on the example's own 64 x 32 tiles
_FTZ = {"fp_fusion": True, "ftz": True}
# the streamed Q/dO (dK/dV) and K/V (dQ) by a TMA ring instead of cp.async (2026-12-05; ptxas, sm_90a, D128
# causal, with Q/K shared + fp_fusion + ftz: dK/dV 195 registers and dQ 122, against 217 and 152 on cp.async,
# no spills either way; each tile the ring holds once, though two products read it; correct in the lowered
# sm_90 simulator); 2 and 3 stages, and fed by a producer warpgroup (ws: 256 threads, dK/dV 188 and dQ 120
# registers, no spills); and the ring on FlashAttention-2's 128 x 64 tile on two warpgroups (dK/dV 255, dQ
# 187, no spills, 135 KiB of shared memory: one block an SM, 8 warps)
_RING, _RING3, _WS = {"loop_pipeline": "tma"}, {"loop_pipeline": "tma", "loop_stages": 3}, {"loop_pipeline": "ws"}
# the lse / delta loads of the dK/dV kernel's steps issued ahead of their products (the fused backward's early
# loads, 1.13x / 1.08x there; ptxas, sm_90a, D128 with Q/K shared + fp_fusion + ftz: dK/dV 206, dQ 148 registers)
_EARLY = {"early_loads": True}
BWD_SWEEP = {128: [(128, 32, 8, None), (64, 32, 4, _SHARED), (64, 64, 4, _SHARED), (64, 32, 4, _FTZ),
                   (64, 32, 4, _SHARED | _FTZ), (64, 32, 4, _SHARED | _FTZ | _EARLY), (64, 32, 4, _SHARED | _FTZ | _RING),
                   (64, 32, 4, _SHARED | _FTZ | _RING3), (64, 32, 4, _SHARED | _FTZ | _WS),
                   (128, 64, 8, _SHARED | _FTZ | _RING)],
             64: [(128, 64, 8, None), (64, 32, 4, None), (64, 64, 4, _SHARED), (128, 64, 8, _SHARED | _FTZ | _RING)]}
MAX_REL_ERR = 2e-2        # vs SDPA's bf16 gradients; the lowered sm_90 simulator puts ours at ~3.5e-3 (S2048)


def _label(lowering: dict | None) -> str:
    names = {"wgmma_a": lambda v: " Q/K shared", "loop_pipeline": lambda v: f" {v} ring",
             "loop_stages": lambda v: f" S{v}"}
    return "".join(names.get(k, lambda v, k=k: f" {k}")(v) for k, v in (lowering or {}).items())


def load_backward(name: str = "flash_attention_bwd"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def ours_fused(torch, fused, q, k, v, dout, s: int, causal: bool, form: str) -> tuple:
    """(fn(i) running the fused backward's launches in LADDER form `form` and converting its f32 dQ sum to
    q's dtype, as the SDPA drop-in runs and returns it (cuDNN's backward converts its dQ too: its time holds that
    kernel): in two stages, the first stage's dQ rows converted while the second runs (fused.staged_launch_args,
    attention_op.run_converting), (dq, dk, dv)), as `ours` for the two-kernel one."""
    d, group, x, (o, lse, delta, dq, dk, dv) = _after_forward(torch, fused.bwd.fwd, q, k, v, dout, s, causal)
    stages = fused.staged_launch_args(x[0], x[1], x[2], o, x[3], lse, delta, dq, dk, dv, s, causal, group=group,
                                      **fused.form_options(form))
    dq16 = torch.empty_like(dq, dtype=q.dtype)
    run_converting = _attention_op().run_converting
    return (lambda i: run_converting(stages, dq, dq16, [dq, dq16, dk, dv])), (dq16, dk, dv)


@functools.cache
def _attention_op():
    """examples/attention_op.py, loaded once (its side-stream cache lives in it)."""
    return load_backward("attention_op")


def _after_forward(torch, fwd, q, k, v, dout, s: int, causal: bool, dq_dtype: Any = None) -> tuple:
    """(head dim, group, row stacks of q k v dout, (o, lse, delta, dq, dk, dv)): the forward with its
    log-sum-exp run once, the other arrays NaN. k and v may have fewer heads than q (GQA). Dtypes as the SDPA
    drop-in's (examples/attention_op.py) training path: O, dK and dV in q's, lse and Delta f32, dQ in `dq_dtype`
    (f32 by default: the fused backward's sum)."""
    d, group = q.shape[-1], q.shape[1] // k.shape[1]
    x = [t.reshape(-1, d) for t in (q, k, v, dout)]
    rows, kv_rows = x[0].shape[0], x[1].shape[0]

    def new(*shape, dtype=torch.float32):
        return torch.full(shape, float("nan"), device="cuda", dtype=dtype)
    o, lse, delta, dq = new(rows, d, dtype=q.dtype), new(rows), new(rows), new(rows, d, dtype=dq_dtype or torch.float32)
    dk, dv = new(kv_rows, d, dtype=q.dtype), new(kv_rows, d, dtype=q.dtype)
    fwd.flash_fwd_lse(*fwd.launch_args_lse(x[0], x[1], x[2], o, lse, s, causal, group=group))
    return d, group, x, (o, lse, delta, dq, dk, dv)


def ours(torch, bwd, q, k, v, dout, s: int, causal: bool, config: tuple | None = None) -> tuple:
    """(fn(i) running the three backward launches, (dq, dk, dv)): the example's tiles, or `config`'s
    (rows owned, rows streamed, warps, lowering) on kernels made with those options. k and v may have fewer
    heads than q (grouped-query attention)."""
    d, group, x, (o, lse, delta, dq, dk, dv) = _after_forward(torch, bwd.fwd, q, k, v, dout, s, causal,
                                                              dq_dtype=q.dtype)   # no atomic sum: stored as is
    chosen = {} if config is None else {"tiles": config[:3], "lowering": config[3]}
    steps = bwd.launch_args(x[0], x[1], x[2], o, x[3], lse, delta, dq, dk, dv, s, causal, group=group, **chosen)
    return (lambda i: bwd.run(steps)), (dq, dk, dv)


def sdpa(torch, backend, q, k, v, dout, causal: bool) -> tuple:
    """(fn(i) running SDPA's backward under `backend`, (dq, dk, dv))."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(backend):
        out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
    grads = torch.autograd.grad(out, leaves, dout, retain_graph=True)
    return (lambda i: torch.autograd.grad(out, leaves, dout, retain_graph=True)), grads


def sdpa_peers(rep: Any, torch, name: str, q, k, v, dout, causal: bool) -> dict[str, tuple]:
    """{"flash"/"cuDNN": (fn, grads)} of SDPA's backward under each backend that takes these inputs; a
    backend that refuses them is a "not run" row of `rep`."""
    from torch.nn.attention import SDPBackend
    peers: dict[str, tuple] = {}
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        try:
            peers[label] = sdpa(torch, backend, q, k, v, dout, causal)
        except RuntimeError as exc:
            rep.row(f"{name}: torch SDPA ({label})", None, "TFLOP/s", note=f"not run: {exc}"[:300])
    return peers


def sdpa_forward_peers(rep: Any, name: str, q, k, v, causal: bool) -> tuple[dict, Any]:
    """({"sdpa flash"/"sdpa cuDNN": fn(i)} of SDPA's forward under each backend that takes these inputs,
    the first backend's output as the reference or None); a backend that refuses them is a "not run"
    row of `rep`. k and v may have fewer heads (enable_gqa)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    peers, ref = {}, None
    for label, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cuDNN", SDPBackend.CUDNN_ATTENTION)):
        def run(i, backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])
        try:
            got = run(0)
        except RuntimeError as exc:
            rep.row(f"{name}: torch SDPA ({label})", None, "TFLOP/s", note=f"not run: {exc}"[:300])
            continue
        ref = got if ref is None else ref
        peers[f"sdpa {label}"] = run
    return peers, ref


def rel_err(got, want) -> float:
    return max(((g.reshape(w.shape).float() - w.float()).abs().max() / w.float().abs().max()).item()
               for g, w in zip(got, want))


def fused_forms(fused: Any, forms: list[str] | None, d: int) -> list[str]:
    """The fused backward's forms to time at head dim `d`: `forms` (else its whole LADDER) less those that do
    not run at d (fused.applies: D64's 128-row step does not fit D128)."""
    return [form for form in forms or fused.LADDER if fused.applies(form, d)]


def backward_cases(rep: Any, torch, reps: int, sweep: bool, head_dims: list[int] | None = None,
                   forms: list[str] | None = None) -> list[str]:
    """Time ours and SDPA's backends at BWD_SHAPES (with `head_dims`: B4 H16 S4096 at those), causal and
    not, the fused backward in each form of its LADDER (or those of `forms`); rows into `rep`; returns
    failures."""
    bwd = load_backward()
    fused = load_backward("flash_attention_bwd_fused")
    unknown = [f for f in forms or () if f not in fused.LADDER]
    if unknown:
        raise ValueError(f"--bwd-forms: unknown {unknown}; expected forms of {list(fused.LADDER)}")
    failed: list[str] = []
    shapes = BWD_SHAPES if head_dims is None else [(4, 16, 4096, d) for d in head_dims]
    for b, h, s, d in shapes:
        g = torch.Generator(device="cuda").manual_seed(s + d + 1)
        q, k, v, dout = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
        for causal in (False, True):
            name = f"backward B{b} H{h} S{s} D{d} {'causal' if causal else 'full'}"
            peers = sdpa_peers(rep, torch, name, q, k, v, dout, causal)
            if not peers:
                continue
            want = (peers.get("flash") or peers["cuDNN"])[1]
            fns = {}
            configs = {"DSL tile flash_bwd": None}
            if sweep:
                configs.update({f"DSL tile flash_bwd {o}x{st} w{w}" + _label(low): (o, st, w, low)
                                for o, st, w, low in BWD_SWEEP[d]})
            runs = [(label, lambda config=config: ours(torch, bwd, q, k, v, dout, s, causal, config))
                    for label, config in configs.items()]
            # the fused backward (examples/flash_attention_bwd_fused.py: dK, dV and dQ in one kernel, dQ added
            # atomically; 5 products a block pair, not 7) in each form of its LADDER that runs at this head dim
            runs += [(f"DSL tile flash_bwd fused ({form})",
                      lambda form=form: ours_fused(torch, fused, q, k, v, dout, s, causal, form))
                     for form in fused_forms(fused, forms, d)]
            for label, make in runs:
                try:
                    fn, got = make()
                    fn(0)
                except Exception as exc:   # noqa: BLE001 - a variant that does not build is a failure row, not the end
                    failed.append(f"{name}: {label}: {type(exc).__name__}: {exc}"[:300])
                    continue
                err = rel_err(got, want)
                if not err < MAX_REL_ERR:
                    failed.append(f"{name}: {label}: max |ours - SDPA| / max |SDPA| = {err:.3g}")
                    continue
                fns[label] = fn
            ms = time_interleaved({**fns, **{f"sdpa {p}": fn for p, (fn, _) in peers.items()}}, reps=reps)
            flops = 2.5 * 4 * b * h * s * s * d / (2 if causal else 1)
            tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
            for label in fns:
                rep.row(f"{name}: {label}", tf[label], "TFLOP/s", ms=round(ms[label], 3),
                        **{f"vs_sdpa_{p.lower()}": round(tf[label] / tf[f"sdpa {p}"], 3) for p in peers})
            for p in peers:
                rep.row(f"{name}: torch SDPA ({p})", tf[f"sdpa {p}"], "TFLOP/s", ms=round(ms[f"sdpa {p}"], 3))
            # issue 29's bar: the best of the examples' own launches (the two-kernel backward and the fused one in
            # each form of its ladder; not the --bwd-sweep's tile variants), named as the GEMM bars name theirs
            mine = [lb for lb in fns if lb == "DSL tile flash_bwd" or lb.startswith("DSL tile flash_bwd fused")]
            if mine and "sdpa cuDNN" in tf:
                best = max(mine, key=lambda lb: tf[lb])
                which = best.removeprefix("DSL tile flash_bwd").strip() or "two kernels"
                rep.bar(f"flash attention {name}: DSL backward ({which}) vs SDPA cuDNN backward", tf[best],
                        tf["sdpa cuDNN"], higher_is_better=True, bar=1.0, peer_name="torch SDPA cuDNN backward")
    return failed
