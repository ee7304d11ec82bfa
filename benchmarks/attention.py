"""Flash attention forward: the dsl.tile kernel of examples/flash_attention.py vs torch's
scaled_dot_product_attention with the flash backend, bf16, one process.

Shapes: B4 H16 S4096 D128 (the bar), D64, and S1024; causal and not. Each result is checked against
SDPA before timing; device events, L2 flushed before each launch, ours and SDPA interleaved, median.
TFLOP/s count 4*B*H*S^2*D (halved when causal). Bar (DESIGN §8): >= 1.0x SDPA's flash backend.
The kernel runs as the default build does: its products on the tensor cores (docs/tile.md).
"""
from __future__ import annotations

import importlib.util
import sys

from _bench_kit import ROOT, gpu_or_note, time_interleaved
from _common import Report, parse_args, try_import

SHAPES = [(4, 16, 4096, 128), (4, 16, 4096, 64), (4, 16, 1024, 128)]


def load_example():
    spec = importlib.util.spec_from_file_location("flash_attention_example", ROOT / "examples" / "flash_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("flash attention forward: dsl.tile vs torch SDPA (flash backend), bf16")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    torch = try_import("torch", rep.missing)
    if torch is None:
        rep.notes.append("torch missing: no SDPA peer")
        rep.finish(args.json)
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import bridge
    fa = load_example()
    failed = []
    with bridge.use_stream(bridge.Stream()):
        for b, h, s, d in SHAPES[:1] if args.quick else SHAPES:
            g = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
            out = torch.empty((b * h * s, d), device="cuda")
            for causal in (False, True):
                name = f"B{b} H{h} S{s} D{d} {'causal' if causal else 'full'}"
                call = fa.launch_args(*(x.reshape(-1, d) for x in (q, k, v)), out, s, causal)
                res: list = []

                def sdpa(i, causal=causal):
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        r = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    if not res:
                        res.append(r)
                ours = (lambda i, call=call: fa.flash_fwd(*call))
                ours(0)
                sdpa(0)
                err = (out.reshape(q.shape) - res[0].float()).abs().max().item()
                if not err < 3e-2:
                    failed.append(f"{name}: max |ours - SDPA| = {err}")
                    continue
                ms = time_interleaved({"ours": ours, "sdpa": sdpa}, reps=3 if args.quick else 5)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
                rep.row(f"{name}: DSL tile flash_fwd", tf["ours"], "TFLOP/s", ms=round(ms["ours"], 3))
                rep.row(f"{name}: torch SDPA (flash)", tf["sdpa"], "TFLOP/s", ms=round(ms["sdpa"], 3))
                if (s, d) == (4096, 128):
                    rep.bar(f"flash attention {name} vs SDPA flash", tf["ours"], tf["sdpa"], higher_is_better=True,
                            bar=1.0, peer_name="torch SDPA flash backend")
    rep.finish(args.json)
    if failed:
        print("FAILED (wrong results):\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
