"""Flash attention forward: the dsl.tile kernel of examples/flash_attention.py vs torch's
scaled_dot_product_attention with its flash and cuDNN backends, bf16, one process.

Shapes: B4 H16 S4096 D128, D64, S1024 and D256 (a report row); causal and not. Each result is checked against
SDPA before timing; device events, L2 flushed before each launch, ours and SDPA interleaved, median.
TFLOP/s count 4*B*H*S^2*D (halved when causal). Two rows of ours: the example's default launch
(`flash_fwd` with launch_args' tiles, the cp.async loop) and its autotuned launcher (`flash_fwd_tuned`:
the default and, on sm_90, the forward ladder's best rungs, timed by tile.autotune on first use; the row
names its pick), with an f32 output, and the autotuned launcher again writing the output in the inputs'
dtype as SDPA returns it ("->bf16": half the bytes); and a report row of the SDPA drop-in as a user calls it
(examples/attention_op.py on inputs that need no gradient: its fixed inference form, O in bf16). Bars: the default >= 1.0x SDPA's flash backend at
S4096 D128 (DESIGN §8); the better autotuned row >= 1.0x SDPA's cuDNN backend at S4096 D128 and >= 0.95x
at D64 and S1024 (issue 29).
The kernel runs as the default build does: its products on the tensor cores (docs/tile.md).
`--sweep` also times other (query rows, key rows, warps) tiles of the same kernel at S4096, each
checked like the default (no bar: the bar is the example's own tile).
`--backward` adds the backward (examples/flash_attention_bwd.py: preprocess + dK/dV + dQ, given the
forward's O and log-sum-exp, and examples/flash_attention_bwd_fused.py's one-pass backward in each form
of its ladder) against SDPA's flash and cuDNN backward (autograd of a forward run under each backend,
timed alone) at B4 H16 S4096 D128, causal and not, TFLOP/s counting 2.5x the forward's FLOPs; its bar
takes the best of those launches; `--backward-only` skips the forward cases, `--bwd-sweep` also times
other tiles of ours, `--bwd-head-dims 64,128` times those head dims (B4 H16 S4096) instead of D128,
`--bwd-forms "a;b"` only those forms of the fused backward's ladder (a short device call).
`--fwd-shapes "4096x128,4096x64"` times only those forward shapes (B4 H16; the GPU check runs the forward in
two parts so, each inside one device call).
`--ladder` times the forward under each switch of the TMA-ring ladder (KB_TILE_LOOP_PIPELINE tma/ws,
stages, KB_TILE_SETMAXNREG, KB_TILE_PRODUCT_OVERLAP; benchmarks/_attention_ladder.py) against SDPA's
flash and cuDNN backends in the same run and prints a table (`--quick`: S4096 D128 only);
`--ladder-only` skips the other cases; `--ladder-rungs "a,b"` times only those rungs and
`--ladder-shapes "1024x128"` only those S x D shapes (short device calls).
`--gqa` adds grouped-query rows (B4 H16 H_kv 2 S4096 D128, forward and backward, against SDPA with
enable_gqa=True; benchmarks/_attention_gqa.py); `--gqa-only` skips the other cases.
`--varlen` adds variable-length rows (16 packed sequences of 256..4096 rows, H16 D128, forward and backward,
examples/flash_attention_varlen.py against SDPA over jagged nested tensors; benchmarks/_attention_varlen.py);
`--varlen-only` skips the other cases.
"""
from __future__ import annotations

import importlib.util
import sys

import argparse

from _bench_kit import ROOT, gpu_or_note, time_interleaved
from _common import Report, try_import

SHAPES = [(4, 16, 4096, 128), (4, 16, 4096, 64), (4, 16, 1024, 128), (4, 16, 4096, 256)]
TUNED = "DSL tile flash_fwd autotuned"
TUNED_16 = TUNED + " ->bf16"       # the output in the inputs' dtype
DROP_IN = "DSL drop-in SDPA, no grad"     # examples/attention_op.py as a user calls it (a report row)
# issue 29's bars against SDPA's cuDNN backend, on the autotuned launcher: (S, D) -> bar (D256: a report row)
CUDNN_BARS = {(4096, 128): 1.0, (4096, 64): 0.95, (1024, 128): 0.95}
# --sweep: (query rows, key rows, warps or None for the kernel's own pick) per head dim
# (sm_90: 16 query rows a warp run the products on warpgroup MMA, 32 on mma.sync; KB_TILE_WGMMA_PRODUCTS=0
# keeps all of them on mma.sync)
SWEEP = {128: [(128, 64, 8), (128, 32, 8), (128, 128, 8), (128, 64, None), (64, 32, None)],
         64: [(64, 64, None), (128, 64, 8), (128, 128, 8), (64, 128, None)]}


def shape_list(text: str) -> list[tuple[int, int]]:
    """--ladder-shapes' "1024x128,4096x64" as [(S, D), ...]; argparse names the option in the error."""
    try:
        return [(int(s), int(d)) for s, d in (x.strip().split("x") for x in text.split(",") if x.strip())]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected S x D pairs such as 1024x128,4096x64, got {text!r}") from None


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--fwd-shapes", type=shape_list, default=None, help="comma list of the forward's SxD shapes "
                    "(B4 H16) to time, e.g. 4096x128,4096x64 (default: SHAPES, or S4096 D128 with --quick)")
    ap.add_argument("--sweep", action="store_true", help="also time the SWEEP tiles at S4096")
    ap.add_argument("--backward", action="store_true", help="also time the backward (BWD_SHAPES)")
    ap.add_argument("--backward-only", action="store_true", help="time the backward alone")
    ap.add_argument("--bwd-sweep", action="store_true", help="with the backward, also time the BWD_SWEEP tiles")
    ap.add_argument("--bwd-head-dims", default="128", help="comma list of the backward's head dims (B4 H16 S4096)")
    ap.add_argument("--bwd-forms", default="", help="semicolon list of the fused backward's LADDER forms to time "
                    "(default: all; its labels hold commas)")
    ap.add_argument("--ladder", action="store_true", help="also time the forward's TMA-ring ladder vs SDPA cuDNN")
    ap.add_argument("--ladder-only", action="store_true", help="time the ladder alone")
    ap.add_argument("--ladder-rungs", default="", help="comma list of ladder labels to time (default: all)")
    ap.add_argument("--ladder-shapes", type=shape_list, default=None, help="comma list of the ladder's SxD shapes "
                    "to time, e.g. 1024x128 (default: all, or S4096 D128 with --quick)")
    ap.add_argument("--gqa", action="store_true", help="also time grouped-query attention (H_kv = H/8)")
    ap.add_argument("--gqa-only", action="store_true", help="time grouped-query attention alone")
    ap.add_argument("--varlen", action="store_true", help="also time variable-length (cu_seqlens) attention")
    ap.add_argument("--varlen-only", action="store_true", help="time variable-length attention alone")
    return ap.parse_args()


class _Tuned:
    """The example's autotuned launcher as a kernel-like callable; `pick` names the configuration it ran."""

    def __init__(self, fa) -> None:
        self.fa, self.tuned = fa, None

    def __call__(self, *call) -> None:
        self.tuned = self.fa.flash_fwd_tuned(*call)

    @property
    def pick(self) -> str:
        picks = list(self.tuned.picks.values()) if self.tuned is not None else []
        if not picks:
            return "?"
        c = picks[-1]
        low = c.lowering or {}
        flags = [name for name in ("setmaxnreg", "fp_fusion", "ftz", "ws_chain", "pingpong", "product_overlap",
                                   "div_reciprocal") if low.get(name)]
        flags += ["Q-tma"] if low.get("wgmma_a") == "shared" else []    # Q copied by the producer (wgmma_a)
        return " ".join([f"{c.tiles['o'][0]}x{c.constants['bn']}", low.get("loop_pipeline", "cp.async")]
                        + ([f"w{c.num_warps}"] if c.num_warps else []) + flags + (["persistent"] if c.persistent else []))


def variants(fa, tile, q, k, v, new_out, s: int, d: int, causal: bool, sweep: bool) -> dict:
    """name -> (launch args, kernel, output): the example's own tile, its autotuned launcher
    (flash_fwd_tuned: the default and the sm_90 ladder's best rungs, timed on first use) with an f32
    output and with one in q's dtype, then the sweep's (S4096 only)."""
    out = new_out()
    found = {"DSL tile flash_fwd": (fa.launch_args(q, k, v, out, s, causal), fa.flash_fwd, out)}
    out = new_out()
    found[TUNED] = ((q, k, v, out, s, causal), _Tuned(fa), out)
    out = new_out(q.dtype)
    found[TUNED_16] = ((q, k, v, out, s, causal), _Tuned(fa), out)
    if sweep and s == 4096:
        kernels: dict = {}
        for bm, bn, warps in SWEEP[d]:
            if warps not in kernels:
                kernels[warps] = fa.flash_fwd if warps is None else tile.kernel(fa.flash_fwd.pyfunc, num_warps=warps)
            out = new_out()
            args = (q, k, v, tile.partition(out, (bm, d)), s, d ** -0.5, bn, causal, 1)
            found[f"DSL tile flash_fwd {bm}x{bn} w{warps or 'auto'}"] = (args, kernels[warps], out)
    return found


def drop_in(q, k, v, causal: bool, want, name: str, failed: list):
    """The SDPA drop-in as a user calls it (examples/attention_op.py, inputs that need no gradient: its
    ::infer op, O in the inputs' dtype) as a timed callable, checked against SDPA's output first; None
    (and a line in `failed`) when it is wrong."""
    if str(ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(ROOT / "examples"))
    import attention_op
    got = attention_op.scaled_dot_product_attention(q, k, v, is_causal=causal)
    err = (got.float() - want.float()).abs().max().item()
    if not err < 3e-2:
        failed.append(f"{name}: {DROP_IN}: max |ours - SDPA| = {err}")
        return None
    return lambda i: attention_op.scaled_dot_product_attention(q, k, v, is_causal=causal)


def load_example():
    spec = importlib.util.spec_from_file_location("flash_attention_example", ROOT / "examples" / "flash_attention.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def title(args: argparse.Namespace) -> str:
    """The report's title says what this run times: a run of the backward alone (or of GQA/varlen alone) is
    another benchmark than the forward's, rendered as its own section (benchmarks/write_docs.py)."""
    if args.backward_only:
        return "flash attention backward: dsl.tile vs torch SDPA (flash and cuDNN backends), bf16"
    if args.gqa_only or args.varlen_only:
        return "flash attention, grouped-query and variable-length: dsl.tile vs torch SDPA, bf16"
    if args.ladder_only:
        return "flash attention forward ladder: dsl.tile rungs vs torch SDPA (flash and cuDNN backends), bf16"
    shapes = ", ".join(f"S{s} D{d}" for s, d in args.fwd_shapes or [])
    return f"flash attention forward{' ' + shapes if shapes else ''}: dsl.tile vs torch SDPA (flash backend), bf16"


def forward_shapes(args: argparse.Namespace) -> list[tuple[int, int, int, int]]:
    """The forward's (B, H, S, D) cases: --fwd-shapes' (B4 H16), else SHAPES (S4096 D128 alone with --quick)."""
    if args.backward_only or args.ladder_only or args.gqa_only or args.varlen_only:
        return []
    if args.fwd_shapes:
        return [(4, 16, s, d) for s, d in args.fwd_shapes]
    return SHAPES[:1] if args.quick else SHAPES


def main() -> int:
    args = parse()
    rep = Report(title(args))
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    torch = try_import("torch", rep.missing)
    if torch is None:
        rep.notes.append("torch missing: no SDPA peer")
        rep.finish(args.json)
        return 0
    import bridge
    from dsl import tile
    fa = load_example()
    failed = []
    with bridge.use_stream(bridge.Stream()):
        for b, h, s, d in forward_shapes(args):
            g = torch.Generator(device="cuda").manual_seed(s + d)
            q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
            for causal in (False, True):
                name = f"B{b} H{h} S{s} D{d} {'causal' if causal else 'full'}"
                from _attention_bwd import sdpa_forward_peers
                peers, want = sdpa_forward_peers(rep, name, q, k, v, causal)
                if "sdpa flash" not in peers:
                    continue
                fns = {}

                def new_out(dtype=torch.float32):
                    return torch.full((b * h * s, d), float("nan"), device="cuda", dtype=dtype)
                picks: dict = {}
                for label, (call, kern, out) in variants(fa, tile, *(x.reshape(-1, d) for x in (q, k, v)), new_out,
                                                         s, d, causal, args.sweep).items():
                    kern(*call)
                    err = (out.reshape(q.shape) - want.float()).abs().max().item()
                    if not err < 3e-2:
                        failed.append(f"{name}: {label}: max |ours - SDPA| = {err}")
                        continue
                    fns[label] = (lambda i, kk=kern, a=call: kk(*a))
                    if isinstance(kern, _Tuned):
                        picks[label] = kern
                if "DSL tile flash_fwd" not in fns:
                    continue
                drop = drop_in(q, k, v, causal, want, name, failed)
                if drop is not None:
                    fns[DROP_IN] = drop
                ms = time_interleaved({**fns, **peers}, reps=3 if args.quick else 5)
                flops = 4 * b * h * s * s * d / (2 if causal else 1)
                tf = {n: flops / (t * 1e-3) / 1e12 for n, t in ms.items()}
                for label in fns:
                    extra = {"pick": picks[label].pick} if label in picks else {}
                    rep.row(f"{name}: {label}", tf[label], "TFLOP/s", ms=round(ms[label], 3),
                            **{f"vs_{p.replace(' ', '_').lower()}": round(tf[label] / tf[p], 3) for p in peers}, **extra)
                for p in peers:
                    rep.row(f"{name}: torch SDPA ({p.split()[-1]})", tf[p], "TFLOP/s", ms=round(ms[p], 3))
                if (s, d) == (4096, 128):
                    rep.bar(f"flash attention {name} vs SDPA flash", tf["DSL tile flash_fwd"], tf["sdpa flash"],
                            higher_is_better=True, bar=1.0, peer_name="torch SDPA flash backend")
                best = max((x for x in (TUNED, TUNED_16) if x in fns), key=lambda x: tf[x], default=None)
                if (s, d) in CUDNN_BARS and best is not None and "sdpa cuDNN" in peers:
                    rep.bar(f"flash attention {name}: autotuned vs SDPA cuDNN", tf[best], tf["sdpa cuDNN"],
                            higher_is_better=True, bar=CUDNN_BARS[(s, d)], peer_name="torch SDPA cuDNN backend")
                rep.checkpoint(args.json)
        if args.backward or args.backward_only or args.bwd_sweep:
            from _attention_bwd import backward_cases
            dims = [int(x) for x in args.bwd_head_dims.split(",") if x]
            forms = [f.strip() for f in args.bwd_forms.split(";") if f.strip()] or None
            failed += backward_cases(rep, torch, reps=3 if args.quick else 5, sweep=args.bwd_sweep, head_dims=dims,
                                     forms=forms)
            rep.checkpoint(args.json)
        if args.ladder or args.ladder_only:
            from _attention_ladder import ladder_cases
            rungs = [x.strip() for x in args.ladder_rungs.split(",") if x.strip()] or None
            failed += ladder_cases(rep, torch, fa, reps=3 if args.quick else 5, quick=args.quick, rungs=rungs,
                                   shapes=args.ladder_shapes)
            rep.checkpoint(args.json)
        if args.gqa or args.gqa_only:
            from _attention_gqa import gqa_cases
            failed += gqa_cases(rep, torch, fa, reps=3 if args.quick else 5)
            rep.checkpoint(args.json)
        if args.varlen or args.varlen_only:
            from _attention_varlen import varlen_cases
            failed += varlen_cases(rep, torch, reps=3 if args.quick else 5)
            rep.checkpoint(args.json)
    rep.finish(args.json)
    if failed:
        print("FAILED (wrong results):\n  " + "\n  ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
