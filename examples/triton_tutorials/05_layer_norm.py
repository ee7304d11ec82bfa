"""Triton tutorial 05, layer norm forward, as a dsl.tile kernel written the way the tutorial writes it:
one tile block per row, the row walked in chunks of BLOCK_SIZE columns three times (sum for the mean,
squared deviations for the variance, then normalise and store each chunk), and each row's mean and
1/std stored beside the output. Checked against NumPy float64 (N not a multiple of BLOCK_SIZE).

    python examples/triton_tutorials/05_layer_norm.py              # GPU when present, else the simulator
    python examples/triton_tutorials/05_layer_norm.py --simulate   # the CPU simulator

The block owns row r of `y` through a partition whose tile is the whole row, (1, N rounded up to a
power of two), and writes it a chunk at a time with `y.store(value, chunk=(0, k))`: chunk k of the
block's own tile, never another block's (docs/tile.md, "Chunked stores"). `mean` and `rstd` are 1-D
partitions with tiles of (1,), one per row (partitions of another ndim own their tile by number).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import TypeVar, f32, tile

E = TypeVar("E")
MAX_BLOCK = 1024        # columns a chunk holds at most (8 a thread on 128 threads)


@tile.kernel
def layer_norm_fwd(x: tile.Array[E, 2], y: tile.Partition[E, 2], w: tile.Array[E, 1], b: tile.Array[E, 1],
                   mean: tile.Partition[f32, 1], rstd: tile.Partition[f32, 1], eps: f32,
                   BLOCK_SIZE: tile.Constant[int]):
    row = tile.bid(0)
    n = x.shape[1]
    # the mean, BLOCK_SIZE columns at a time (the loads read 0 past the row's end)
    _mean = tile.zeros((1, BLOCK_SIZE), f32)
    for k in range(tile.cdiv(n, BLOCK_SIZE)):
        _mean += tile.load(x, (row, k), (1, BLOCK_SIZE)).astype(f32)
    mu = tile.sum(_mean) / n
    # the variance
    _var = tile.zeros((1, BLOCK_SIZE), f32)
    for k in range(tile.cdiv(n, BLOCK_SIZE)):
        cols = k * BLOCK_SIZE + tile.arange(BLOCK_SIZE)[None, :]
        a = tile.load(x, (row, k), (1, BLOCK_SIZE)).astype(f32)
        d = tile.where(cols < n, a - mu, 0.0)
        _var += d * d
    r = 1.0 / tile.sqrt(tile.sum(_var) / n + eps)
    mean.store(mu)
    rstd.store(r)
    # normalise and store chunk k of this block's row
    for k in range(tile.cdiv(n, BLOCK_SIZE)):
        wk = tile.load(w, k, (BLOCK_SIZE,)).astype(f32)[None, :]
        bk = tile.load(b, k, (BLOCK_SIZE,)).astype(f32)[None, :]
        a = tile.load(x, (row, k), (1, BLOCK_SIZE)).astype(f32)
        y.store((a - mu) * r * wk + bk, chunk=(0, k))


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def launch_args(x: Any, y: Any, w: Any, b: Any, mean: Any, rstd: Any, eps: float = 1e-5,
                block: int | None = None) -> tuple:
    """layer_norm_fwd's arguments for an (M, N) `x`, its output `y`, (N,) weight and bias and (M,)
    f32 `mean` / `rstd`: y's tile is the whole row, the chunk min(N rounded up, MAX_BLOCK) columns."""
    rows, n = x.shape
    if n < 1:
        raise ValueError(f"x: expected at least one column, got shape {tuple(x.shape)}")
    width = next_power_of_2(n)
    block = block or min(width, MAX_BLOCK)
    if block > width or block & (block - 1):
        raise ValueError(f"block: expected a power of two of at most {width} (N = {n} rounded up), got {block}")
    return (x, tile.partition(y, (1, width)), w, b, tile.partition(mean, (1,)), tile.partition(rstd, (1,)),
            np.float32(eps), block)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> tuple:
    """(y, mean, rstd) in float64."""
    xd = x.astype(np.float64)
    mu, var = xd.mean(1), xd.var(1)
    rs = 1.0 / np.sqrt(var + eps)
    return (xd - mu[:, None]) * rs[:, None] * w.astype(np.float64) + b.astype(np.float64), mu, rs


def inputs(rows: int, n: int, dtype, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 2 + 0.5).astype(dtype)
    w, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    return x, w, b


def check(got: tuple, want: tuple, tol: float, what: str) -> None:
    errs = [float(np.abs(g.astype(np.float64) - r).max()) for g, r in zip(got, want)]
    print(f"{what}: max |ours - NumPy| y {errs[0]:.2e}, mean {errs[1]:.2e}, rstd {errs[2]:.2e}")
    assert max(errs) < tol, (what, errs)


def run_gpu(rows: int, n: int, dtype, tol: float) -> None:
    import bridge
    x, w, b = inputs(rows, n, dtype)
    dev = [bridge.from_host(a) for a in (x, w, b)]
    y = bridge.from_host(np.full_like(x, np.nan))
    mean, rstd = (bridge.from_host(np.full(rows, np.nan, np.float32)) for _ in range(2))
    layer_norm_fwd(*launch_args(dev[0], y, dev[1], dev[2], mean, rstd))
    check((y.to_host(), mean.to_host(), rstd.to_host()), reference(x, w, b), tol,
          f"GPU M{rows} N{n} {np.dtype(dtype).name}")


def run_simulator(rows: int, n: int, block: int | None = None) -> None:
    x, w, b = inputs(rows, n, np.float32)
    y = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    layer_norm_fwd.simulate(*launch_args(x, y, w, b, mean, rstd, block=block))
    check((y, mean, rstd), reference(x, w, b), 1e-4, f"simulator M{rows} N{n} BLOCK {block or 'auto'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run_gpu(1151, 1000, np.float32, 1e-4)
        run_gpu(1151, 5003, np.float32, 1e-4)
        run_gpu(4096, 8192 + 7, np.float16, 2e-2)
        print("ran on the GPU")
    else:
        run_simulator(9, 300, block=64)
        run_simulator(5, 1000)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
