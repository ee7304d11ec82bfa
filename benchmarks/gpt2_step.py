"""A whole GPT-2 training step (examples/gpt2, issue 30): tokens/s with every op on its DSL side
(--dsl all) and on its C++ side (--dsl none: cpp/kernels/llm + cuBLAS + SDPA's kernels), eager and
replayed as a CUDA graph (--graph: forward, backward and clipping in the graph, AdamW one launch
after it), against the same model in plain PyTorch (f32, tf32 matmuls, fused SDPA), eager and under
torch.compile; then a per-op table, C++ vs DSL.

Default shape: GPT-2 small (124M), B8 x T1024, one process. Each variant's first step is checked
against the PyTorch model's first loss (f32, same weights and batch) before it is timed. Timing: one
warm step (compiles, loads, fills the graph's memory pool; then the capture), then CUDA events around
`--steps` back-to-back steps on one batch (no host read between them), tokens/s = B*T*steps / time.

The per-op table: every call of one eager step is recorded (op, arguments); calls with the same op
and shapes are one row, timed on both sides on the step's own buffers (L2 flushed before each
launch, sides interleaved, median), with the calls a step makes and the step's total per side: where
the DSL is slower shows (e.g. the f32 GEMMs whose layout runs on mma.sync, docs/tile.md).

    python benchmarks/gpt2_step.py [--config small] [--steps 10] [--quick] [--json out.json]
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from typing import Any, Callable

from _bench_kit import gpu_or_note, time_interleaved
from _common import Report

from examples.gpt2 import registry
from examples.gpt2.config import config
from examples.gpt2.model import batch, init_params
from examples.gpt2.train import build, capture, torch_pool

LOSS_RTOL = 2e-3        # first-step loss of a variant vs the PyTorch f32 model (examples/gpt2/__main__.py)
ALL, NONE = frozenset(registry.NAMES), frozenset()


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="small")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer steps and repetitions")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile peer")
    return ap.parse_args()


def timed_steps(stream: Any, run_step: Callable[[int], None], steps: int) -> float:
    """Seconds of `steps` back-to-back steps (device events on the stream)."""
    stream.synchronize()
    e0 = stream.record()
    for t in range(steps):
        run_step(t)
    e1 = stream.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 1e3


def ours(cfg: Any, dsl: frozenset[str], graph: bool, steps: int, stream: Any) -> tuple[float, float]:
    """(first-step loss, seconds for `steps` steps) of the example's step."""
    import torch
    model = build(cfg, dsl, simulate=False)
    model.set_batch(*batch(cfg, 0))
    pool = torch.cuda.MemPool() if graph else None
    with torch_pool(pool):
        model.step(1)
    loss = model.loss()
    if graph:
        g = capture(model, stream, pool)

        def run(t: int) -> None:
            g.replay()
            model.update(t + 2)
    else:
        def run(t: int) -> None:
            model.step(t + 2)
    return loss, timed_steps(stream, run, steps)


def torch_peer(cfg: Any, compiled: bool, steps: int, stream: Any) -> tuple[float, float]:
    """(first-step loss, seconds) of the plain PyTorch model in f32 (eager or torch.compile)."""
    import torch

    from examples.gpt2.reference import ReferenceGPT2
    model = ReferenceGPT2(cfg).cuda()
    model.load_flat(init_params(cfg))
    fwd = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                            weight_decay=cfg.weight_decay, fused=True)
    inputs, targets = (torch.from_numpy(a).long().cuda() for a in batch(cfg, 0))

    def run(t: int) -> Any:
        loss = fwd(inputs, targets)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        return loss

    first = float(run(0).detach())
    for t in range(2 if compiled else 0):        # compile the steady-state graphs before timing
        run(t)
    return first, timed_steps(stream, run, steps)


def step_variants(rep: Report, cfg: Any, steps: int, stream: Any, with_compile: bool) -> None:
    tokens = cfg.tokens * steps
    results: dict[str, float] = {}
    peers = [("PyTorch eager", lambda: torch_peer(cfg, False, steps, stream))]
    if with_compile:
        peers.append(("PyTorch torch.compile", lambda: torch_peer(cfg, True, steps, stream)))
    runs = peers + [(f"--dsl {n}{' --graph' if g else ''}", (lambda d=d, g=g: ours(cfg, d, g, steps, stream)))
                    for n, d in (("all", ALL), ("none", NONE)) for g in (False, True)]
    ref_loss = None
    for name, fn in runs:
        try:
            loss, seconds = fn()
            if ref_loss is None:
                ref_loss = loss
            elif abs(loss / ref_loss - 1) > LOSS_RTOL:
                raise AssertionError(f"first-step loss {loss:.6f} vs PyTorch {ref_loss:.6f}; not timing it")
            results[name] = tokens / seconds
            rep.row(f"{name} tokens/s", round(results[name]), "tok/s", step_ms=round(seconds / steps * 1e3, 2),
                    first_loss=round(loss, 6))
        except Exception as exc:  # noqa: BLE001 - reported, the other variants still run
            rep.row(f"{name} tokens/s", None, "tok/s", note=f"failed: {type(exc).__name__}: {str(exc)[:300]}")
        _free()
    best = results.get("--dsl all --graph")
    for peer in ("--dsl none --graph", "PyTorch torch.compile"):
        if best and results.get(peer):
            rep.bar(f"GPT-2 step --dsl all --graph vs {peer}", best, results[peer], higher_is_better=True, bar=1.0,
                    peer_name=peer)


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


def _shape(a: Any) -> str:
    return "x".join(map(str, a.shape)) if hasattr(a, "shape") else ("-" if a is None else "")


def per_op_table(rep: Report, cfg: Any, reps: int) -> None:
    model = build(cfg, ALL, simulate=False)
    model.set_batch(*batch(cfg, 0))
    rt = model.rt
    groups: dict[str, list] = defaultdict(list)           # "op shapes" -> [name, args, calls a step]
    for name, args in record_calls(model):
        key = f"{name} {' '.join(s for s in map(_shape, args) if s)}"
        if key not in groups:
            groups[key] = [name, args, 0]
        groups[key][2] += 1
    fns: dict[str, Callable[[int], None]] = {}
    for key, (name, args, _) in groups.items():
        for side, label in (("cpp", "C++"), ("dsl", "DSL")):
            fns[f"{key} [{label}]"] = (lambda i, f=registry.REGISTRY[name][side], a=args: f(rt, *a))
    ms = time_interleaved(fns, reps=reps)
    total = {"C++": 0.0, "DSL": 0.0}
    print(f"\nPer op, one step of {cfg.n_layer} layers (ms a call; calls a step):")
    print(f"{'op and shapes':<64}{'calls':>6}{'C++ ms':>10}{'DSL ms':>10}{'DSL speed':>11}")
    for key, (name, _, count) in groups.items():
        cpp, dsl = ms[f"{key} [C++]"], ms[f"{key} [DSL]"]
        total["C++"] += cpp * count
        total["DSL"] += dsl * count
        print(f"{key[:63]:<64}{count:>6}{cpp:>10.4f}{dsl:>10.4f}{cpp / dsl:>10.3f}x")
        rep.row(f"{key} C++", cpp, "ms", calls=count)
        rep.row(f"{key} DSL", dsl, "ms", calls=count, speed=round(cpp / dsl, 3), cpp_side=registry.CPP_SIDE[name])
    print(f"{'sum over a step (isolated launches)':<64}{'':>6}{total['C++']:>10.3f}{total['DSL']:>10.3f}"
          f"{total['C++'] / total['DSL']:>10.3f}x")
    rep.row("per-op sum over a step C++", total["C++"], "ms")
    rep.row("per-op sum over a step DSL", total["DSL"], "ms")


def main() -> int:
    args = parse()
    cfg = config(args.config)
    rep = Report(f"GPT-2 training step ({args.config}: L{cfg.n_layer} C{cfg.n_embd} B{cfg.batch_size} "
                 f"T{cfg.seq_len}), C++ vs DSL")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    import torch
    torch.set_float32_matmul_precision("high")          # tf32 matmuls for every side and peer
    steps = 3 if args.quick else args.steps
    t0 = time.perf_counter()
    stream = bridge.Stream()
    with bridge.use_stream(stream):
        step_variants(rep, cfg, steps, stream, not args.no_compile)
        per_op_table(rep, cfg, reps=5 if args.quick else 20)
        _free()
    rep.notes.append(f"wall time {time.perf_counter() - t0:.0f} s")
    rep.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
