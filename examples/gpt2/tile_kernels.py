"""The DSL tile kernels of the GPT-2 step that have no C++ original in cpp/kernels/llm/: the linear
layer's GEMMs (the C++ side of those is cuBLAS through torch), the head split/merge around flash
attention, the bias gradient's column sum and the gradient clipping scale.

Layouts, and why: a linear layer's weight W is (OC, C) row-major, so the forward y = x @ W^T + b
reads W K-major: the "NT" GEMM, which f32 inputs (tf32) run on warpgroup MMA on sm_90. The backward's
dX = dY @ W is the row-major "NN" GEMM (mma.sync tf32 today, docs/tile.md). dW = dY^T @ X would need a
transposed A operand, which the GEMM loop does not take (a product on the portable FMA path), so it
is computed as dW^T = X^T @ dY (X transposed once by `transpose`, then NN) and added into dW by
`add_transposed`. Every kernel writes only its own partition tile: no atomics, deterministic.
"""
from __future__ import annotations

from dsl import TypeVar, f32, i32, tile

E = TypeVar("E")            # attention operand dtype (f16 / bf16 / f32)
F = TypeVar("F")            # a source's dtype
Const = tile.Constant[int]


@tile.func
def nt_loop(x, w, bm, bn, bk):
    """acc = x[i-tile] @ w[j-tile]^T over all of K (x: M x K, w: N x K, both K-major)."""
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(x.shape[1], bk)):
        acc = tile.mma(tile.load(x, (i, k), (bm, bk)), tile.transpose(tile.load(w, (j, k), (bn, bk))), acc)
    return acc


@tile.kernel(requires=["x.shape[1] == w.shape[1]", "len(bias) == w.shape[0]"])
def linear_bias(x: tile.Array[f32, 2], w: tile.Array[f32, 2], bias: tile.Array[f32, 1],
                out: tile.Partition[f32, 2], bk: Const):
    """out = x @ w^T + bias (a linear layer's forward; bias in the epilogue)."""
    bm, bn = out.tile_shape
    acc = nt_loop(x, w, bm, bn, bk)
    out.store(acc + tile.load(bias, tile.bid(1), (bn,))[None, :])


@tile.kernel(requires=["x.shape[1] == w.shape[1]"])
def linear_nobias(x: tile.Array[f32, 2], w: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out = x @ w^T (the tied classifier: logits = lnf @ wte^T)."""
    bm, bn = out.tile_shape
    out.store(nt_loop(x, w, bm, bn, bk))


@tile.kernel(requires=["a.shape[1] == b.shape[0]"])
def matmul_nn(a: tile.Array[f32, 2], b: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out = a @ b, both row-major (dX = dY @ W; dW^T = X^T @ dY)."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(a.shape[1], bk)):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    out.store(acc)


@tile.kernel
def transpose(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """out = x^T, a tile at a time (through shared memory)."""
    tm, tn = out.tile_shape
    out.store(tile.transpose(tile.load(x, (tile.bid(1), tile.bid(0)), (tn, tm))))


@tile.kernel
def add_transposed(src: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """out += src^T (dW += (dW^T computed by matmul_nn)^T: gradients accumulate, as in C++)."""
    tm, tn = out.tile_shape
    out.store(out.load() + tile.transpose(tile.load(src, (tile.bid(1), tile.bid(0)), (tn, tm))))


@tile.kernel(requires=["x.shape[1] == len(out)"])
def colsum_add(x: tile.Array[f32, 2], out: tile.Partition[f32, 1], rows: Const):
    """out += the sum of x's rows (a bias gradient: db += sum over tokens of dY), `rows` at a time."""
    (bn,) = out.tile_shape
    acc = tile.zeros((bn,), f32)
    for k in range(tile.cdiv(x.shape[0], rows)):
        acc = acc + tile.sum(tile.load(x, (k, tile.bid(0)), (rows, bn)), axis=0)
    out.store(out.load() + acc)


@tile.kernel
def heads_from(x: tile.Array[F, 2], out: tile.Partition[E, 2], n_head: i32, seq: i32, col0: i32):
    """One (B*T, C') activation's head columns as flash attention's row stacks, cast to out's dtype:
    out[(b*H + h)*T + t, :] = x[b*T + t, (col0 + h)*D : (col0 + h + 1)*D] (col0 = 0, H, 2H picks q, k, v
    of the qkv activation). out's tiles are (rows, D), rows dividing T."""
    bt, d = out.tile_shape
    per = seq // bt
    i = tile.bid(0)
    bh = i // per                               # which (batch, head)
    b = bh // n_head
    out.store(tile.load(x, (b * per + i - bh * per, col0 + bh - b * n_head), (bt, d)))


@tile.func
def stack_tile(src, n_head, seq, bt, d, head):
    """The (bt, D) tile of row stack `src` that lands at out tile (bid(0), head) of a (B*T, C) array."""
    per = seq // bt
    r = tile.bid(0)
    b = r // per
    return tile.load(src, ((b * n_head + head) * per + r - b * per, 0), (bt, d))


@tile.kernel
def heads_to(src: tile.Array[F, 2], out: tile.Partition[f32, 2], n_head: i32, seq: i32):
    """The inverse of heads_from: row stacks (B*H*T, D) back into (B*T, C) columns."""
    bt, d = out.tile_shape
    out.store(stack_tile(src, n_head, seq, bt, d, tile.bid(1)))


@tile.kernel
def heads_to_qkv(dq: tile.Array[F, 2], dk: tile.Array[F, 2], dv: tile.Array[F, 2], out: tile.Partition[f32, 2],
                 n_head: i32, seq: i32):
    """dq, dk, dv row stacks into the (B*T, 3C) gradient of the qkv activation."""
    bt, d = out.tile_shape
    c = tile.bid(1)
    if c < n_head:
        out.store(stack_tile(dq, n_head, seq, bt, d, c))
    elif c < 2 * n_head:
        out.store(stack_tile(dk, n_head, seq, bt, d, c - n_head))
    else:
        out.store(stack_tile(dv, n_head, seq, bt, d, c - 2 * n_head))


@tile.kernel(requires=["len(norm_sq) == 1"])
def clip_by_norm(grads: tile.Partition[f32, 1], norm_sq: tile.Array[f32, 1], max_norm: f32):
    """grads *= min(1, max_norm / (sqrt(norm_sq[0]) + 1e-6)): global-norm clipping on the device, so
    the step needs no host read of the norm (torch.nn.utils.clip_grad_norm_'s formula)."""
    n2 = tile.load(norm_sq, 0, (1,))
    scale = tile.minimum(max_norm / (tile.sqrt(n2) + 1e-6), 1.0)
    grads.store(grads.load() * scale)
