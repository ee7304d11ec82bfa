"""A chain of 10 dependent small DSL kernels (y = a * x + b on 2^16, 2^18 and 2^20 float32, each step
reading the previous step's output) with and without programmatic dependent launch
(`@simt.kernel(pdl=True)`), one process, one stream.

With PDL each kernel calls `simt.pdl.launch_dependents()` first (or after its store, or not at all: three
placements, timed in the same rounds; the bar takes the best), so the next kernel's blocks are scheduled
while it runs and wait in `griddepcontrol.wait` (at their entry) only for its completion and memory
flush; without it each launch starts after the previous one has fully drained. Both chains run
the same kernel body (the plain one's `launch_dependents` has no dependent to release). The device
time of a whole chain is measured with events around it, after a spin kernel that keeps the GPU busy
while the host enqueues the chain (so host launch cost is not what is timed); the two variants alternate
round by round, medians of the rounds. Also under a CUDA graph (captured chains, replayed).
Bar (issue 32): chain without PDL / chain with PDL >= 1.15 (stream launches, median of per-round ratios)
for small kernels: 2^16 elements, 256 blocks of 256 threads, one wave on any recent GPU (the H200 holds
1056 such blocks), the decode-sized kernels PDL is for. The larger sizes are reported beside it: at
2^20 (4096 blocks, four waves on the H200) the next grid's waiting blocks can only take slots the
current grid frees, and the gain measured 1.139x (2026-12-04).
"""
from __future__ import annotations

import statistics
import sys

import numpy as np

from _bench_kit import check_close, gpu_or_note
from _common import Report, parse_args

from dsl import f32, i32, simt

SIZES = (1 << 16, 1 << 18, 1 << 20)
BAR_SIZE = 1 << 16
STEPS = 10
A, B = np.float32(1.0001), np.float32(0.5)


def _step(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    simt.pdl.launch_dependents()
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b


def _step_late(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b
    simt.pdl.launch_dependents()        # after this block's work: the next grid's blocks take free slots only


def _step_implicit(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b               # no trigger: the next grid is released as this one completes


step_pdl = simt.kernel(_step, block=256, pdl=True, requires=["len(x) == len(out)"])
step_pdl_late = simt.kernel(_step_late, block=256, pdl=True, requires=["len(x) == len(out)"])
step_pdl_implicit = simt.kernel(_step_implicit, block=256, pdl=True, requires=["len(x) == len(out)"])
step_plain = simt.kernel(_step, block=256, requires=["len(x) == len(out)"])
PDL_STEPS = {"pdl=True": step_pdl, "pdl=True, trigger after the store": step_pdl_late,
             "pdl=True, no trigger": step_pdl_implicit}


@simt.kernel(block=32)
def spin(out: simt.DisjointSlice[f32], iters: i32):
    """Busy work on one block (about a millisecond) so the host enqueues the chain before it starts."""
    with simt.unsafe():
        v = f32(simt.threadIdx.x)
        for _ in range(iters):
            v = v * f32(0.999999) + f32(1e-7)
        out[simt.threadIdx.x] = v


def reference(x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64)
    for _ in range(STEPS):
        y = A * y + B
    return y


def chain(step, bufs) -> None:
    for k in range(STEPS):
        step(bufs[k % 2], bufs[1 - k % 2], A, B)


def timed_rounds(runs: dict, reps: int, spin_iters: int) -> dict[str, list[float]]:
    """Device µs of each run (a callable enqueuing one chain), alternating, each after a spin kernel."""
    import bridge
    s = bridge.current_stream()
    sink = bridge.zeros((32,), "float32")
    for run in runs.values():               # warm: compile, first launches
        run()
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(reps):
        for name, run in runs.items():
            spin(sink, np.int32(spin_iters), grid=1)
            e0 = s.record()
            run()
            e1 = s.record()
            e1.synchronize()
            times[name].append(e0.elapsed_time(e1) * 1e3)
    return times


def main() -> int:
    args = parse_args(__doc__)
    rep = Report(f"PDL chain: {STEPS} dependent y = a*x + b kernels on 2^16-2^20 float32 (device µs per chain)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    dev = bridge.Device(0)
    if dev.cc < (9, 0):
        rep.notes.append(f"PDL needs sm_90; {dev.name} is {dev.arch}: both chains would launch alike")
    rng = np.random.default_rng(32)
    failed: list[str] = []
    try:
        with bridge.use_stream(bridge.Stream()):
            steps = {"plain": step_plain, **PDL_STEPS}
            runs: dict = {}
            for n in SIZES:
                x = rng.standard_normal(n).astype(np.float32)
                want = reference(x)
                bufs = {name: [bridge.from_host(x), bridge.zeros((n,), "float32")] for name in steps}
                for name, step in steps.items():
                    chain(step, bufs[name])
                    bridge.synchronize()
                    try:
                        check_close(f"chain {name} 2^{n.bit_length() - 1}", bufs[name][0].to_host(), want,
                                    rtol=1e-5, atol=1e-5)
                    except Exception as exc:  # noqa: BLE001 - a wrong result fails the run, untimed
                        failed.append(f"{name} 2^{n.bit_length() - 1}: {exc}")
                for name, step in steps.items():
                    runs[(n, "stream", name)] = (lambda st=step, b=bufs[name]: chain(st, b))
                    with bridge.capture(bridge.current_stream()) as g:
                        chain(step, bufs[name])
                    runs[(n, "graph", name)] = g.replay
            if failed:
                return 1
            times = timed_rounds(runs, reps=10 if args.quick else 30, spin_iters=200_000)
        med = {k: statistics.median(v) for k, v in times.items()}
        for (n, mode, name), us in med.items():
            rep.row(f"2^{n.bit_length() - 1}: chain of {STEPS}, {mode}, {name}", us, "us",
                    per_kernel_us=round(us / STEPS, 3))
        rep.extra["rounds_us"] = {f"2^{n.bit_length() - 1}, {mode}, {name}": v for (n, mode, name), v in times.items()}

        def gain(n: int, mode: str, name: str) -> float:
            return statistics.median(p / q for p, q in zip(times[(n, mode, "plain")], times[(n, mode, name)]))

        for n in SIZES:
            for mode in ("stream", "graph"):
                for name in PDL_STEPS:
                    rep.row(f"2^{n.bit_length() - 1}, {mode}: chain without PDL / with {name} (median of rounds)",
                            gain(n, mode, name), "x")
        # the bar: the best of the three trigger placements (each timed in the same rounds), as a user
        # would pick where to call launch_dependents
        best = max(PDL_STEPS, key=lambda name: gain(BAR_SIZE, "stream", name))
        rep.bar(f"PDL chain of 10 small kernels (2^16, stream launches): without / with {best}",
                med[(BAR_SIZE, "stream", best)], med[(BAR_SIZE, "stream", "plain")], higher_is_better=False,
                bar=1.15, peer_name="the same chain without PDL", ratio=gain(BAR_SIZE, "stream", best))
    finally:
        rep.finish(args.json)
        if failed:
            print("FAILED (wrong results, not timed):\n  " + "\n  ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
