"""Triton tutorial 02, fused softmax, as dsl.tile kernels written the way the tutorial writes them: each
row is read once, its maximum subtracted, exponentiated, normalised and written once (no intermediate
in global memory). Rows of any length: a whole-row tile when the row fits in one (the tutorial's
BLOCK_SIZE = next_power_of_2(n_cols)), else an online softmax that walks the row in chunks. Checked
against NumPy float64.

    python examples/triton_tutorials/02_fused_softmax.py              # GPU when present, else the simulator
    python examples/triton_tutorials/02_fused_softmax.py --simulate   # the CPU simulator

`softmax_kernel`: the partition's tile is (ROWS, n_cols rounded up to a power of two); the load pads
past the row's end with -inf, so the padding adds exp(-inf) = 0 to the sum, as the tutorial's
`other=-float('inf')`. `softmax_online_kernel`: for rows longer than MAX_WHOLE_ROW, one pass keeps
the running maximum m and normaliser l (rescaled by exp(m_old - m_new) when the maximum grows), a
second writes each chunk with `y.store(value, chunk=(0, k))` (docs/tile.md, "Chunked stores").
`launch_args(..., num_warps=n)` runs `softmax_kernel` on n warps (default: about 8 elements a thread).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from dsl import f32, tile

MAX_WHOLE_ROW = 16384       # columns one tile holds (32 a thread on 512 threads); longer rows go online
CHUNK = 4096                # columns a chunk of the online kernel holds


@tile.kernel
def softmax_kernel(x: tile.Array[f32, 2], y: tile.Partition[f32, 2]):
    row = tile.load(x, (tile.bid(0), 0), y.tile_shape, padding=-tile.inf)
    row_minus_max = row - tile.max(row, axis=1, keepdims=True)
    numerator = tile.exp(row_minus_max)
    y.store(numerator / tile.sum(numerator, axis=1, keepdims=True))


@tile.kernel
def softmax_online_kernel(x: tile.Array[f32, 2], y: tile.Partition[f32, 2], BLOCK_SIZE: tile.Constant[int]):
    row = tile.bid(0)
    n_cols = x.shape[1]
    m = -tile.inf                         # running maximum of the row
    l = 0.0                               # running sum of exp(v - m)
    for k in range(tile.cdiv(n_cols, BLOCK_SIZE)):
        v = tile.load(x, (row, k), (1, BLOCK_SIZE), padding=-tile.inf)
        m_new = tile.maximum(m, tile.max(v))
        l = l * tile.exp(m - m_new) + tile.sum(tile.exp(v - m_new))
        m = m_new
    for k in range(tile.cdiv(n_cols, BLOCK_SIZE)):
        v = tile.load(x, (row, k), (1, BLOCK_SIZE), padding=-tile.inf)
        y.store(tile.exp(v - m) / l, chunk=(0, k))


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


_WITH_WARPS: dict[int, Any] = {}      # num_warps -> softmax_kernel compiled for that many warps


def whole_row_kernel(num_warps: int | None) -> Any:
    """softmax_kernel on `num_warps` warps (None: the compiler's choice, about 8 elements a thread)."""
    if num_warps is None:
        return softmax_kernel
    if num_warps < 1 or num_warps > 32:
        raise ValueError(f"num_warps: expected 1 to 32 warps, got {num_warps}")
    if num_warps not in _WITH_WARPS:
        _WITH_WARPS[num_warps] = tile.kernel(softmax_kernel.pyfunc, num_warps=num_warps)
    return _WITH_WARPS[num_warps]


def launch_args(x: Any, y: Any, rows_per_block: int = 1, max_whole_row: int = MAX_WHOLE_ROW,
                chunk: int = CHUNK, num_warps: int | None = None) -> tuple[Any, tuple]:
    """(kernel, arguments) for the softmax of each row of the (M, N) f32 `x` into `y`: `softmax_kernel`
    with tiles of (rows_per_block, N rounded up) on `num_warps` warps when that is at most
    `max_whole_row` columns, else `softmax_online_kernel` with one row a block and chunks of
    min(chunk, N rounded up) columns."""
    n_rows, n_cols = x.shape
    if n_cols < 1 or tuple(y.shape) != (n_rows, n_cols):
        raise ValueError(f"y: expected shape {(n_rows, n_cols)} like x with at least one column, got {tuple(y.shape)}")
    if rows_per_block < 1 or rows_per_block & (rows_per_block - 1):
        raise ValueError(f"rows_per_block: expected a power of two, got {rows_per_block}")
    width = next_power_of_2(n_cols)
    if width <= max_whole_row:
        return whole_row_kernel(num_warps), (x, tile.partition(y, (rows_per_block, width)))
    return softmax_online_kernel, (x, tile.partition(y, (1, width)), min(chunk, width))


def softmax(x: Any, y: Any, **how: Any) -> None:
    """y = softmax(x) along rows, on the GPU (bridge / DLPack arrays)."""
    kernel, args = launch_args(x, y, **how)
    kernel(*args)


def reference(x: np.ndarray) -> np.ndarray:
    xd = x.astype(np.float64)
    e = np.exp(xd - xd.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def inputs(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * 4).astype(np.float32)


def check(got: np.ndarray, x: np.ndarray, what: str) -> None:
    ref = reference(x)
    err = np.abs(got.astype(np.float64) - ref)
    print(f"{what}: max |ours - NumPy| {err.max():.2e}, max relative {(err / ref).max():.2e}")
    assert np.all(err <= 2e-5 * ref + 1e-9), what


def describe(how: dict) -> str:
    return "".join(f" {k}={v}" for k, v in how.items())


def run_gpu(rows: int, cols: int, **how: Any) -> None:
    import bridge
    x = inputs(rows, cols)
    y = bridge.from_host(np.full_like(x, np.nan))
    softmax(bridge.from_host(x), y, **how)
    check(y.to_host(), x, f"GPU {rows}x{cols} {describe(how)}")


def run_simulator(rows: int, cols: int, **how: Any) -> None:
    x = inputs(rows, cols)
    y = np.full_like(x, np.nan)
    kernel, args = launch_args(x, y, **how)
    kernel.simulate(*args)
    check(y, x, f"simulator {rows}x{cols} {kernel.name}{describe(how)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        run_gpu(1823, 781)                 # the tutorial's test shape
        run_gpu(4096, 1000, rows_per_block=2)
        run_gpu(257, 16384)
        run_gpu(300, 100_003)              # longer than a whole-row tile: the online kernel
        print("ran on the GPU")
    else:
        run_simulator(33, 781)
        run_simulator(10, 100, rows_per_block=4)
        run_simulator(6, 700, num_warps=2)
        run_simulator(5, 1500, max_whole_row=512, chunk=256)    # the online kernel, 6 chunks a row
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
