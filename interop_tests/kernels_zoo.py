"""The kernel zoo: real @simt.kernel functions, each with a NumPy reference and an argument factory.

One module shared by the simulator tests (interop_tests/dsl_sim), the codegen tests (PTX + ptxas for
several archs) and the GPU tests, so the same kernels are checked everywhere.

Every case is a `ZooCase`: `make(rng, size) -> Launch` builds random inputs (sizes deliberately not
multiples of the block) plus the launch geometry; `reference(launch) -> {arg name: expected array}`
computes the expected outputs in NumPy from the inputs (call it before running the kernel: outputs are
written in place). `exact` says the result must agree bit for bit, in the simulator and on the GPU (the
backend never contracts a*b+c into an fma without fastmath, and + - * / sqrt are correctly rounded
on both); otherwise (float atomics, reassociated sums, transcendentals) `rtol`/`atol` apply.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

import dsl
from dsl import f32, i32, simt


@dataclass
class Launch:
    names: list[str]
    args: list
    grid: tuple[int, ...]
    block: tuple[int, ...]
    shared_mem: int = 0

    def arg(self, name: str):
        return self.args[self.names.index(name)]


@dataclass
class ZooCase:
    name: str
    kernel: object
    make: Callable[[np.random.Generator, int], Launch]
    reference: Callable[[Launch], dict[str, np.ndarray]]
    exact: bool = True
    rtol: float = 1e-5
    atol: float = 1e-6
    sizes: tuple[int, ...] = (1000, 4099)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def randf(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# ----------------------------------------------------------------------------------- vecadd, saxpy
@simt.kernel(block=(256, 1, 1))
def vecadd(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


def make_vecadd(rng, n):
    return Launch(["a", "b", "out"], [randf(rng, n), randf(rng, n), np.zeros(n, np.float32)],
                  (cdiv(n, 256),), (256,))


def ref_vecadd(L):
    return {"out": L.arg("a") + L.arg("b")}


@simt.kernel(block=(128, 1, 1))
def saxpy(alpha: f32, x: simt.Array[f32], y: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = alpha * x[i] + y[i]


def make_saxpy(rng, n):
    return Launch(["alpha", "x", "y", "out"], [np.float32(rng.standard_normal()), randf(rng, n),
                                               randf(rng, n), np.zeros(n, np.float32)],
                  (cdiv(n, 128),), (128,))


def ref_saxpy(L):
    return {"out": L.arg("alpha") * L.arg("x") + L.arg("y")}


@simt.kernel(block=(64, 1, 1), requires=["len(a) == len(out)", "len(b) == len(out)"])
def vecadd_chunked(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k] + b[k]


def make_vecadd_chunked(rng, n):
    return Launch(["a", "b", "out"], [randf(rng, n), randf(rng, n), np.zeros(n, np.float32)],
                  (cdiv(n, 64 * 4),), (64,))


# ---------------------------------------------------------------------------------- 2-D stencil
@simt.kernel(domain=2, block=(16, 16, 1), requires=["u.shape == out.shape"])
def stencil5(u: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    r = ij[0]
    c = ij[1]
    if r > 0 and r < u.shape[0] - 1 and c > 0 and c < u.shape[1] - 1:
        out[ij] = 0.25 * (u[r - 1, c] + u[r + 1, c] + u[r, c - 1] + u[r, c + 1]) - u[r, c]
    else:
        out[ij] = u[r, c]


def make_stencil5(rng, n):
    rows, cols = max(3, n // 53), 53
    return Launch(["u", "out"], [randf(rng, (rows, cols)), np.zeros((rows, cols), np.float32)],
                  (cdiv(cols, 16), cdiv(rows, 16)), (16, 16))


def ref_stencil5(L):
    u = L.arg("u")
    out = u.copy()
    q = np.float32(0.25) * (((u[:-2, 1:-1] + u[2:, 1:-1]) + u[1:-1, :-2]) + u[1:-1, 2:])
    out[1:-1, 1:-1] = q - u[1:-1, 1:-1]
    return {"out": out}


# -------------------------------------------------------------------- transpose via shared tiles
TILE = 32


@simt.kernel(domain=2, block=(32, 8, 1))
def transpose(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        tile = simt.shared.array((TILE, TILE + 1), f32)
        tx = simt.threadIdx.x
        ty = simt.threadIdx.y
        bx = simt.blockIdx.x * TILE
        by = simt.blockIdx.y * TILE
        for j in range(0, TILE, 8):
            if by + ty + j < a.shape[0] and bx + tx < a.shape[1]:
                tile[ty + j, tx] = a[by + ty + j, bx + tx]
        simt.sync_threads()
        for j in range(0, TILE, 8):
            if bx + ty + j < out.shape[0] and by + tx < out.shape[1]:
                out[bx + ty + j, by + tx] = tile[tx, ty + j]


def make_transpose(rng, n):
    rows, cols = max(1, n // 45), 45
    return Launch(["a", "out"], [randf(rng, (rows, cols)), np.zeros((cols, rows), np.float32)],
                  (cdiv(cols, TILE), cdiv(rows, TILE)), (32, 8))


def ref_transpose(L):
    return {"out": L.arg("a").T.copy()}


# ------------------------------------------------------------- block reduction, histogram, scan
@simt.kernel(block=(256, 1, 1))
def block_sum(a: simt.Array[f32], total: simt.DisjointSlice[f32]):
    with simt.unsafe():
        partial = simt.shared.array((8,), f32)
        i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        v = a[i] if i < len(a) else f32(0)
        v = simt.warp.sum(v)
        lane = simt.lane_id()
        w = simt.threadIdx.x // 32
        if lane == 0:
            partial[w] = v
        simt.sync_threads()
        if w == 0:
            s = partial[lane] if lane < 8 else f32(0)
            s = simt.warp.sum(s)
            if lane == 0:
                simt.atomic.add(total, 0, s)


def make_block_sum(rng, n):
    return Launch(["a", "total"], [randf(rng, n), np.zeros(1, np.float32)], (cdiv(n, 256),), (256,))


def ref_block_sum(L):
    return {"total": np.array([L.arg("a").astype(np.float64).sum()], np.float32)}


@simt.kernel(block=(128, 1, 1))
def histogram(data: simt.Array[i32], hist: simt.DisjointSlice[i32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(data):
        with simt.unsafe():
            simt.atomic.add(hist, data[i], 1)


def make_histogram(rng, n):
    return Launch(["data", "hist"], [rng.integers(0, 37, n).astype(np.int32), np.zeros(37, np.int32)],
                  (cdiv(n, 128),), (128,))


def ref_histogram(L):
    return {"hist": np.bincount(L.arg("data"), minlength=37).astype(np.int32)}


SCAN_BLOCK = 128


@simt.kernel(block=(SCAN_BLOCK, 1, 1))
def block_scan(a: simt.Array[i32], out: simt.DisjointSlice[i32]):
    with simt.unsafe():
        buf = simt.shared.array((SCAN_BLOCK,), i32)
        t = simt.threadIdx.x
        i = simt.blockIdx.x * SCAN_BLOCK + t
        buf[t] = a[i] if i < len(a) else 0
        simt.sync_threads()
        d = 1
        while d < SCAN_BLOCK:
            v = buf[t - d] if t >= d else 0
            simt.sync_threads()
            buf[t] = buf[t] + v
            simt.sync_threads()
            d = d * 2
        if i < len(out):
            out[i] = buf[t]


def make_block_scan(rng, n):
    return Launch(["a", "out"], [rng.integers(-1000, 1000, n).astype(np.int32), np.zeros(n, np.int32)],
                  (cdiv(n, SCAN_BLOCK),), (SCAN_BLOCK,))


def ref_block_scan(L):
    a = L.arg("a")
    n = len(a)
    padded = np.zeros(cdiv(n, SCAN_BLOCK) * SCAN_BLOCK, np.int32)
    padded[:n] = a
    return {"out": np.cumsum(padded.reshape(-1, SCAN_BLOCK), axis=1, dtype=np.int32).reshape(-1)[:n]}


# ------------------------------------------------------------------------------------- SGEMM
@simt.kernel(domain=2, block=(16, 16, 1),
             requires=["a.shape[1] == b.shape[0]", "c.shape[0] == a.shape[0]", "c.shape[1] == b.shape[1]"])
def sgemm_naive(a: simt.Array[f32, 2], b: simt.Array[f32, 2], c: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    acc = f32(0)
    if ij[0] < c.shape[0] and ij[1] < c.shape[1]:    # threads past the edge must not read a or b
        for k in range(a.shape[1]):
            acc += a[ij[0], k] * b[k, ij[1]]
    c[ij] = acc


GT = 16


@simt.kernel(domain=2, block=(GT, GT, 1),
             requires=["a.shape[1] == b.shape[0]", "c.shape[0] == a.shape[0]", "c.shape[1] == b.shape[1]"])
def sgemm_tiled(a: simt.Array[f32, 2], b: simt.Array[f32, 2], c: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        ta = simt.shared.array((GT, GT), f32)
        tb = simt.shared.array((GT, GT), f32)
        tx = simt.threadIdx.x
        ty = simt.threadIdx.y
        row = simt.blockIdx.y * GT + ty
        col = simt.blockIdx.x * GT + tx
        acc = f32(0)
        for t0 in range(0, a.shape[1], GT):
            ta[ty, tx] = a[row, t0 + tx] if row < a.shape[0] and t0 + tx < a.shape[1] else f32(0)
            tb[ty, tx] = b[t0 + ty, col] if t0 + ty < b.shape[0] and col < b.shape[1] else f32(0)
            simt.sync_threads()
            for k in range(GT):
                acc += ta[ty, k] * tb[k, tx]
            simt.sync_threads()
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = acc


def make_sgemm(rng, n):
    m, k, p = max(1, n // 40), 37, 29
    return Launch(["a", "b", "c"], [randf(rng, (m, k)), randf(rng, (k, p)), np.zeros((m, p), np.float32)],
                  (cdiv(p, 16), cdiv(m, 16)), (16, 16))


def ref_sgemm(L):
    return {"c": (L.arg("a").astype(np.float64) @ L.arg("b").astype(np.float64)).astype(np.float32)}


# ---------------------------------------------------------------------------------- Mandelbrot
@simt.kernel(domain=2, block=(16, 8, 1))
def mandelbrot(out: simt.DisjointSlice[i32, 2], x0: f32, y0: f32, step: f32, max_iter: i32):
    ij = simt.thread.index_2d()
    cr = x0 + f32(ij[1]) * step
    ci = y0 + f32(ij[0]) * step
    zr = f32(0)
    zi = f32(0)
    n = i32(0)
    while n < max_iter and zr * zr + zi * zi <= 4.0:
        t = zr * zr - zi * zi + cr
        zi = 2.0 * zr * zi + ci
        zr = t
        n += 1
    out[ij] = n


def make_mandelbrot(rng, n):
    rows = max(2, n // 61)
    return Launch(["out", "x0", "y0", "step", "max_iter"],
                  [np.zeros((rows, 61), np.int32), np.float32(-2.1), np.float32(-1.2),
                   np.float32(2.4 / max(rows, 61)), np.int32(60)],
                  (cdiv(61, 16), cdiv(rows, 8)), (16, 8))


def ref_mandelbrot(L):
    out = L.arg("out")
    rows, cols = out.shape
    f = np.float32
    cr = (L.arg("x0") + np.arange(cols, dtype=f) * L.arg("step"))[None, :].repeat(rows, 0)
    ci = (L.arg("y0") + np.arange(rows, dtype=f) * L.arg("step"))[:, None].repeat(cols, 1)
    zr, zi = np.zeros_like(cr), np.zeros_like(ci)
    cnt = np.zeros(out.shape, np.int32)
    for _ in range(int(L.arg("max_iter"))):
        alive = zr * zr + zi * zi <= f(4.0)
        t = zr * zr - zi * zi + cr
        zi = np.where(alive, f(2.0) * zr * zi + ci, zi)
        zr = np.where(alive, t, zr)
        cnt += alive
    return {"out": cnt}


# --------------------------------------------------------------------------------- row softmax
@simt.kernel(block=(64, 1, 1))
def softmax_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        r = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        if r < x.shape[0]:
            m = x[r, 0]
            for j in range(1, x.shape[1]):
                m = max(m, x[r, j])
            s = f32(0)
            for j in range(x.shape[1]):
                s += simt.exp(x[r, j] - m)
            for j in range(x.shape[1]):
                out[r, j] = simt.exp(x[r, j] - m) / s


def make_softmax(rng, n):
    rows = max(1, n // 23)
    return Launch(["x", "out"], [randf(rng, (rows, 23)) * 3, np.zeros((rows, 23), np.float32)],
                  (cdiv(rows, 64),), (64,))


def ref_softmax(L):
    x = L.arg("x").astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return {"out": (e / e.sum(axis=1, keepdims=True)).astype(np.float32)}


# ---------------------------------------------------------------------------- device function
@simt.device
def smoothstep(e0: f32, e1: f32, x: f32) -> f32:
    t = (x - e0) / (e1 - e0)
    if t < 0.0:
        return f32(0)
    if t > 1.0:
        return f32(1)
    return t * t * (3.0 - 2.0 * t)


@simt.kernel(block=(128, 1, 1))
def apply_smoothstep(x: simt.Array[f32], out: simt.DisjointSlice[f32], e0: f32, e1: f32):
    i = simt.thread.index_1d()
    out[i] = smoothstep(e0, e1, x[i])


def make_smoothstep(rng, n):
    return Launch(["x", "out", "e0", "e1"], [randf(rng, n), np.zeros(n, np.float32), np.float32(-0.7),
                                              np.float32(1.1)], (cdiv(n, 128),), (128,))


def ref_smoothstep(L):
    f = np.float32
    t = (L.arg("x") - L.arg("e0")) / (L.arg("e1") - L.arg("e0"))
    s = t * t * (f(3.0) - f(2.0) * t)
    return {"out": np.where(t < 0, f(0), np.where(t > 1, f(1), s)).astype(f)}


# ------------------------------------------------------------------------------ generic dtypes
T = dsl.TypeVar("T")


@simt.kernel(block=(128, 1, 1))
def affine(x: simt.Array[T], out: simt.DisjointSlice[T], a: T, b: T):
    i = simt.thread.index_1d()
    out[i] = a * x[i] + b


def make_affine(dtype):
    def make(rng, n):
        if np.dtype(dtype).kind == "i":
            x = rng.integers(-2**31, 2**31 - 1, n).astype(dtype)
            a, b = dtype(rng.integers(3, 10**6)), dtype(rng.integers(-10**9, 10**9))
        else:
            x = randf(rng, n, dtype)
            a, b = dtype(rng.standard_normal()), dtype(rng.standard_normal())
        return Launch(["x", "out", "a", "b"], [x, np.zeros(n, dtype), a, b], (cdiv(n, 128),), (128,))
    return make


def ref_affine(L):
    x = L.arg("x")
    return {"out": (L.arg("a") * x + L.arg("b")).astype(x.dtype)}   # wraps / rounds per op like the GPU


# ------------------------------------------------------------- a warp a row, a block a row (no unsafe writes)
LN_EPS = 1e-5


@simt.kernel(block=128, requires=["x.shape == out.shape", "len(w) == x.shape[1]", "len(b) == x.shape[1]",
                                  "len(mean) == x.shape[0]", "len(rstd) == x.shape[0]"])
def layernorm_warp(x: simt.Array[f32, 2], w: simt.Array[f32], b: simt.Array[f32],
                   out: simt.DisjointSlice[f32, 2], mean: simt.DisjointSlice[f32],
                   rstd: simt.DisjointSlice[f32]):
    row = simt.warp.index_1d()               # this warp owns row `row`
    if row < x.shape[0]:
        C = x.shape[1]
        s = f32(0.0)
        for c in simt.warp.lanes(C):
            s += x[row, c]
        m = simt.warp.sum(s) / f32(C)
        v = f32(0.0)
        for c in simt.warp.lanes(C):
            d = x[row, c] - m
            v += d * d
        r = simt.rsqrt(simt.warp.sum(v) / f32(C) + f32(LN_EPS))
        for c in simt.warp.lanes(C):
            out[row, c] = (x[row, c] - m) * r * w[c] + b[c]
        mean[row] = m                        # once per warp, by lane 0
        rstd[row] = r


def make_layernorm_warp(rng, n):
    rows, cols = n // 37 + 3, 70
    x = randf(rng, (rows, cols)) * 3 + 1
    return Launch(["x", "w", "b", "out", "mean", "rstd"],
                  [x, randf(rng, cols), randf(rng, cols), np.full((rows, cols), np.nan, np.float32),
                   np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)],
                  (cdiv(rows, 4),), (128,))


def ref_layernorm_warp(L):
    x = L.arg("x").astype(np.float64)
    m = x.mean(1)
    r = 1 / np.sqrt(x.var(1) + LN_EPS)
    return {"out": (x - m[:, None]) * r[:, None] * L.arg("w") + L.arg("b"), "mean": m, "rstd": r}


@simt.kernel(launch_bounds=256, requires=["x.shape == out.shape"])
def rowscale_block(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], peak: simt.DisjointSlice[f32]):
    r = simt.block.index_1d()                # this block owns row `r`
    with simt.unsafe():                      # shared scratch stays the author's to vouch for
        red = simt.shared.array(32, f32)
    m = f32(0.0)
    for c in simt.block.threads(x.shape[1]):
        m = max(m, abs(x[r, c]))
    off = 16
    while off > 0:                           # an i64 shuffle offset
        m = max(m, simt.warp.shfl_xor(m, off))
        off //= 2
    with simt.unsafe():
        if simt.threadIdx.x % 32 == 0:
            red[simt.threadIdx.x // 32] = m
        simt.sync_threads()
        m = red[0]
        for k in range(1, (simt.blockDim.x + 31) // 32):
            m = max(m, red[k])
    for c in simt.block.threads(x.shape[1]):
        out[r, c] = x[r, c] / m
    peak[r] = m                              # once per block, by thread 0


def make_rowscale_block(rng, n):
    rows, cols = n // 100 + 2, 333
    return Launch(["x", "out", "peak"], [randf(rng, (rows, cols)), np.full((rows, cols), np.nan, np.float32),
                                         np.full(rows, np.nan, np.float32)], (rows,), (96,))


def ref_rowscale_block(L):
    x = L.arg("x")
    peak = np.abs(x).max(1)
    return {"out": x / peak[:, None], "peak": peak}


ZOO: list[ZooCase] = [
    ZooCase("vecadd", vecadd, make_vecadd, ref_vecadd),
    ZooCase("saxpy", saxpy, make_saxpy, ref_saxpy),
    ZooCase("vecadd_chunked", vecadd_chunked, make_vecadd_chunked, ref_vecadd),
    ZooCase("stencil5", stencil5, make_stencil5, ref_stencil5),
    ZooCase("transpose", transpose, make_transpose, ref_transpose),
    ZooCase("block_sum", block_sum, make_block_sum, ref_block_sum, exact=False, rtol=1e-4, atol=1e-3),
    ZooCase("histogram", histogram, make_histogram, ref_histogram),
    ZooCase("block_scan", block_scan, make_block_scan, ref_block_scan),
    ZooCase("sgemm_naive", sgemm_naive, make_sgemm, ref_sgemm, exact=False, rtol=1e-4, atol=1e-4),
    ZooCase("sgemm_tiled", sgemm_tiled, make_sgemm, ref_sgemm, exact=False, rtol=1e-4, atol=1e-4),
    ZooCase("mandelbrot", mandelbrot, make_mandelbrot, ref_mandelbrot),
    ZooCase("softmax_rows", softmax_rows, make_softmax, ref_softmax, exact=False, rtol=1e-5, atol=1e-7),
    ZooCase("smoothstep", apply_smoothstep, make_smoothstep, ref_smoothstep),
    ZooCase("affine_f16", affine, make_affine(np.float16), ref_affine),
    ZooCase("affine_f32", affine, make_affine(np.float32), ref_affine),
    ZooCase("affine_f64", affine, make_affine(np.float64), ref_affine),
    ZooCase("affine_i32", affine, make_affine(np.int32), ref_affine),
    ZooCase("layernorm_warp", layernorm_warp, make_layernorm_warp, ref_layernorm_warp, exact=False,
            rtol=1e-4, atol=1e-4),
    ZooCase("rowscale_block", rowscale_block, make_rowscale_block, ref_rowscale_block),
]
ZOO_BY_NAME = {c.name: c for c in ZOO}


def check_outputs(case: ZooCase, launch: Launch, expected: dict[str, np.ndarray]) -> None:
    """Assert the launch's outputs equal `expected` (bit for bit when `case.exact`, else within
    tolerance). `launch.args` must hold the results (copy device outputs back into them first)."""
    for name, want in expected.items():
        got = launch.arg(name)
        if case.exact:
            np.testing.assert_array_equal(got, want, err_msg=f"{case.name}: output '{name}'")
        else:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=case.rtol,
                                       atol=case.atol, err_msg=f"{case.name}: output '{name}'")
