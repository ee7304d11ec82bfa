"""Compile-time benchmark: cold compile to PTX and a disk-cache hit, each in a fresh process, for a SIMT
kernel (vecadd) and a tile kernel (row softmax); with a GPU also each kernel's first launch in a fresh
process with a warm cache.

    python benchmarks/compile_time.py [--repeat 5] [--arch sm_90] [--json PATH] [--quick]

Targets (docs/DESIGN §8): cold compile of a small kernel <= 150 ms (vecadd; the tile softmax's cold
compile is reported), fresh-process cache hit <= 5 ms and first launch with a warm cache <= 5 ms for
SIMT and tile kernels alike. Each measurement runs in its own subprocess with its own empty (cold) or
pre-filled (hit) KB_CACHE_DIR; the time is that of `kernel.compile(...)` or of the first `kernel(...)`
call plus its synchronisation (import of the dsl package and CUDA context creation are not counted).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

KERNEL_SRC = '''
from dsl import simt, tile, f32

@simt.kernel
def vecadd(a: simt.Array[f32, 1], b: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]

@tile.kernel
def softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-float("inf"))
    e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
    out.store(e / tile.sum(e, axis=1, keepdims=True))
'''

CHILD = textwrap.dedent('''
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    sys.path.insert(0, {kdir!r})
    import bench_vecadd_kernel as k
    t1 = time.perf_counter()
    a = np.zeros(1000, np.float32)
    t2 = time.perf_counter()
    sig = k.vecadd.signature(a, a, a)          # front end: annotations -> IR signature
    t3 = time.perf_counter()
    from dsl.compiler import compile_kernel
    ck = compile_kernel(k.vecadd.pyfunc, sig, k.vecadd.options, {arch!r})
    t4 = time.perf_counter()
    assert ".entry vecadd" in ck.ptx
    print(json.dumps({{"import_s": t1 - t0, "signature_s": t3 - t2, "compile_s": t4 - t3,
                      "cache": ck.metadata.get("cache"), "stages": ck.metadata.get("stage_seconds", {{}})}}))
''')


TILE_CHILD = textwrap.dedent('''
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    sys.path.insert(0, {kdir!r})
    import bench_vecadd_kernel as k
    from dsl import tile
    t1 = time.perf_counter()
    x = np.zeros((64, 1000), np.float32)
    args = (x, tile.partition(np.zeros((64, 1000), np.float32), (1, 1024)))
    t3 = time.perf_counter()
    ck = k.softmax.compile(args, {arch!r})
    t4 = time.perf_counter()
    assert ".entry softmax" in ck.ptx
    print(json.dumps({{"import_s": t1 - t0, "signature_s": 0.0, "compile_s": t4 - t3,
                      "cache": ck.metadata.get("cache"), "stages": ck.metadata.get("stage_seconds", {{}})}}))
''')

# Both launch children start alike: a fresh process, the kernels' module, a context and the arrays.
_LAUNCH_SETUP = textwrap.dedent('''
    import json, sys, time
    import numpy as np
    sys.path.insert(0, {kdir!r})
    import bridge
    from dsl import tile
    import bench_vecadd_kernel as k
    n = 64 * 1000
    x = bridge.from_host(np.random.rand(64, 1000).astype(np.float32))
    y = bridge.empty((64, 1000), "float32")
    a, c = x.reshape(n), y.reshape(n)
    bridge.synchronize()                       # context, allocations: not part of the first launch
''')

LAUNCH_CHILD = _LAUNCH_SETUP + textwrap.dedent('''
    t0 = time.perf_counter()
    if {which!r} == "simt":
        k.vecadd(a, a, c)
    else:
        k.softmax(x, tile.partition(y, (1, 1024)))
    bridge.synchronize()
    dt = time.perf_counter() - t0
    ref = 2 * x.to_host().reshape(n) if {which!r} == "simt" else None
    if ref is not None:
        assert np.allclose(c.to_host(), ref)
    else:
        assert np.allclose(y.to_host().sum(axis=1), 1.0, rtol=1e-4)
    print(json.dumps({{"launch_s": dt}}))
''')


# The same first launch split into its steps (a separate child: the step timers would perturb the
# first-launch figure): the disk-cache hit, the module load (kernel_from_ptx: cuModuleLoadData of the
# PTX), the kernel's first call (dispatcher miss -> its Launcher, the fault-record pool of a bounds-
# checked kernel, the launch) and the synchronize.
STEPS_CHILD = _LAUNCH_SETUP + textwrap.dedent('''
    dev = bridge.current_device()
    if {which!r} == "simt":
        kern, args = k.vecadd, (a, a, c)
        t0 = time.perf_counter()
        ck = kern.compile(*args, arch=dev.arch)
    else:
        kern, args = k.softmax, (x, tile.partition(y, (1, 1024)))
        t0 = time.perf_counter()
        ck = kern.compile(args, dev.arch)
    t1 = time.perf_counter()
    bridge.kernel_from_ptx(ck.ptx, ck.name, ck.contract_json, device=dev.ordinal)
    t2 = time.perf_counter()
    kern(*args)
    t3 = time.perf_counter()
    bridge.synchronize()
    t4 = time.perf_counter()
    print(json.dumps({{"compile (cache hit)": t1 - t0, "module load": t2 - t1, "first call": t3 - t2,
                      "synchronize": t4 - t3, "cache": ck.metadata.get("cache")}}))
''')


# tile.autotune's first call for a shape: every candidate compiled (KB_AUTOTUNE=0: compiled and pruned, none
# timed, so no GPU is needed) - the forward attention's seven S1024 D128 bf16 candidates for sm_90a, in one
# process (KB_AUTOTUNE_JOBS=1) or side by side in forked workers (the default; dsl/tile/parallel_compile.py)
TUNE_CHILD = textwrap.dedent('''
    import json, sys, time
    import numpy as np, ml_dtypes
    sys.path.insert(0, "examples")
    import flash_attention as FA
    from dsl import tile
    rows, d, seq = 4 * 16 * 1024, 128, 1024
    q = np.zeros((rows, d), ml_dtypes.bfloat16)
    out = np.zeros((rows, d), np.float32)
    tuned = tile.autotune(FA.flash_fwd, FA.tuned_configs(q, seq, False, 1, "sm_90a"))
    args = (q, q, q, out, seq, FA.launch_args(q, q, q, out, seq, False)[5])
    t0 = time.perf_counter()
    tuned.select(*args, arch="sm_90a")
    from dsl.tile.parallel_compile import jobs_setting
    print(json.dumps({{"tune_s": time.perf_counter() - t0, "candidates": len(tuned.configs),
                      "workers": jobs_setting(len(tuned.configs))}}))
''')


def autotune_compiles(tmp: str, pycache: str, repeat: int) -> dict[str, list[float]]:
    """The first tuned call's compiles in fresh processes with empty caches: one process, then workers."""
    out: dict[str, list] = {"1": [], "default": []}
    for r in range(repeat):                      # interleaved: the host's speed drifts
        for jobs in out:
            env = {"KB_AUTOTUNE": "0", "KB_AUTOTUNE_JOBS": "1" if jobs == "1" else ""}   # empty: the default
            out[jobs].append(run_child("", str(Path(tmp) / f"tune{jobs}_{r}"), "sm_90a", pycache, TUNE_CHILD,
                                       env=env))
    return out


def run_child(kdir: str, cache_dir: str, arch: str, pycache: str, child: str = CHILD, env: dict | None = None,
              **fmt) -> dict:
    """One fresh interpreter. Bytecode is cached (under `pycache`, not in the repo) as it is for an
    installed package, so module compilation is not counted as compile time."""
    env = dict(os.environ, KB_CACHE_DIR=cache_dir, KB_CACHE="1", PYTHONPATH=str(ROOT),
               PYTHONPYCACHEPREFIX=pycache, **(env or {}))
    env.pop("KB_DUMP", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", child.format(kdir=kdir, arch=arch, **fmt)], env=env,
                         capture_output=True, text=True, check=True, cwd=str(ROOT))
    return json.loads(out.stdout.strip().splitlines()[-1])


def first_launches(kdir: str, tmp: str, arch: str, pycache: str, repeat: int) -> dict[str, list[float]]:
    """First launch (call + synchronize) of each kernel in fresh processes sharing a warm cache."""
    import bridge
    out: dict[str, list[float]] = {"simt": [], "tile": []}
    if not bridge.gpu_available():
        return out
    cache = str(Path(tmp) / "launch_cache")
    for which in list(out):
        run_child(kdir, cache, arch, pycache, LAUNCH_CHILD, which=which)      # fills the caches
        for _ in range(repeat):
            out[which].append(run_child(kdir, cache, arch, pycache, LAUNCH_CHILD, which=which)["launch_s"])
        steps = [run_child(kdir, cache, arch, pycache, STEPS_CHILD, which=which) for _ in range(repeat)]
        for step in ("compile (cache hit)", "module load", "first call", "synchronize"):
            out[f"{which} first launch step: {step}"] = [x[step] for x in steps]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--json", help="write results here (rows and bars, as every benchmark)")
    ap.add_argument("--quick", action="store_true", help="3 repetitions")
    args = ap.parse_args()
    if args.quick:
        args.repeat = min(args.repeat, 3)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kb_bench_") as tmp:
        kdir = Path(tmp) / "k"
        kdir.mkdir()
        (kdir / "bench_vecadd_kernel.py").write_text(KERNEL_SRC)
        pycache = str(Path(tmp) / "pycache")
        run_child(str(kdir), str(Path(tmp) / "warmup"), args.arch, pycache)   # fills the bytecode cache
        run_child(str(kdir), str(Path(tmp) / "warmup"), args.arch, pycache, TILE_CHILD)
        cold, hit, tcold, thit = [], [], [], []
        for r in range(args.repeat):
            cache = str(Path(tmp) / f"cache{r}")
            for child, c_runs, h_runs in ((CHILD, cold, hit), (TILE_CHILD, tcold, thit)):
                c = run_child(str(kdir), cache, args.arch, pycache, child)
                h = run_child(str(kdir), cache, args.arch, pycache, child)
                assert c["cache"] == "miss" and h["cache"] == "disk", (c, h)
                c_runs.append(c)
                h_runs.append(h)
        launches = first_launches(str(kdir), tmp, args.arch, pycache, args.repeat)
        tunes = autotune_compiles(tmp, pycache, min(args.repeat, 2))
    for name, runs, target in (("cold compile (fresh process)", cold, 0.150),
                               ("disk-cache hit (fresh process)", hit, 0.005),
                               ("tile softmax: cold compile (fresh process)", tcold, None),
                               ("tile softmax: disk-cache hit (fresh process)", thit, 0.005)):
        times = [x["compile_s"] for x in runs]
        rows.append((name, statistics.median(times), min(times), target,
                     statistics.median(x["import_s"] for x in runs)))
    print(f"{'measurement':34} {'median ms':>10} {'min ms':>8} {'target ms':>10} {'ok':>4} "
          f"{'import dsl ms':>14} {'+signature ms':>14}")
    for (name, med, lo, target, imp), runs in zip(rows, (cold, hit, tcold, thit)):
        sig = statistics.median(x["signature_s"] for x in runs)
        tgt = f"{target * 1e3:10.0f}" if target else f"{'-':>10}"
        ok = ("yes" if med <= target else "NO") if target else "-"
        print(f"{name:34} {med * 1e3:10.1f} {lo * 1e3:8.1f} {tgt} {ok:>4} {imp * 1e3:14.1f} {sig * 1e3:14.1f}")
    for which, times in launches.items():
        if times and which in ("simt", "tile"):
            name = f"{which} first launch (fresh process, warm cache)"
            rows.append((name, statistics.median(times), min(times), 0.005, 0.0))
            print(f"{name:34} {statistics.median(times) * 1e3:10.1f} {min(times) * 1e3:8.1f} {5:10.0f}")
    steps = {which: times for which, times in launches.items() if times and which not in ("simt", "tile")}
    for name, times in steps.items():
        print(f"{name:34} {statistics.median(times) * 1e3:10.2f} {min(times) * 1e3:8.2f}")
    print("times are dsl.compiler.compile_kernel(...) in a fresh process, including its lazy imports; "
          "'+signature' is the front end's argument->signature step that kernel.compile() adds")
    stages = {k: statistics.median(x["stages"].get(k, 0) for x in cold) * 1e3 for k in cold[0]["stages"]}
    print("cold compile stages (median ms): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _common import Report
    rep = Report(f"compile time of a small kernel (vecadd to PTX, {args.arch}, fresh process)")
    for name, med, lo, target, imp in rows:
        rep.row(name, med * 1e3, "ms", min_ms=round(lo * 1e3, 2), target_ms=target * 1e3 if target else None)
        if target:
            rep.bar(name, med * 1e3, target * 1e3, higher_is_better=False, bar=1.0,
                    peer_name=f"{target * 1e3:g} ms target")
    for name, times in steps.items():      # where the first launch goes (no bar: the sum is the bar's)
        rep.row(name, statistics.median(times) * 1e3, "ms", min_ms=round(min(times) * 1e3, 3))
    if not launches["simt"]:
        rep.notes.append("no GPU: first-launch rows not measured")
    for k, v in stages.items():
        rep.row(f"cold compile stage: {k}", v, "ms")
    one = statistics.median(x["tune_s"] for x in tunes["1"])
    side = statistics.median(x["tune_s"] for x in tunes["default"])
    n, workers = tunes["default"][0]["candidates"], tunes["default"][0]["workers"]
    print(f"tile.autotune first call, {n} attention candidates compiled: one process {one:.1f} s, "
          f"{workers} workers {side:.1f} s ({one / side:.2f}x)")
    rep.row(f"tile.autotune first call ({n} attention candidates): compiled in one process", one * 1e3, "ms")
    rep.row(f"tile.autotune first call ({n} attention candidates): side by side, {workers} workers", side * 1e3,
            "ms", speedup=round(one / side, 2))
    rep.finish(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
