"""Launch features of DSL kernels: a cooperative grid (grid-wide barrier), a thread-block cluster
(distributed shared memory) and a chain of programmatic dependent launches (PDL).

    python examples/launch_features.py [--n 1000000] [--sim]

Runs on the GPU when there is one of sm_90 or newer (clusters and PDL are Hopper features), else on the
CPU simulator (`--sim` asks for it), and says which. Every result is checked against NumPy float64.
  1. two_phase_sum: every block sums its share into `partial`, `simt.grid.sync()`, then block 0 adds the
     partial sums: one launch instead of two (the grid must fit on the GPU at once: the launch contract's
     `cooperative` field makes the validator refuse a larger grid).
  2. neighbour_sums: blocks in clusters of 2; each adds its neighbour's block sum, read straight from
     the neighbour's shared memory (`simt.cluster.map_shared`) between two `simt.cluster.sync()`.
  3. a chain of 10 dependent `y = a * x + b` steps with `pdl=True`: each kernel's blocks start while
     its predecessor finishes and wait for its results in `griddepcontrol.wait` (benchmarks/pdl_chain.py
     times it against the same chain without PDL).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import bridge
from dsl import f32, simt

BLOCK = 256


@simt.kernel(block=BLOCK, cooperative=True)
def two_phase_sum(x: simt.Array[f32], partial: simt.DisjointSlice[f32], total: simt.DisjointSlice[f32]):
    with simt.unsafe():
        s = simt.shared.array(BLOCK, f32)
        t, b = simt.threadIdx.x, simt.blockIdx.x
        acc = f32(0)
        i = b * BLOCK + t
        while i < len(x):                       # a grid-stride loop: the grid is what fits on the GPU
            acc += x[i]
            i += BLOCK * simt.gridDim.x
        s[t] = acc
        simt.sync_threads()
        k = BLOCK // 2
        while k > 0:
            if t < k:
                s[t] = s[t] + s[t + k]
            simt.sync_threads()
            k = k // 2
        if t == 0:
            partial[b] = s[0]
        simt.grid.sync()                        # every block's partial sum is written and visible
        if b == 0 and t == 0:
            sum_ = f32(0)
            for j in range(simt.gridDim.x):
                sum_ += partial[j]
            total[0] = sum_


@simt.kernel(block=BLOCK, cluster=(2, 1, 1))
def neighbour_sums(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        s = simt.shared.array(BLOCK, f32)
        t, b = simt.threadIdx.x, simt.blockIdx.x
        i = b * BLOCK + t
        s[t] = x[i] if i < len(x) else f32(0)
        simt.sync_threads()
        k = BLOCK // 2
        while k > 0:
            if t < k:
                s[t] = s[t] + s[t + k]
            simt.sync_threads()
            k = k // 2
        simt.cluster.sync()                     # both blocks' sums are in their shared memory
        peer = simt.cluster.map_shared(s, (simt.cluster.rank() + 1) % simt.cluster.size())
        theirs = peer[0]
        simt.cluster.sync()                     # neither block exits while the other still reads it
        if t == 0:
            out[b] = s[0] + theirs


@simt.kernel(block=BLOCK, pdl=True, requires=["len(x) == len(out)"])
def axpb(x: simt.Array[f32], out: simt.DisjointSlice[f32], a: f32, b: f32):
    simt.pdl.launch_dependents()                # the next kernel's blocks may start now
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b                       # read after the wait the compiler put at the entry


def on_gpu(force_sim: bool) -> tuple[bool, str]:
    if force_sim:
        return False, "the CPU simulator (--sim)"
    if not bridge.gpu_available():
        return False, f"the CPU simulator (no GPU: {bridge.gpu_unavailable_reason()})"
    dev = bridge.Device(0)
    if dev.cc < (9, 0):
        return False, f"the CPU simulator ({dev.name} is {dev.arch}; clusters and PDL need sm_90)"
    return True, f"the GPU ({dev.name}, {dev.arch}, {dev.sm_count} SMs)"


def run(kernel, gpu: bool, *args, grid=None):
    """Launch on the GPU (device arrays in, host results out) or simulate on NumPy arrays."""
    if not gpu:
        kernel.simulate(*args, grid=grid)
        return args
    dev = [bridge.from_host(a) if isinstance(a, np.ndarray) else a for a in args]
    kernel(*dev, grid=grid) if grid is not None else kernel(*dev)
    bridge.synchronize()
    return [d.to_host() if isinstance(a, np.ndarray) else d for a, d in zip(args, dev)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000, help="elements (default 1000000)")
    ap.add_argument("--sim", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    gpu, where = on_gpu(args.sim)
    n = args.n if gpu else min(args.n, 50_000)
    print(f"running on {where}, n = {n}")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(n).astype(np.float32)
    ok = True

    grid = 2 * bridge.Device(0).sm_count if gpu else 8
    _, partial, total = run(two_phase_sum, gpu, x, np.zeros(grid, np.float32), np.zeros(1, np.float32), grid=grid)
    want = x.astype(np.float64).sum()
    err = abs(float(total[0]) - want)
    ok &= err <= 1e-4 * np.abs(x).sum()
    print(f"1. cooperative two-phase sum over {grid} blocks: {total[0]:.4f} (NumPy float64 {want:.4f}, "
          f"|error| {err:.2e})")

    blocks = 2 * (-(-n // (2 * BLOCK)))
    _, sums = run(neighbour_sums, gpu, x, np.zeros(blocks, np.float32), grid=blocks)
    own = np.zeros(blocks)
    own[:-(-n // BLOCK)] = np.add.reduceat(x.astype(np.float64), np.arange(0, n, BLOCK))
    ref = own + own.reshape(-1, 2)[:, ::-1].reshape(-1)
    err = float(np.abs(sums - ref).max())
    ok &= err <= 1e-3
    print(f"2. cluster of 2: {blocks} blocks each added its neighbour's sum from distributed shared memory, "
          f"max |error| {err:.2e}")

    a, b = np.float32(1.0001), np.float32(0.5)
    bufs = [x.copy(), np.zeros_like(x)] if not gpu else [bridge.from_host(x), bridge.zeros((n,), "float32")]
    for k in range(10):
        src, dst = bufs[k % 2], bufs[1 - k % 2]
        axpb.simulate(src, dst, a, b) if not gpu else axpb(src, dst, a, b)
    y = bufs[0] if not gpu else bufs[0].to_host()
    ref = x.astype(np.float64)
    for _ in range(10):
        ref = a * ref + b
    err = float(np.abs(y - ref).max())
    ok &= err <= 1e-4
    print(f"3. a PDL chain of 10 dependent kernels: max |error| {err:.2e}")
    print("all results match NumPy float64" if ok else "MISMATCH")
    print(f"ran on {where}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
