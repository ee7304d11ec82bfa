"""Shared helpers for the benchmarks: timing, peers that may be missing, and the JSON/table report.

Every benchmark measures ours and the peers in ONE process and run, and reports absolute values and
ratios; `bars` entries are what scripts/gpu_check.py turns into PASS/FAIL lines.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Callable


def parse_args(doc: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--json", help="write results here")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    return ap.parse_args()


def host_us(fn: Callable[[], object], n: int = 2000, warm: int = 200, reps: int = 5) -> float:
    """Median over `reps` of the mean host time (µs) of `n` back-to-back calls."""
    for _ in range(warm):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        ts.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(ts)


def device_ms(fn: Callable[[], object], reps: int = 20, warm: int = 3, rotate: int = 1) -> float:
    """Median device time (ms) of fn measured with CUDA events from the bridge runtime.

    `fn` receives the repetition index when rotate > 1, so it can rotate inputs between calls.
    """
    import bridge
    s = bridge.current_stream()
    call = (lambda i: fn(i)) if rotate > 1 else (lambda i: fn())
    for i in range(warm):
        call(i)
    times = []
    for i in range(reps):
        e0 = s.record()
        call(i)
        e1 = s.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    return statistics.median(times)


def try_import(name: str, why: dict[str, str]):
    """Import a peer; on failure record why (a missing peer is reported, never dropped silently)."""
    try:
        if name == "numba.cuda":
            import numpy as np
            if not hasattr(np, "row_stack"):   # numba-cuda in the GPU image predates numpy 2.5
                np.row_stack = np.vstack
        mod = __import__(name, fromlist=["_"])
        return mod
    except Exception as exc:  # noqa: BLE001 - any import failure means "missing peer"
        why[name] = f"{type(exc).__name__}: {exc}"[:200]
        return None


class Report:
    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[dict] = []
        self.bars: list[dict] = []
        self.missing: dict[str, str] = {}
        self.notes: list[str] = []
        self.extra: dict = {}          # more raw data for the JSON (e.g. every round of a timing)

    def row(self, name: str, value: float | None, unit: str, **extra) -> None:
        self.rows.append({"name": name, "value": value, "unit": unit, **extra})

    def bar(self, name: str, ours: float, peer: float, *, higher_is_better: bool, bar: float,
            peer_name: str, ratio: float | None = None) -> None:
        """`ratio`, when given, is a paired statistic (e.g. the median of per-round ratios) that judges
        the bar instead of the ratio of the two medians shown in the ours/peer columns."""
        if ratio is None:
            ratio = ours / peer if higher_is_better else peer / ours
        self.bars.append({"name": name, "ours": ours, "peer": peer, "ratio": ratio,
                          "bar": f">= {bar:g}x {peer_name}", "pass": ratio >= bar})

    def checkpoint(self, json_path: str | None) -> None:
        """Write what is measured so far (info "partial": true; finish() overwrites it): a benchmark
        killed from outside (the GPU check's deadline, a hung kernel) still leaves its finished cases."""
        if json_path:
            with open(json_path, "w") as f:
                json.dump(self._record(partial=True), f, indent=2)

    def _record(self, partial: bool = False) -> dict:
        import platform
        info: dict = {"title": self.title, "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        if partial:
            info["partial"] = True
        try:
            import bridge
            if bridge.gpu_available():
                d = bridge.Device(0)
                info["gpu"] = d.name
                info["cc"] = d.cc
        except Exception as exc:  # noqa: BLE001
            info["gpu_error"] = repr(exc)
        return {"info": info, "rows": self.rows, "bars": self.bars, "missing": self.missing,
                "notes": self.notes, **self.extra}

    def finish(self, json_path: str | None) -> None:
        out = self._record()
        info = out["info"]
        if json_path:
            with open(json_path, "w") as f:
                json.dump(out, f, indent=2)
        print(f"\n{self.title}  ({info.get('gpu', 'no GPU')}, {info['date']})")
        for r in self.rows:
            v = "missing" if r["value"] is None else f"{r['value']:.4g}"
            extra = "  ".join(f"{k}={val}" for k, val in r.items() if k not in ("name", "value", "unit"))
            print(f"  {r['name']:<48}{v:>12} {r['unit']:<8}{extra}")
        for name, why in self.missing.items():
            print(f"  missing peer {name}: {why}")
        for b in self.bars:
            print(f"  BAR {b['name']:<44} ratio {b['ratio']:.3f} ({b['bar']}) {'PASS' if b['pass'] else 'FAIL'}")
        sys.stdout.flush()
