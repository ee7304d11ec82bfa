"""The tile kernels the issue lists, shared by the simulator, PTX and GPU tests of dsl.tile."""
from __future__ import annotations

import math

from dsl import tile
from dsl.types import TypeVar, f32

T = tile.Constant[int]
E = TypeVar("E")          # GEMM input dtype, bound per launch (f16, bf16 or f32)
A8, B8 = TypeVar("A8"), TypeVar("B8")    # f8 GEMM input dtypes (f8e4m3fn / f8e5m2)
O = TypeVar("O")          # an output dtype bound by the partition


@tile.kernel
def add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


@tile.kernel
def saxpy(alpha: f32, x: tile.Array[f32], y: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(alpha * tile.load(x, t, out.tile_shape) + tile.load(y, t, out.tile_shape))


@tile.kernel
def softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """Row softmax; the partition's tile is (rows_per_block, >= number of columns)."""
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-math.inf)
    m = tile.max(v, axis=1, keepdims=True)
    e = tile.exp(v - m)
    out.store(e / tile.sum(e, axis=1, keepdims=True))


@tile.kernel
def layernorm(x: tile.Array[f32, 2], w: tile.Array[f32, 1], b: tile.Array[f32, 1], eps: f32,
              out: tile.Partition[f32, 2]):
    """Row layernorm over the true column count (padding excluded from the statistics)."""
    rows, cols = out.tile_shape
    n = x.shape[1]
    v = tile.load(x, (tile.bid(0), 0), (rows, cols))
    mean = tile.sum(v, axis=1, keepdims=True) / n
    inside = tile.arange(cols)[None, :] < n
    d = tile.where(inside, v - mean, 0.0)
    var = tile.sum(d * d, axis=1, keepdims=True) / n
    y = d * tile.rsqrt(var + eps)
    out.store(y * tile.load(w, 0, (cols,)) + tile.load(b, 0, (cols,)))


@tile.kernel
def layer_norm_fwd(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], w: tile.Array[f32, 1],
                   b: tile.Array[f32, 1], mean: tile.Partition[f32, 1], rstd: tile.Partition[f32, 1],
                   eps: f32):
    """Layer norm forward with the arguments of Triton's tutorial kernel (X, Y, W, B, Mean, Rstd, eps):
    a block normalises a row tile of `out` (BM rows, at least N columns) and stores each row's mean
    and 1/std in its (BM,) tile of the 1-D `mean` and `rstd` (partitions of another ndim than the
    grid's own tile by tile number: block b, tile b)."""
    rows, cols = out.tile_shape
    n = x.shape[1]
    v = tile.load(x, (tile.bid(0), 0), (rows, cols))
    mu = tile.sum(v, axis=1) / n
    d = tile.where(tile.arange(cols)[None, :] < n, v - mu[:, None], 0.0)
    r = 1.0 / tile.sqrt(tile.sum(d * d, axis=1) / n + eps)
    mean.store(mu)
    rstd.store(r)
    out.store(d * r[:, None] * tile.load(w, 0, (cols,)) + tile.load(b, 0, (cols,)))


@tile.kernel
def block_sum(x: tile.Array[f32], out: tile.Partition[f32], block: T):
    """Stage of a two-stage full sum: tile block t writes the sum of x[t*block:(t+1)*block]."""
    out.store(tile.sum(tile.load(x, tile.bid(0), (block,))))


@tile.kernel
def transpose(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    i, j = tile.bid(0), tile.bid(1)
    tm, tn = out.tile_shape
    out.store(tile.transpose(tile.load(x, (j, i), (tn, tm))))


@tile.kernel
def gemm(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], bk: T):
    """c = a @ b with f32 accumulation; a and b share one dtype (f16, bf16 or f32 → tf32)."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)


@tile.kernel
def gemm_cast(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[O, 2], bk: T):
    """c = a @ b with f32 accumulation, rounded once into c's dtype (a bf16 or f16 C, as torch.matmul
    returns it: half the output bytes of an f32 C)."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc.astype(c.dtype))


@tile.kernel
def gemm_split_k(a: tile.Array[E, 2], b: tile.Array[E, 2], partial: tile.Partition[f32, 2], bk: T):
    """Parallel split-K, stage 1: `partial` is (splits * Mp, N) f32 with Mp = M rounded up to BM;
    block row r computes split r // tiles_m of tile (r % tiles_m, j) over its share of the k tiles.
    Each block still owns one tile (no atomics, deterministic); for a K much larger than M and N,
    where one block per output tile leaves most SMs idle."""
    bm, bn = partial.tile_shape
    tm = (a.shape[0] + bm - 1) // bm
    splits = partial.shape[0] // (tm * bm)
    r, j = tile.bid(0), tile.bid(1)
    s, i = r // tm, r % tm
    kt = (a.shape[1] + bk - 1) // bk
    per = (kt + splits - 1) // splits
    acc = tile.zeros((bm, bn), f32)
    for k in range(s * per, min(kt, s * per + per)):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    partial.store(acc)


@tile.kernel
def sum_splits(partial: tile.Array[f32, 2], splits: T, c: tile.Partition[O, 2]):
    """Parallel split-K, stage 2: c = the sum of the `splits` row blocks of `partial`, as c's dtype."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    per = partial.shape[0] // (splits * bm)       # c's tiles per split
    acc = tile.zeros((bm, bn), f32)
    for s in range(splits):
        acc = acc + tile.load(partial, (s * per + i, j), (bm, bn))
    c.store(acc.astype(c.dtype))


def split_k_rows(m: int, bm: int, splits: int) -> int:
    """Rows of gemm_split_k's partial buffer: `splits` blocks of M rounded up to BM."""
    return splits * (-(-m // bm) * bm)


def gemm_split_k_run(a, b, c, tile_shape: tuple[int, int], bk: int, splits: int, partial,
                     sum_tile: tuple[int, int] = (16, 256), simulate: bool = False) -> None:
    """c = a @ b through the two split-K stages; `partial` has split_k_rows(M, BM, splits) x N f32."""
    run1 = gemm_split_k.simulate if simulate else gemm_split_k
    run2 = sum_splits.simulate if simulate else sum_splits
    run1(a, b, tile.partition(partial, tile_shape), bk)
    run2(partial, splits, tile.partition(c, sum_tile))


@tile.kernel
def gemm_nt(a: tile.Array[E, 2], bt: tile.Array[E, 2], c: tile.Partition[f32, 2], bk: T):
    """c = a @ bt.T with f32 accumulation: bt is N x K (a linear layer's weight), read K-major."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.transpose(tile.load(bt, (j, k), (bn, bk))), acc)
    c.store(acc)


@tile.kernel
def gemm_f8(a: tile.Array[A8, 2], bt: tile.Array[B8, 2], scale: f32, c: tile.Partition[O, 2], bk: T):
    """c = scale * (a @ bt.T) for f8 inputs (bt N x K, as torch._scaled_mm takes B), f32 accumulation,
    stored as c's dtype: per-tensor scales are one multiply in the epilogue."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.transpose(tile.load(bt, (j, k), (bn, bk))), acc)
    c.store((acc * scale).astype(c.dtype))


@tile.kernel
def quantize_f8(x: tile.Array[f32, 2], inv_scale: f32, q: tile.Partition[A8, 2]):
    """q = x / scale in q's f8 type (nearest even, saturating), the per-tensor quantisation an f8
    GEMM's inputs go through."""
    bm, bn = q.tile_shape
    q.store((tile.load(x, (tile.bid(0), tile.bid(1)), (bm, bn)) * inv_scale).astype(q.dtype))


@tile.kernel
def gemm_bias_relu(a: tile.Array[E, 2], b: tile.Array[E, 2], bias: tile.Array[f32, 1],
                   c: tile.Partition[f32, 2], bk: T):
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    acc = acc + tile.load(bias, j, (bn,))[None, :]
    c.store(tile.maximum(acc, 0.0))
