"""SIMT parity: the same six kernels written in the DSL (interop_tests/kernels_zoo.py) and in CUDA C++
(compiled here by nvcc -O3 --fmad=false, so both round alike), same algorithm and launch configuration,
both launched through the bridge, timed in one process.

Kernels: vecadd, saxpy, 5-point stencil, transpose (32x33 shared tiles), block reduction (warp
butterflies + shared + one atomic per block), histogram (global atomics, 256 bins). Each output is
checked against a NumPy float64 reference before timing; device events around one launch, L2 flushed
before each, DSL and C++ interleaved, median of repeats. Bar (DESIGN §7): DSL >= 0.98x C++ per kernel.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from _bench_kit import check_close, exit_code, gpu_or_note, input_sets, nvcc_module, time_interleaved
from _common import Report, parse_args

from interop_tests import kernels_zoo as Z

CPP_SRC = r"""
#include "kernelbridge/kernel_contract.cuh"
#define FULL 0xffffffffu

extern "C" __global__ void __launch_bounds__(256)
vecadd(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}
KB_CONTRACT(vecadd, KB_BLOCK(256),
            KB_ARGS(KB_ARRAY(a, f32, 1, read), KB_ARRAY(b, f32, 1, read), KB_ARRAY(out, f32, 1, write),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(a) == n", "len(b) == n", "len(out) == n"), KB_GRID_FROM(out));

extern "C" __global__ void __launch_bounds__(128)
saxpy(float alpha, const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = alpha * x[i] + y[i];
}
KB_CONTRACT(saxpy, KB_BLOCK(128),
            KB_ARGS(KB_SCALAR(alpha, f32), KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, read),
                    KB_ARRAY(out, f32, 1, write), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n", "len(out) == n"), KB_GRID_FROM(out));

extern "C" __global__ void __launch_bounds__(256)
stencil5(const float* __restrict__ u, float* __restrict__ out, int rows, int cols) {
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows || c >= cols) return;
  const size_t k = static_cast<size_t>(r) * cols + c;
  if (r > 0 && r < rows - 1 && c > 0 && c < cols - 1)
    out[k] = 0.25f * (u[k - cols] + u[k + cols] + u[k - 1] + u[k + 1]) - u[k];
  else
    out[k] = u[k];
}
KB_CONTRACT(stencil5, KB_DOMAIN(2), KB_BLOCK(16, 16),
            KB_ARGS(KB_ARRAY(u, f32, 2, read), KB_ARRAY(out, f32, 2, write), KB_SCALAR(rows, i32),
                    KB_SCALAR(cols, i32)),
            KB_REQUIRES("u.shape == out.shape", "u.shape[0] == rows", "u.shape[1] == cols"), KB_GRID_FROM(out));

extern "C" __global__ void __launch_bounds__(256)
transpose(const float* __restrict__ a, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y, bx = blockIdx.x * 32, by = blockIdx.y * 32;
  for (int j = 0; j < 32; j += 8)
    if (by + ty + j < rows && bx + tx < cols) tile[ty + j][tx] = a[static_cast<size_t>(by + ty + j) * cols + bx + tx];
  __syncthreads();
  for (int j = 0; j < 32; j += 8)
    if (bx + ty + j < cols && by + tx < rows) out[static_cast<size_t>(bx + ty + j) * rows + by + tx] = tile[tx][ty + j];
}
KB_CONTRACT(transpose, KB_DOMAIN(2), KB_BLOCK(32, 8),
            KB_ARGS(KB_ARRAY(a, f32, 2, read), KB_ARRAY(out, f32, 2, write), KB_SCALAR(rows, i32),
                    KB_SCALAR(cols, i32)),
            KB_REQUIRES("a.shape[0] == rows", "a.shape[1] == cols", "out.shape[0] == cols", "out.shape[1] == rows"),
            KB_GRID_FROM(a, 1, 4));

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(FULL, v, m);
  return v;
}
extern "C" __global__ void __launch_bounds__(256)
block_sum(const float* __restrict__ a, float* __restrict__ total, int n) {
  __shared__ float partial[8];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? a[i] : 0.0f;
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32;
  if (lane == 0) partial[w] = v;
  __syncthreads();
  if (w == 0) {
    float s = lane < 8 ? partial[lane] : 0.0f;
    s = warp_sum(s);
    if (lane == 0) atomicAdd(total, s);
  }
}
KB_CONTRACT(block_sum, KB_BLOCK(256),
            KB_ARGS(KB_ARRAY(a, f32, 1, read), KB_ARRAY(total, f32, 1, readwrite), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(a) == n", "len(total) == 1"), KB_GRID_FROM(a));

extern "C" __global__ void __launch_bounds__(128)
histogram(const int* __restrict__ data, int* __restrict__ hist, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&hist[data[i]], 1);
}
KB_CONTRACT(histogram, KB_BLOCK(128),
            KB_ARGS(KB_ARRAY(data, i32, 1, read), KB_ARRAY(hist, i32, 1, readwrite), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(data) == n"), KB_GRID_FROM(data));
"""

BINS = 256


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Case:
    """One kernel: DSL and C++ launches on rotating device inputs, the outputs to check, the reference."""
    name: str
    dsl: Callable[[int], Any]
    cpp: Callable[[int], Any]
    outputs: dict[str, Any]                        # "DSL"/"C++" -> device output checked after one launch
    reference: np.ndarray                          # accumulating outputs start at zero: checked first
    tol: dict = field(default_factory=dict)        # check_close rtol/atol


def _dev(host_sets: list[tuple[np.ndarray, ...]]) -> list[tuple[Any, ...]]:
    import bridge
    return [tuple(bridge.from_host(h) for h in s) for s in host_sets]


def make_cases(rng: np.random.Generator, mod: Any) -> list[Case]:
    import bridge
    poison = lambda shape: bridge.full(shape, np.nan, "float32")  # noqa: E731
    cases = []

    n = (1 << 26) + 7
    k = input_sets(3 * n * 4)
    hs = [(rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)) for _ in range(k)]
    ds, o1, o2 = _dev(hs), poison((n,)), poison((n,))
    g = (cdiv(n, 256), 1, 1)
    dsl, cpp = Z.vecadd[g, (256, 1, 1)], mod.vecadd[g, (256, 1, 1)]
    cases.append(Case("vecadd", lambda i: dsl(*ds[i % k], o1), lambda i: cpp(*ds[i % k], o2, n),
                      {"DSL": o1, "C++": o2}, hs[0][0].astype(np.float64) + hs[0][1],
                      tol={"rtol": 1e-7, "atol": 1e-30}))          # one f32 rounding of the exact sum

    alpha = np.float32(1.7)
    ds2, p1, p2 = ds, poison((n,)), poison((n,))
    g = (cdiv(n, 128), 1, 1)
    dsa, cpa = Z.saxpy[g, (128, 1, 1)], mod.saxpy[g, (128, 1, 1)]
    cases.append(Case("saxpy", lambda i: dsa(alpha, *ds2[i % k], p1), lambda i: cpa(alpha, *ds2[i % k], p2, n),
                      {"DSL": p1, "C++": p2}, np.float64(alpha) * hs[0][0] + hs[0][1],
                      tol={"rtol": 1e-6, "atol": 1e-6}))

    rows, cols = 8191, 8190
    k3 = input_sets(2 * rows * cols * 4)
    hu = [(rng.standard_normal((rows, cols), dtype=np.float32),) for _ in range(k3)]
    du, s1, s2 = _dev(hu), poison((rows, cols)), poison((rows, cols))
    g = (cdiv(cols, 16), cdiv(rows, 16), 1)
    dss, css = Z.stencil5[g, (16, 16, 1)], mod.stencil5[g, (16, 16, 1)]
    u = hu[0][0].astype(np.float64)
    ref = u.copy()
    ref[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]) - u[1:-1, 1:-1]
    # rows/cols are reassigned for the transpose below: the C++ lambdas bind them now.
    cases.append(Case("stencil5 (2-D)", lambda i: dss(du[i % k3][0], s1),
                      lambda i, rows=rows, cols=cols: css(du[i % k3][0], s2, rows, cols), {"DSL": s1, "C++": s2}, ref,
                      tol={"rtol": 1e-5, "atol": 1e-5}))

    rows, cols = 8191, 8193
    k4 = input_sets(2 * rows * cols * 4)
    ht = [(rng.standard_normal((rows, cols), dtype=np.float32),) for _ in range(k4)]
    dt, t1, t2 = _dev(ht), poison((cols, rows)), poison((cols, rows))
    g = (cdiv(cols, 32), cdiv(rows, 32), 1)
    dtr, ctr = Z.transpose[g, (32, 8, 1)], mod.transpose[g, (32, 8, 1)]
    cases.append(Case("transpose (shared tiles)", lambda i: dtr(dt[i % k4][0], t1),
                      lambda i, rows=rows, cols=cols: ctr(dt[i % k4][0], t2, rows, cols), {"DSL": t1, "C++": t2},
                      ht[0][0].T.astype(np.float64)))

    k5 = input_sets(n * 4)
    hb = [(rng.standard_normal(n, dtype=np.float32),) for _ in range(k5)]
    db, b1, b2 = _dev(hb), bridge.zeros((1,), "float32"), bridge.zeros((1,), "float32")
    g = (cdiv(n, 256), 1, 1)
    dbs, cbs = Z.block_sum[g, (256, 1, 1)], mod.block_sum[g, (256, 1, 1)]
    x = hb[0][0].astype(np.float64)
    cases.append(Case("block reduction (sum)", lambda i: dbs(db[i % k5][0], b1),
                      lambda i: cbs(db[i % k5][0], b2, n), {"DSL": b1, "C++": b2}, np.array([x.sum()]),
                      tol={"atol": 1e-5 * float(np.abs(x).sum())}))

    hh = [(rng.integers(0, BINS, n).astype(np.int32),) for _ in range(k5)]
    dh, h1, h2 = _dev(hh), bridge.zeros((BINS,), "int32"), bridge.zeros((BINS,), "int32")
    g = (cdiv(n, 128), 1, 1)
    dhs, chs = Z.histogram[g, (128, 1, 1)], mod.histogram[g, (128, 1, 1)]
    cases.append(Case("histogram (256 bins, atomics)", lambda i: dhs(dh[i % k5][0], h1),
                      lambda i: chs(dh[i % k5][0], h2, n), {"DSL": h1, "C++": h2},
                      np.bincount(hh[0][0], minlength=BINS).astype(np.float64)))
    return cases


def main() -> int:
    args = parse_args(__doc__)
    rep = Report("SIMT parity: DSL vs CUDA C++ (nvcc -O3), same algorithm and launch config (ms)")
    if not gpu_or_note(rep):
        rep.finish(args.json)
        return 0
    import bridge
    failed: list[str] = []
    try:
        with bridge.use_stream(bridge.Stream()):
            mod = nvcc_module(CPP_SRC, "parity", extra=["--fmad=false"])
            cases = make_cases(np.random.default_rng(7), mod)
            for c in cases:
                fns = {"DSL": c.dsl, "C++": c.cpp}
                ok = True
                for who, fn in fns.items():
                    try:
                        fn(0)
                        check_close(f"{c.name} [{who}]", c.outputs[who].to_host(), c.reference, **c.tol)
                    except Exception as exc:  # noqa: BLE001 - reported; a wrong DSL result fails the run
                        ok = False
                        msg = f"{c.name} [{who}]: {type(exc).__name__}: {exc}"
                        failed.append(msg)
                        rep.row(f"{c.name} [{who}]", None, "ms", note=msg[:300])
                if not ok:
                    continue
                ms = time_interleaved(fns, reps=10 if args.quick else 30)
                rep.row(f"{c.name} [DSL]", ms["DSL"], "ms")
                rep.row(f"{c.name} [C++ nvcc -O3]", ms["C++"], "ms", dsl_over_cpp=round(ms["DSL"] / ms["C++"], 4))
                rep.bar(f"SIMT parity: {c.name}", ms["DSL"], ms["C++"], higher_is_better=False, bar=0.98,
                        peer_name="CUDA C++")
    finally:
        rep.finish(args.json)
    return exit_code(failed)


if __name__ == "__main__":
    sys.exit(main())
