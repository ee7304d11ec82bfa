"""Where the host time of a validated launch goes: the same 3-array + 1-scalar vecadd, taken apart,
per producer (bridge arrays, CuPy arrays, torch tensors) and per argument, in interleaved rounds.

Rows (host µs per call, median over rounds):
- floors: a pybind11 no-op call, and a plain C (fastcall) call with 4 arguments;
- per producer: the intake of ONE array (`_native.intake_view`: the per-argument pre-driver cost), a
  validated launch that stops before the driver (zero-size arrays: the derived grid is empty, nothing
  is launched — intake + validation + ordering of 3 arrays and a scalar), and the full launch, through
  the module kernel (`k(...)`, its fastcall) and the DSL SIMT and tile kernels;
- raw `cuLaunchKernel` through cuda.bindings.
"full - stops before the driver" is the driver call plus our post-launch work; "stops before the
driver - fastcall floor" is intake + validation + ordering. No bars: this explains launch_overhead.py's
numbers, it does not judge them. The fast intake paths in use are listed in the notes.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from _common import Report, parse_args, try_import

CPP_SRC = r"""
#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
KB_CONTRACT(add, KB_BLOCK(32),
            KB_ARGS(KB_ARRAY(a, f32, 1, read), KB_ARRAY(b, f32, 1, read), KB_ARRAY(c, f32, 1, write),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(a) == n", "len(b) == n", "len(c) == n"), KB_GRID_FROM(c));
"""


def rounds(paths: dict, n: int, r: int, sync) -> dict[str, float]:
    for fn in paths.values():
        for _ in range(200):
            fn()
    sync()
    raw: dict[str, list[float]] = {k: [] for k in paths}
    names = list(paths)
    for i in range(r):
        for name in names[i % len(names):] + names[:i % len(names)]:
            fn = paths[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            raw[name].append((time.perf_counter() - t0) / n * 1e6)
            sync()
    return {k: statistics.median(v) for k, v in raw.items()}


def main() -> None:
    args = parse_args(__doc__)
    rep = Report("launch breakdown (host µs per call, tiny vecadd, 3 arrays + 1 scalar, per producer)")
    import bridge
    from bridge import _native
    if not bridge.gpu_available():
        rep.notes.append(f"no GPU: {bridge.gpu_unavailable_reason()}")
        rep.finish(args.json)
        return
    from _bench_kit import nvcc_module
    from launch_overhead import dsl_add, tile_add
    from dsl import tile
    n, r = (2000, 5) if args.quick else (5000, 9)
    k = nvcc_module(CPP_SRC, "breakdown").add
    paths: dict = {"floor: pybind11 no-op call": _native.current_stream_handle}
    four = (1, 2, 3, 4)
    paths["floor: fastcall with 4 arguments"] = lambda: _native.refcount_probe_fast(*four)

    producers = {"bridge arrays": lambda m: bridge.from_host(np.ones(m, np.float32))}
    cp = try_import("cupy", rep.missing)
    if cp is not None:
        producers["CuPy arrays"] = lambda m: cp.ones(m, cp.float32)
    torch = try_import("torch", rep.missing)
    if torch is not None:
        producers["torch tensors"] = lambda m: torch.ones(m, device="cuda")
    keep = []
    for label, make in producers.items():
        full = [make(1) for _ in range(3)]
        empty = [make(0) for _ in range(3)]
        part = tile.partition(full[2], (32,))
        keep += [full, empty, part]
        k(*full, 1)
        k(*empty, 0)
        dsl_add(*full, 1)
        tile_add(full[0], full[1], part)
        paths[f"{label}: intake of one array"] = (lambda x: lambda: _native.intake_view(x))(full[0])
        paths[f"{label}: module k(...), stops before the driver"] = (lambda e: lambda: k(*e, 0))(empty)
        paths[f"{label}: module k(...), full launch"] = (lambda f: lambda: k(*f, 1))(full)
        paths[f"{label}: DSL simt k(...), full launch"] = (lambda f: lambda: dsl_add(*f, 1))(full)
        paths[f"{label}: DSL tile k(...), full launch"] = (lambda f, p: lambda: tile_add(f[0], f[1], p))(full, part)
    bridge.synchronize()

    from cuda.bindings import driver as drv
    import ctypes
    xs = [bridge.from_host(np.ones(1, np.float32)) for _ in range(3)]
    func = drv.CUfunction(int(k.handle))
    params = (tuple(x.ptr for x in xs) + (1,), (ctypes.c_void_p,) * 3 + (ctypes.c_int,))

    def raw():
        err, = drv.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, 0, params, 0)
        if int(err):
            raise RuntimeError(f"cuLaunchKernel: {err}")
    raw()
    paths["cuda.bindings cuLaunchKernel (no validation)"] = raw
    med = rounds(paths, n, r, bridge.synchronize)
    for name, v in med.items():
        rep.row(name, v, "us")
    for name, (state, how) in _native.fast_intake_status().items():
        rep.notes.append(f"fast intake {name}: {state} ({how})")
    rep.finish(args.json)


if __name__ == "__main__":
    main()
