"""Triton tutorial 05, layer norm forward, as dsl.tile kernels written the way the tutorial writes them.
`layer_norm_row` (rows of up to MAX_WHOLE_ROW columns, the tutorial's BLOCK_SIZE = next_power_of_2(N)):
one tile block per row holds the whole row in registers, reads it from global memory once, takes the
mean and the variance from those registers and stores the normalised row once. `layer_norm_fwd`
(longer rows): the row walked in chunks of BLOCK_SIZE columns three times (sum for the mean, squared
deviations for the variance, then normalise and store each chunk). Both store each row's mean and
1/std beside the output. Checked against NumPy float64 (N not a power of two).

    python examples/triton_tutorials/05_layer_norm.py              # GPU when present, else the simulator
    python examples/triton_tutorials/05_layer_norm.py --simulate   # the CPU simulator

The block owns row r of `y` through a partition whose tile is the whole row, (1, N rounded up to a
power of two); `layer_norm_fwd` writes it a chunk at a time with `y.store(value, chunk=(0, k))`:
chunk k of the block's own tile, never another block's (docs/tile.md, "Chunked stores"). `mean` and
`rstd` are 1-D partitions with tiles of (1,), one per row (partitions of another ndim own their tile
by number). Why the whole row in registers: the chunked form reads x three times and waits for
global memory once per chunk and pass; the whole row waits once (docs/tile.md, "Chunked stores").
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import TypeVar, f32, tile

E = TypeVar("E")
MAX_BLOCK = 1024        # columns a chunk of layer_norm_fwd holds at most (8 a thread on 128 threads)
MAX_WHOLE_ROW = 16384   # columns layer_norm_row holds (16 f32 a thread on 32 warps); longer rows are chunked
ROW_ELEMS = 16          # elements a thread of layer_norm_row holds by default (see row_warps)


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


@tile.kernel
def layer_norm_row(x: tile.Array[E, 2], y: tile.Partition[E, 2], w: tile.Array[E, 1], b: tile.Array[E, 1],
                   mean: tile.Partition[f32, 1], rstd: tile.Partition[f32, 1], eps: f32):
    row = tile.bid(0)
    n = x.shape[1]
    width = y.tile_shape[1]             # N rounded up to a power of two: the loads read 0 past the row
    a = tile.load(x, (row, 0), (1, width)).astype(f32)
    mu = tile.sum(a) / n
    cols = tile.arange(width)[None, :]
    d = tile.where(cols < n, a - mu, 0.0)
    r = 1.0 / tile.sqrt(tile.sum(d * d) / n + eps)
    mean.store(mu)
    rstd.store(r)
    wk = tile.load(w, 0, (width,)).astype(f32)[None, :]
    bk = tile.load(b, 0, (width,)).astype(f32)[None, :]
    y.store(d * r * wk + bk)


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


def row_warps(width: int) -> int:
    """Warps of `layer_norm_row` for rows of `width` (a power of two) columns: ROW_ELEMS a thread.
    Fewer threads holding more elements each keep more of the row in flight per SM for the same
    registers (1024 columns: 2 warps of 61 registers run 16 rows an SM, 4 warps of 37 run 12)."""
    return max(1, min(32, width // (32 * ROW_ELEMS)))


_ROW_KERNELS: dict[int, Any] = {}       # num_warps -> layer_norm_row compiled for that many warps


def row_kernel(num_warps: int) -> Any:
    if num_warps not in _ROW_KERNELS:
        _ROW_KERNELS[num_warps] = tile.kernel(layer_norm_row.pyfunc, num_warps=num_warps)
    return _ROW_KERNELS[num_warps]


def pick(x: Any, y: Any, w: Any, b: Any, mean: Any, rstd: Any, eps: float = 1e-5, num_warps: int | None = None,
         max_whole_row: int = MAX_WHOLE_ROW, block: int | None = None) -> tuple[Any, tuple]:
    """(kernel, arguments) for the layer norm of the (M, N) `x`: `layer_norm_row` on `num_warps` warps
    (None: row_warps) when N rounded up to a power of two is at most `max_whole_row` columns, else
    `layer_norm_fwd` in chunks of `block` columns (launch_args)."""
    args = launch_args(x, y, w, b, mean, rstd, eps, block)
    width = args[1].tile_shape[1]
    if width > max_whole_row:
        return layer_norm_fwd, args
    if num_warps is not None and (num_warps < 1 or num_warps > 32):
        raise ValueError(f"num_warps: expected 1 to 32 warps, got {num_warps}")
    return row_kernel(num_warps or row_warps(width)), args[:-1]


def layer_norm(x: Any, y: Any, w: Any, b: Any, mean: Any, rstd: Any, eps: float = 1e-5, **how: Any) -> None:
    """y, mean and rstd of the (M, N) `x` (bridge / DLPack arrays on the GPU); `how`: pick's options."""
    kernel, args = pick(x, y, w, b, mean, rstd, eps, **how)
    kernel(*args)


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
    kernel, args = pick(dev[0], y, dev[1], dev[2], mean, rstd)
    kernel(*args)
    check((y.to_host(), mean.to_host(), rstd.to_host()), reference(x, w, b), tol,
          f"GPU M{rows} N{n} {np.dtype(dtype).name} {kernel.name}")


def run_simulator(rows: int, n: int, **how: Any) -> None:
    x, w, b = inputs(rows, n, np.float32)
    y = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    kernel, args = pick(x, y, w, b, mean, rstd, **how)
    kernel.simulate(*args)
    check((y, mean, rstd), reference(x, w, b), 1e-4, f"simulator M{rows} N{n} {kernel.name}"
          + "".join(f" {k}={v}" for k, v in how.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run_gpu(1151, 1000, np.float32, 1e-4)
        run_gpu(1151, 5003, np.float32, 1e-4)
        run_gpu(4096, 8192 + 7, np.float16, 2e-2)
        run_gpu(300, 20_003, np.float32, 1e-4)        # longer than a whole row: the chunked kernel
        print("ran on the GPU")
    else:
        run_simulator(9, 300, max_whole_row=256, block=64)     # the chunked kernel, 5 chunks a row
        run_simulator(5, 1000)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
