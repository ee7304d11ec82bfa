"""Triton tutorial 05, layer norm forward and backward, as dsl.tile kernels written the way the tutorial
writes them. `layer_norm_row` (rows of up to MAX_WHOLE_ROW columns, the tutorial's BLOCK_SIZE =
next_power_of_2(N)): one tile block per row holds the whole row in registers, reads it from global
memory once, takes the mean and the variance from those registers and stores the normalised row once.
`layer_norm_fwd` (longer rows): the row walked in chunks of BLOCK_SIZE columns three times (sum for the
mean, squared deviations for the variance, then normalise and store each chunk). Both store each row's
mean and 1/std beside the output.

The backward departs from the tutorial. The tutorial runs one program per row and adds the row's
dw = dy*xhat and db = dy into partial row `row % GROUP_SIZE_M` under a spin lock; a tile kernel has
no locks, and the same sums with `tile.atomic_add` (N contended f32 atomics a row) ran at 0.2-0.4x
Triton on the H200. Here `layer_norm_bwd_dx_rows` gives each block R consecutive rows (dx's tile is
(R, N rounded up), written a row at a time with `dx.store(row, chunk=(i, 0))`), loads w once, and
per row holds x and dy whole in registers: dx = (w*dy - (xhat*c1 + c2)) * rstd with c1 =
sum(xhat*w*dy)/N, c2 = sum(w*dy)/N. dw and db of its rows stay in f32 registers and are stored once
into the block's OWN row of an (M/R, N) f32 partial buffer: no atomics, deterministic, nothing to
zero. `layer_norm_bwd_dwdb` then sums the M/R partial rows by columns, as the tutorial's second
kernel does. R (rows_per_block) makes about as many blocks as the SMs hold rows at once (the row's
state, w, dw, db, xhat, w*dy in f32, fills registers: one row of 8192 an SM, eight of 1024); rows of
more than 8192 columns hold more than an SM's registers and spill. `layer_norm_bwd_dx_ahead` also
loads the next row while the block reduces this one. Checked against NumPy float64 (N not a power
of two, M not a multiple of R).

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
H200_SMS = 132          # SMs the backward's default row groups are sized for (rows_per_block)
SM_ROW_ELEMS = 8192     # row elements of backward state (w, dw, db, xhat, w*dy in f32) an SM's registers hold
DWDB_BLOCK_M, DWDB_BLOCK_N = 32, 128   # the tutorial's dwdb block (fewer columns for short rows: dwdb_block_n)


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


@tile.func
def row_dx(a, g, wk, mu, r, n):
    """(dx, xhat) of one row in f32 from its x `a`, dy `g`, w `wk` and statistics: dx = (w*dy -
    (xhat*c1 + c2)) * rstd with c1 = sum(xhat*w*dy)/N, c2 = sum(w*dy)/N. Past the row's end dy and w
    read 0, so those columns add nothing to c1, c2, dw or db (their dx is not stored)."""
    xhat = (a - mu) * r
    wdy = wk * g
    c1 = tile.sum(xhat * wdy) / n
    c2 = tile.sum(wdy) / n
    return (wdy - (xhat * c1 + c2)) * r, xhat


@tile.kernel
def layer_norm_bwd_dx_rows(dx: tile.Partition[E, 2], dw_part: tile.Partition[f32, 2], db_part: tile.Partition[f32, 2],
                           dy: tile.Array[E, 2], x: tile.Array[E, 2], w: tile.Array[E, 1],
                           mean: tile.Array[f32, 1], rstd: tile.Array[f32, 1]):
    rows, width = dx.tile_shape         # R rows a block; the whole row, N rounded up
    n = x.shape[1]
    first = tile.bid(0) * rows
    wk = tile.load(w, 0, (width,)).astype(f32)[None, :]       # once a block
    _dw = tile.zeros((1, width), f32)
    _db = tile.zeros((1, width), f32)
    for i in range(rows):               # rows past M read 0 and their chunk stores write nothing
        row = first + i
        g = tile.load(dy, (row, 0), (1, width)).astype(f32)
        mu = tile.load(mean, row, (1,))
        r = tile.load(rstd, row, (1,))
        d, xhat = row_dx(tile.load(x, (row, 0), (1, width)).astype(f32), g, wk, mu, r, n)
        dx.store(d, chunk=(i, 0))       # row i of this block's (R, width) tile
        _dw += g * xhat
        _db += g
    dw_part.store(_dw)                  # this block's own partial row
    db_part.store(_db)


@tile.kernel
def layer_norm_bwd_dx_ahead(dx: tile.Partition[E, 2], dw_part: tile.Partition[f32, 2], db_part: tile.Partition[f32, 2],
                            dy: tile.Array[E, 2], x: tile.Array[E, 2], w: tile.Array[E, 1],
                            mean: tile.Array[f32, 1], rstd: tile.Array[f32, 1]):
    """layer_norm_bwd_dx_rows with the next row's x and dy loaded before this row's sums: its loads
    are in flight while the block reduces (more registers: fewer rows in flight an SM otherwise)."""
    rows, width = dx.tile_shape
    n = x.shape[1]
    first = tile.bid(0) * rows
    wk = tile.load(w, 0, (width,)).astype(f32)[None, :]
    _dw = tile.zeros((1, width), f32)
    _db = tile.zeros((1, width), f32)
    a_next = tile.load(x, (first, 0), (1, width))
    g_next = tile.load(dy, (first, 0), (1, width))
    for i in range(rows):
        row = first + i
        a = a_next.astype(f32)
        g = g_next.astype(f32)
        a_next = tile.load(x, (row + 1, 0), (1, width))        # the last reads the next block's row, or 0
        g_next = tile.load(dy, (row + 1, 0), (1, width))
        mu = tile.load(mean, row, (1,))
        r = tile.load(rstd, row, (1,))
        d, xhat = row_dx(a, g, wk, mu, r, n)
        dx.store(d, chunk=(i, 0))
        _dw += g * xhat
        _db += g
    dw_part.store(_dw)
    db_part.store(_db)


@tile.kernel
def layer_norm_bwd_dwdb(dw_part: tile.Array[f32, 2], db_part: tile.Array[f32, 2], dw: tile.Partition[E, 1],
                        db: tile.Partition[E, 1], BLOCK_SIZE_M: tile.Constant[int]):
    col = tile.bid(0)                   # BLOCK_SIZE_N columns: dw's tile
    BLOCK_SIZE_N = dw.tile_shape[0]
    _dw = tile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), f32)
    _db = tile.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), f32)
    for i in range(tile.cdiv(dw_part.shape[0], BLOCK_SIZE_M)):     # partial rows past the last read 0
        _dw += tile.load(dw_part, (i, col), (BLOCK_SIZE_M, BLOCK_SIZE_N))
        _db += tile.load(db_part, (i, col), (BLOCK_SIZE_M, BLOCK_SIZE_N))
    dw.store(tile.sum(_dw, axis=0))
    db.store(tile.sum(_db, axis=0))


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


_ON_WARPS: dict[tuple[str, int], Any] = {}   # (kernel name, num_warps) -> that kernel for that many warps


def on_warps(kernel: Any, num_warps: int) -> Any:
    """`kernel` compiled for `num_warps` warps (one tile.kernel per pair, kept for the process)."""
    key = (kernel.name, num_warps)
    if key not in _ON_WARPS:
        _ON_WARPS[key] = tile.kernel(kernel.pyfunc, num_warps=num_warps)
    return _ON_WARPS[key]


def row_kernel(num_warps: int) -> Any:
    return on_warps(layer_norm_row, num_warps)


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


def rows_per_block(m: int, n: int) -> int:
    """R, the rows of a block of the backward's dx kernel: a power of two that gives about as many
    blocks as the SMs hold rows of N columns at once (SM_ROW_ELEMS // N an SM, at least one), so every
    SM is busy and a block has as few partial rows to write as that allows (M = 4096: R = 32 at
    N = 8192, R = 4 at N = 1024)."""
    width = next_power_of_2(n)
    blocks = H200_SMS * max(1, SM_ROW_ELEMS // width)
    return next_power_of_2(-(-int(m) // blocks))


def partials_shape(m: int, n: int, rows: int | None = None) -> tuple[int, int, int]:
    """The shape of the f32 buffer of dw and db partial rows (partials[0]: dw, partials[1]: db): one
    row per block of `rows` (None: rows_per_block) rows. Each block writes its own row: it need not
    be zeroed."""
    rows = rows or rows_per_block(m, n)
    return (2, -(-int(m) // rows), int(n))


def dwdb_block_n(n: int) -> int:
    """Columns a block of layer_norm_bwd_dwdb sums: the tutorial's 128 for long rows, fewer (down to
    32) for shorter ones, so that rows of 1024 columns or more give at least 32 blocks."""
    return max(32, min(DWDB_BLOCK_N, next_power_of_2(n) // 32))


def _check_power_of_2(**values: int | None) -> None:
    for name, v in values.items():
        if v is not None and (v < 1 or v & (v - 1)):
            raise ValueError(f"{name}: expected a power of two, got {v}")


def backward_args(x: Any, dy: Any, w: Any, mean: Any, rstd: Any, dx: Any, dw: Any, db: Any, partials: Any,
                  rows: int | None = None, num_warps: int | None = None, ahead: bool = False,
                  block_m: int = DWDB_BLOCK_M, block_n: int | None = None) -> tuple:
    """((dx kernel, arguments), (dwdb kernel, arguments)) of the backward of the (M, N) `x`: `dy` and
    `dx` (M, N), `w`, `dw`, `db` (N,), the forward's f32 (M,) `mean` / `rstd`, and `partials` an f32
    buffer of partials_shape(M, N, rows) (not zeroed: every row is written). The dx kernel's blocks
    take `rows` rows each (None: rows_per_block) on `num_warps` warps (None: row_warps), loading the
    next row ahead when `ahead` (layer_norm_bwd_dx_ahead); the dwdb kernel sums `block_m` partial rows
    at a time, `block_n` columns a block (None: dwdb_block_n)."""
    m, n = x.shape
    width = next_power_of_2(n)
    if n < 1 or width > MAX_WHOLE_ROW:
        raise ValueError(f"x: expected 1 to {MAX_WHOLE_ROW} columns (the row is held whole), got shape "
                         f"{tuple(x.shape)}")
    for name, a, want in (("dy", dy, (m, n)), ("dx", dx, (m, n)), ("w", w, (n,)), ("dw", dw, (n,)),
                          ("db", db, (n,)), ("mean", mean, (m,)), ("rstd", rstd, (m,))):
        if tuple(a.shape) != want:
            raise ValueError(f"{name}: expected shape {want}, got {tuple(a.shape)}")
    _check_power_of_2(rows=rows, block_m=block_m, block_n=block_n)
    rows = rows or rows_per_block(m, n)
    want = partials_shape(m, n, rows)
    if tuple(partials.shape) != want:
        raise ValueError(f"partials: expected shape {want} (partials_shape(M, N, rows={rows})), got "
                         f"{tuple(partials.shape)}")
    if num_warps is not None and (num_warps < 1 or num_warps > 32):
        raise ValueError(f"num_warps: expected 1 to 32 warps, got {num_warps}")
    dx_kernel = on_warps(layer_norm_bwd_dx_ahead if ahead else layer_norm_bwd_dx_rows, num_warps or row_warps(width))
    dx_args = (tile.partition(dx, (rows, width)), tile.partition(partials[0], (1, width)),
               tile.partition(partials[1], (1, width)), dy, x, w, mean, rstd)
    block_n = block_n or dwdb_block_n(n)
    dwdb_args = (partials[0], partials[1], tile.partition(dw, (block_n,)), tile.partition(db, (block_n,)), block_m)
    return (dx_kernel, dx_args), (layer_norm_bwd_dwdb, dwdb_args)


def layer_norm_bwd(x: Any, dy: Any, w: Any, mean: Any, rstd: Any, dx: Any, dw: Any, db: Any, partials: Any,
                   **how: Any) -> None:
    """dx, dw and db (bridge / DLPack arrays on the GPU); `how`: backward_args's options."""
    for kernel, args in backward_args(x, dy, w, mean, rstd, dx, dw, db, partials, **how):
        kernel(*args)


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> tuple:
    """(y, mean, rstd) in float64."""
    xd = x.astype(np.float64)
    mu, var = xd.mean(1), xd.var(1)
    rs = 1.0 / np.sqrt(var + eps)
    return (xd - mu[:, None]) * rs[:, None] * w.astype(np.float64) + b.astype(np.float64), mu, rs


def reference_bwd(x: np.ndarray, w: np.ndarray, dy: np.ndarray, eps: float = 1e-5) -> tuple:
    """(dx, dw, db) in float64 for the upstream gradient `dy`."""
    xd, wd, g = (a.astype(np.float64) for a in (x, w, dy))
    xhat = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + eps)
    wdy = wd * g
    c1, c2 = (xhat * wdy).mean(1, keepdims=True), wdy.mean(1, keepdims=True)
    rs = 1.0 / np.sqrt(xd.var(1, keepdims=True) + eps)
    return (wdy - (xhat * c1 + c2)) * rs, (g * xhat).sum(0), g.sum(0)


def inputs(rows: int, n: int, dtype, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * 2 + 0.5).astype(dtype)
    w, b = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    return x, w, b


def check(got: tuple, want: tuple, tol: float, what: str, names: tuple = ("y", "mean", "rstd"),
          relative: tuple = ()) -> None:
    """Max error of each output; of those named in `relative` (dw and db, sums over M rows) relative
    to the output's largest magnitude when that is above 1."""
    errs = [float(np.abs(g.astype(np.float64) - r).max() / (max(1.0, np.abs(r).max()) if k in relative else 1.0))
            for g, r, k in zip(got, want, names)]
    print(f"{what}: max |ours - NumPy| " + ", ".join(f"{k} {e:.2e}" for k, e in zip(names, errs)))
    assert max(errs) < tol, (what, errs)


BWD_NAMES = ("dx", "dw", "db")


def dy_for(x: np.ndarray, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(x.shape).astype(x.dtype)


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
    if next_power_of_2(n) > MAX_WHOLE_ROW:
        return                          # the backward holds the row whole, as the tutorial's
    dy = dy_for(x)
    dx, dw, db = (bridge.from_host(np.full(s, np.nan, dtype)) for s in ((rows, n), (n,), (n,)))
    partials = bridge.from_host(np.full(partials_shape(rows, n), np.nan, np.float32))   # every row is written
    layer_norm_bwd(dev[0], bridge.from_host(dy), dev[1], mean, rstd, dx, dw, db, partials)
    check((dx.to_host(), dw.to_host(), db.to_host()), reference_bwd(x, w, dy), tol,
          f"GPU backward M{rows} N{n} {np.dtype(dtype).name}", BWD_NAMES, ("dw", "db"))


def run_simulator(rows: int, n: int, **how: Any) -> None:
    x, w, b = inputs(rows, n, np.float32)
    y = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    kernel, args = pick(x, y, w, b, mean, rstd, **how)
    kernel.simulate(*args)
    check((y, mean, rstd), reference(x, w, b), 1e-4, f"simulator M{rows} N{n} {kernel.name}"
          + "".join(f" {k}={v}" for k, v in how.items()))
    if "max_whole_row" in how:
        return                          # the chunked forward; the backward (whole rows) is checked below
    dy = dy_for(x)
    dx, dw, db = np.full_like(x, np.nan), np.full(n, np.nan, np.float32), np.full(n, np.nan, np.float32)
    partials = np.full(partials_shape(rows, n), np.nan, np.float32)
    for kernel, args in backward_args(x, dy, w, mean, rstd, dx, dw, db, partials):
        kernel.simulate(*args)
    check((dx, dw, db), reference_bwd(x, w, dy), 1e-4, f"simulator backward M{rows} N{n}", BWD_NAMES,
          ("dw", "db"))


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
        run_simulator(1151, 1000)                              # the backward: R = 2, M not a multiple
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
