"""A whole GPT-2 training step (examples/gpt2, issue 30): tokens/s with every op on its DSL side
(--dsl all) and on its C++ side (--dsl none: cpp/kernels/llm + cuBLAS + SDPA's kernels), eager and
replayed as a CUDA graph (--graph: forward, backward and clipping in the graph, AdamW one launch
after it), against the same model in plain PyTorch (f32, tf32 matmuls, fused SDPA, fused AdamW),
eager and under torch.compile; then a per-op table, C++ vs DSL.

Default shape: GPT-2 small (124M), B8 x T1024, one process. Every variant is built and warmed first
(first step, which compiles and loads, fills the graph's memory pool, then the capture;
torch.compile's compilation), and its first-step loss checked against PyTorch eager's (f32, same
weights and batch) before it is timed. Then `--rounds` rounds, each timing `--steps` back-to-back
steps of every variant (CUDA events on the one stream, no host read between steps; the order rotates
from round to round), so clock and thermal drift hit all alike: tokens/s is the median over rounds,
and each bar (`--dsl all --graph` >= `--dsl none --graph`, >= torch.compile) is judged on the median
of the per-round ratios. A peer that cannot run (torch.compile without a working Triton, an
out-of-memory) is reported as missing, with why, and its bar as not judged.

The per-op table (its own JSON, `<json stem>_per_op.json`, so docs/benchmarks.md carries it as a
table of its own): every call of one eager step is recorded (op, arguments); calls with the same op
and shapes are one row, timed on both sides on the step's own buffers (L2 flushed before each
launch, sides interleaved, median), with the calls a step makes and the step's sum per side. The
linear layer's backward also gets rows with dX and dW in the layouts the step does not use
(kernels_dsl.DX_LAYOUT, DW_LAYOUT), and its forward a row with the output tile kernels_dsl.gemm_tile
did not pick (128 x 128 or WIDE_TILE).

    python benchmarks/gpt2_step.py [--config small] [--steps 10] [--rounds 5] [--quick] [--json out.json]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from _bench_kit import gpu_or_note, time_interleaved
from _common import Report

from examples.gpt2 import kernels_dsl, registry
from examples.gpt2.config import config
from examples.gpt2.model import batch, init_params
from examples.gpt2.train import build, capture, torch_pool

LOSS_RTOL = 2e-3        # first-step loss of a variant vs the PyTorch f32 model (examples/gpt2/__main__.py)
ALL, NONE = frozenset(registry.NAMES), frozenset()
OURS = "--dsl all --graph"
PEERS = ("--dsl none --graph", "PyTorch torch.compile")          # the bars: OURS >= each


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="small")
    ap.add_argument("--steps", type=int, default=10, help="steps a timing")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (the medians' samples)")
    ap.add_argument("--json", help="write results here (and the per-op table beside it)")
    ap.add_argument("--quick", action="store_true", help="fewer steps, rounds and repetitions")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer (reported as skipped)")
    return ap.parse_args()


def timed_steps(stream: Any, run_step: Callable[[], None], steps: int) -> float:
    """Seconds of `steps` back-to-back steps (device events on the stream)."""
    stream.synchronize()
    e0 = stream.record()
    for _ in range(steps):
        run_step()
    e1 = stream.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 1e3


def ours(cfg: Any, dsl: frozenset[str], graph: bool, stream: Any) -> tuple[float, Callable[[], None]]:
    """(first-step loss, one more step) of the example's step, warmed (and captured for `graph`)."""
    import torch
    model = build(cfg, dsl, simulate=False)
    model.set_batch(*batch(cfg, 0))
    pool = torch.cuda.MemPool() if graph else None
    with torch_pool(pool):
        model.step(1)
    loss = model.loss()
    t = [1]
    if graph:
        g = capture(model, stream, pool)

        def run() -> None:
            t[0] += 1
            g.replay()
            model.update(t[0])
    else:
        def run() -> None:
            t[0] += 1
            model.step(t[0])
    run()                                        # one warm step of the timed form
    return loss, run


def torch_peer(cfg: Any, compiled: bool) -> tuple[float, Callable[[], None]]:
    """(first-step loss, one more step) of the plain PyTorch model in f32 (eager or torch.compile)."""
    import torch

    from examples.gpt2.reference import ReferenceGPT2
    model = ReferenceGPT2(cfg).cuda()
    model.load_flat(init_params(cfg))
    fwd = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                            weight_decay=cfg.weight_decay, fused=True)
    inputs, targets = (torch.from_numpy(a).long().cuda() for a in batch(cfg, 0))

    def run() -> Any:
        loss = fwd(inputs, targets)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        return loss

    first = float(run().detach())
    for _ in range(2 if compiled else 1):        # the steady-state graphs compiled (and warm) before timing
        run()
    return first, run


def build_variants(rep: Report, cfg: Any, stream: Any, with_compile: bool) -> dict[str, Callable[[], None]]:
    """Every variant that builds and passes its first-step loss check; the others reported, with why."""
    makers: list[tuple[str, Callable[[], tuple[float, Callable[[], None]]]]] = [
        ("PyTorch eager", lambda: torch_peer(cfg, False))]
    if with_compile:
        makers.append(("PyTorch torch.compile", lambda: torch_peer(cfg, True)))
    else:
        rep.missing["PyTorch torch.compile"] = "skipped (--no-compile)"
    makers += [(f"--dsl {n}{' --graph' if g else ''}", (lambda d=d, g=g: ours(cfg, d, g, stream)))
               for n, d in (("all", ALL), ("none", NONE)) for g in (False, True)]
    runs, ref_loss = {}, None
    for name, make in makers:
        t0 = time.perf_counter()
        try:
            loss, run = make()
            if ref_loss is None:
                ref_loss = loss
            elif abs(loss / ref_loss - 1) > LOSS_RTOL:
                raise AssertionError(f"first-step loss {loss:.6f} vs PyTorch eager {ref_loss:.6f}; not timing it")
        except Exception as exc:  # noqa: BLE001 - reported, the other variants still run
            why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
            rep.missing[name] = why
            print(f"NOT MEASURED: {name}: {why}", flush=True)
            _free()
            continue
        runs[name] = run
        rep.extra.setdefault("first_loss", {})[name] = loss
        print(f"built {name}: first loss {loss:.6f} ({time.perf_counter() - t0:.1f} s)", flush=True)
    return runs


def step_variants(rep: Report, cfg: Any, steps: int, rounds: int, stream: Any, with_compile: bool) -> None:
    runs = build_variants(rep, cfg, stream, with_compile)
    names = list(runs)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % max(len(names), 1)
        for name in names[k:] + names[:k]:
            per_round[name].append(cfg.tokens * steps / timed_steps(stream, runs[name], steps))
    rep.extra["tokens_per_s_rounds"] = per_round
    for name in names:
        tps = statistics.median(per_round[name])
        rep.row(f"step: {name}", round(tps), "tok/s", step_ms=round(cfg.tokens / tps * 1e3, 2),
                first_loss=round(rep.extra["first_loss"][name], 6))
    for peer in PEERS:
        if OURS in per_round and peer in per_round:
            ratio = statistics.median(o / p for o, p in zip(per_round[OURS], per_round[peer]))
            rep.bar(f"GPT-2 step {OURS} vs {peer}", statistics.median(per_round[OURS]),
                    statistics.median(per_round[peer]), higher_is_better=True, bar=1.0, peer_name=peer, ratio=ratio)
        else:
            why = rep.missing.get(OURS if OURS not in per_round else peer, "not run")
            rep.notes.append(f"bar {OURS} vs {peer}: NOT JUDGED ({why})")
            print(f"BAR NOT JUDGED: {OURS} vs {peer}: {why}", flush=True)


def _free() -> None:
    import gc

    import torch
    gc.collect()
    torch.cuda.empty_cache()


def record_calls(model: Any) -> list[tuple[str, tuple]]:
    """(op name, arguments) of every op call of one eager step."""
    calls: list[tuple[str, tuple]] = []
    real = model.ops

    def recorder(name: str, fn: Callable) -> Callable:
        def call(rt: Any, *args: Any) -> Any:
            calls.append((name, args))
            return fn(rt, *args)
        return call
    model.ops = {n: recorder(n, f) for n, f in real.items()}
    model.step(1)
    model.ops = real
    return calls


def label(name: str, args: tuple) -> str:
    """A row's op and shapes: the GEMM's N, C and OC for the linear layer, else the largest array's shape."""
    if name.startswith("matmul_"):
        x, w, b = (args[1], args[2], args[3]) if name == "matmul_forward" else (args[4], args[5], args[2])
        return f"{name} N{x.shape[0]} C{x.shape[1]} OC{w.shape[0]}{'' if b is not None else ' (no bias)'}"
    arrays = [a.shape for a in args if hasattr(a, "shape")]
    return f"{name} {'x'.join(map(str, max(arrays, key=lambda s: (math.prod(s), len(s)))))}"


DW_TEXT = {"stored": "dY and X as stored (TN)", "xt": "X^T written first", "tt": "dY^T and X^T written (NT)"}


def alternatives(name: str, args: tuple, sms: int) -> list[tuple[str, str, str, Callable[[Any, tuple], None], str]]:
    """The DSL forms the per-op table times beside the step's own for one op and its arguments, each
    (tag, row suffix, printed label, call(rt, args), note): dX and dW in the layouts the step does not
    use (kernels_dsl.DX_LAYOUT, DW_LAYOUT), the forward with the output tile gemm_tile did not pick."""
    if name == "matmul_backward":
        dx = "nn" if kernels_dsl.DX_LAYOUT == "wt" else "wt"
        alts = [(f"dsl dx {dx}", f"dX {dx}", f"  same, dX layout {dx!r}",
                 lambda rt, a: kernels_dsl.linear_backward(rt, *a, dx, kernels_dsl.DW_LAYOUT),
                 f"(not in the step: kernels_dsl.DX_LAYOUT = {kernels_dsl.DX_LAYOUT!r})")]
        for dw in kernels_dsl.DW_LAYOUTS:
            if dw != kernels_dsl.DW_LAYOUT:
                alts.append((f"dsl dw {dw}", f"dW {dw}", f"  same, dW {DW_TEXT[dw]}",
                             lambda rt, a, dw=dw: kernels_dsl.linear_backward(rt, *a, kernels_dsl.DX_LAYOUT, dw),
                             f"(not in the step: kernels_dsl.DW_LAYOUT = {kernels_dsl.DW_LAYOUT!r})"))
        return alts
    if name == "matmul_forward":
        out = args[0]
        step = kernels_dsl.gemm_tile(*out.shape, sms)
        other = (128, 128) if step == kernels_dsl.WIDE_TILE else kernels_dsl.WIDE_TILE
        text = "x".join(map(str, other))
        return [("dsl tile", f"tiles {text}", f"  same, output tiles {text}",
                 lambda rt, a: kernels_dsl.linear_forward(rt, *a, other),
                 f"(not in the step: kernels_dsl.gemm_tile gives {'x'.join(map(str, step))})")]
    return []


def per_op_table(rep: Report, cfg: Any, reps: int) -> None:
    model = build(cfg, ALL, simulate=False)
    model.set_batch(*batch(cfg, 0))
    rt = model.rt
    groups: dict[str, list] = defaultdict(list)           # label -> [name, args, calls a step]
    for name, args in record_calls(model):
        key = label(name, args)
        if key not in groups:
            groups[key] = [name, args, 0]
        groups[key][2] += 1
    fns: dict[str, Callable[[int], None]] = {}
    alts = {key: alternatives(name, args, rt.sm_count) for key, (name, args, _) in groups.items()}
    for key, (name, args, _) in groups.items():
        for side in ("cpp", "dsl"):
            fns[f"{key} [{side}]"] = (lambda i, f=registry.REGISTRY[name][side], a=args: f(rt, *a))
        for tag, _, _, call, _ in alts[key]:
            fns[f"{key} [{tag}]"] = (lambda i, f=call, a=args: f(rt, a))
    ms = time_interleaved(fns, reps=reps)
    total = {"cpp": 0.0, "dsl": 0.0}
    print(f"\nPer op, one step of {cfg.n_layer} layers (ms a call, median; calls a step; speed = C++ / DSL):")
    print(f"{'op and shapes':<46}{'calls':>6}{'C++ ms':>10}{'DSL ms':>10}{'speed':>8}  C++ side")
    for key, (name, _, count) in groups.items():
        cpp, dsl = ms[f"{key} [cpp]"], ms[f"{key} [dsl]"]
        total["cpp"] += cpp * count
        total["dsl"] += dsl * count
        print(f"{key[:45]:<46}{count:>6}{cpp:>10.4f}{dsl:>10.4f}{cpp / dsl:>7.2f}x  {registry.CPP_SIDE[name]}")
        rep.row(key, round(dsl, 4), "ms (DSL)", cpp_ms=round(cpp, 4), calls=count, speed=round(cpp / dsl, 3),
                cpp_side=registry.CPP_SIDE[name])
        for tag, suffix, text, _, note in alts[key]:
            alt = ms[f"{key} [{tag}]"]
            print(f"{text:<46}{'':>6}{'':>10}{alt:>10.4f}{cpp / alt:>7.2f}x")
            rep.row(f"{key}, {suffix}", round(alt, 4), "ms (DSL)", cpp_ms=round(cpp, 4), calls=count,
                    speed=round(cpp / alt, 3), cpp_side=note)
    print(f"{'sum over a step (isolated launches)':<46}{'':>6}{total['cpp']:>10.3f}{total['dsl']:>10.3f}"
          f"{total['cpp'] / total['dsl']:>7.2f}x")
    rep.row("sum over a step (isolated launches)", round(total["dsl"], 3), "ms (DSL)", cpp_ms=round(total["cpp"], 3),
            speed=round(total["cpp"] / total["dsl"], 3))


def per_op_path(json_path: str | None) -> str | None:
    if not json_path:
        return None
    p = Path(json_path)
    return str(p.with_name(p.stem + "_per_op" + p.suffix))


def main() -> int:
    args = parse()
    cfg = config(args.config)
    shape = f"{args.config}: L{cfg.n_layer} C{cfg.n_embd} B{cfg.batch_size} T{cfg.seq_len}"
    rep = Report(f"GPT-2 training step ({shape}): tokens/s, C++ vs DSL vs PyTorch")
    ops = Report(f"GPT-2 training step ({shape}): per op, C++ vs DSL")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    import torch
    torch.set_float32_matmul_precision("high")          # tf32 matmuls for every side and peer
    from dsl.tile.compile import tf32_transpose_enabled
    steps, rounds = (3, 3) if args.quick else (args.steps, args.rounds)
    t0 = time.perf_counter()
    stream = bridge.Stream()
    with bridge.use_stream(stream):
        step_variants(rep, cfg, steps, rounds, stream, not args.no_compile)
        rep.checkpoint(args.json)           # the per-op table takes a while: keep the step's bars if it dies
        _free()
        per_op_table(ops, cfg, reps=5 if args.quick else 20)
        _free()
    rep.notes.append(f"{rounds} interleaved rounds of {steps} steps; wall time {time.perf_counter() - t0:.0f} s")
    ops.notes.append(f"KB_TILE_TF32_TRANSPOSE {'on' if tf32_transpose_enabled() else 'off'} (the NN rows' GEMM loop)")
    ops.finish(per_op_path(args.json))
    rep.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
