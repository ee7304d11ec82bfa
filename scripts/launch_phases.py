"""Where a launch's host time goes, phase by phase (contributors; needs a GPU and a phase-timer build).

Build the native extension with the launch-path phase timer compiled in, then run this script:

    python -m pip install --no-build-isolation --no-deps -e . -Ccmake.define.KB_LAUNCH_PHASES=ON
    python scripts/launch_phases.py

For each producer (bridge arrays, CuPy, torch) and call form (module kernel, DSL SIMT and tile kernels,
`k(...)` and `k[1, 32](...)`) it prints ns per launch: the total timed from Python, each phase between
the marks in cpp/native/launcher.hpp (intake, validate, device + pack, order before, driver launch,
record after, keep alive, return), and "outside" (the Python call itself). Phases are TSC ticks
converted with a steady-clock calibration; an ordinary build has no marks (launch_phases() is None).
Reinstall without the option afterwards: the marks cost a few ns each.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))


def main() -> int:
    import bridge
    from bridge import _native
    if not bridge.gpu_available():
        print(f"no GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    if _native.launch_phases() is None:
        print("this build of bridge._native has no phase timer: reinstall with -Ccmake.define.KB_LAUNCH_PHASES=ON")
        return 1
    from _bench_kit import nvcc_module
    from launch_breakdown import CPP_SRC
    from launch_overhead import dsl_add, tile_add

    from dsl import tile
    k = nvcc_module(CPP_SRC, "phases").add
    producers = {"bridge": lambda: bridge.from_host(np.ones(1, np.float32))}
    syncs = [bridge.synchronize]
    try:
        import cupy
        producers["cupy"] = lambda: cupy.ones(1, cupy.float32)
    except ImportError:
        pass
    try:
        import torch
        producers["torch"] = lambda: torch.ones(1, device="cuda")
        syncs.append(torch.cuda.synchronize)
    except ImportError:
        pass
    n = 20000
    rows = []
    for pname, make in producers.items():
        a, b, c = make(), make(), make()
        part = tile.partition(c, (32,))
        kc, dk = k[1, 32], dsl_add[1, 32]
        paths = {"module k[1,32]": lambda: kc(a, b, c, 1), "module k()": lambda: k(a, b, c, 1),
                 "dsl k()": lambda: dsl_add(a, b, c, 1), "dsl k[1,32]": lambda: dk(a, b, c, 1),
                 "tile k()": lambda: tile_add(a, b, part)}
        for name, fn in paths.items():
            for _ in range(1000):
                fn()
            for s in syncs:
                s()
            _native.reset_launch_phases()
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            total = (time.perf_counter() - t0) / n * 1e9
            for s in syncs:
                s()
            ph = _native.launch_phases()
            calls = max(ph.pop("calls"), 1)
            rows.append((f"{pname}: {name}", total, {p: v / calls for p, v in ph.items()}))
    names = list(rows[0][2])
    print(f"{'ns per launch':24s} {'total':>6s} " + " ".join(f"{p[:10]:>10s}" for p in names) + "  outside")
    for label, total, ph in rows:
        print(f"{label:24s} {total:6.0f} " + " ".join(f"{v:10.0f}" for v in ph.values()) +
              f"  {total - sum(ph.values()):7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
