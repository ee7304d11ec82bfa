"""The DSL tile kernels of the GPT-2 step that have no C++ original in cpp/kernels/llm/: the linear
layer's GEMMs (the C++ side of those is cuBLAS through torch), the head split/merge around flash
attention, the bias gradient's column sum and the gradient clipping scale.

Layouts, and why (docs/tile.md, "Lowering": tf32 wgmma reads both operands K-major from shared memory;
TMA copies a K-major operand as it is, other layouts go through a transposing register stage). A
linear layer's weight W is (OC, C) row-major and its activations X (N, C), dY (N, OC):
- forward y = X @ W^T + b: A = X and B = W are both K-major ("NT"): TMA + tf32 wgmma on sm_90;
- dW += dY^T @ X: K = N is the row axis of both, so A = dY^T is stored K x M and B = X K x N ("TN"):
  `matmul_tn_acc` reads them as stored (both through the transposing register stage, tf32 wgmma, the
  default for an A stored K x M on sm_90). Its K is the token count (8192) and its M x N a weight
  (36 tiles of 128 x 128 for a 768 x 768 one), so a few tiles leave most SMs idle: `matmul_tn_split`
  splits K (every block still owns one tile of a partial buffer; `add_splits` adds them into dW);
- dX = dY @ W: B = W is row-major K x N ("NN"): `matmul_nn` reads it as stored (mma.sync, or tf32
  wgmma through the register stage under KB_TILE_TF32_TRANSPOSE=1), or W^T (a weight: 1/N of the
  GEMM's traffic) is written once by `transpose` and the product is the NT `linear_nobias`.
kernels_dsl.py chooses among these. Every kernel writes only its own partition tile: no atomics,
deterministic. Gradients accumulate (dW +=), as cuBLAS's addmm_ on the C++ side.
"""
from __future__ import annotations

from dsl import TypeVar, f32, i32, tile

E = TypeVar("E")            # attention operand dtype (f16 / bf16 / f32)
F = TypeVar("F")            # a source's dtype
Const = tile.Constant[int]


@tile.func
def nt_range(x, w, i, j, k0, k1, bm, bn, bk):
    """acc = x[i-tile] @ w[j-tile]^T over k tiles k0..k1-1 (x: M x K, w: N x K, both K-major)."""
    acc = tile.zeros((bm, bn), f32)
    for k in range(k0, k1):
        acc = tile.mma(tile.load(x, (i, k), (bm, bk)), tile.transpose(tile.load(w, (j, k), (bn, bk))), acc)
    return acc


@tile.func
def nt_loop(x, w, bm, bn, bk):
    """acc = x[i-tile] @ w[j-tile]^T over all of K."""
    return nt_range(x, w, tile.bid(0), tile.bid(1), 0, tile.cdiv(x.shape[1], bk), bm, bn, bk)


@tile.kernel(requires=["x.shape[1] == w.shape[1]", "len(bias) == w.shape[0]", "out.shape[0] == x.shape[0]",
                       "out.shape[1] == w.shape[0]"])
def linear_bias(x: tile.Array[f32, 2], w: tile.Array[f32, 2], bias: tile.Array[f32, 1],
                out: tile.Partition[f32, 2], bk: Const):
    """out = x @ w^T + bias (a linear layer's forward; bias in the epilogue)."""
    bm, bn = out.tile_shape
    acc = nt_loop(x, w, bm, bn, bk)
    out.store(acc + tile.load(bias, tile.bid(1), (bn,))[None, :])


@tile.kernel(requires=["x.shape[1] == w.shape[1]", "out.shape[0] == x.shape[0]", "out.shape[1] == w.shape[0]"])
def linear_nobias(x: tile.Array[f32, 2], w: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out = x @ w^T (the tied classifier: logits = lnf @ wte^T)."""
    bm, bn = out.tile_shape
    out.store(nt_loop(x, w, bm, bn, bk))


@tile.kernel(requires=["a.shape[1] == b.shape[0]", "out.shape[0] == a.shape[0]", "out.shape[1] == b.shape[1]"])
def matmul_nn(a: tile.Array[f32, 2], b: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out = a @ b, both row-major (dX = dY @ W with W as stored)."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(a.shape[1], bk)):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    out.store(acc)


@tile.kernel(requires=["out.shape[0] == x.shape[1]", "out.shape[1] == x.shape[0]"])
def transpose(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """out = x^T, a tile at a time (through shared memory): W^T for the NT form of dX = dY @ W."""
    tm, tn = out.tile_shape
    out.store(tile.transpose(tile.load(x, (tile.bid(1), tile.bid(0)), (tn, tm))))


@tile.kernel(requires=["dout.shape[0] == inp.shape[0]", "dout.shape[1] == out.shape[0]",
                       "inp.shape[1] == out.shape[1]"])
def matmul_tn_acc(dout: tile.Array[f32, 2], inp: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out += dout^T @ inp (a weight gradient dW += dY^T X), both operands read as stored (K x M, K x N)."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(dout.shape[0], bk)):
        acc = tile.mma(tile.transpose(tile.load(dout, (k, i), (bk, bm))), tile.load(inp, (k, j), (bk, bn)), acc)
    out.store(out.load() + acc)


@tile.func
def split_k_share(m, k, partial, bm, bk):
    """(i, j, first k tile, past-last k tile) of this block of a split-K M x N x K GEMM (`m` = M,
    `k` = K): `partial` is (splits * Mp, N), Mp = M rounded up to the tile rows; block row r computes
    split r // tiles_m of tile (r % tiles_m, j) over its share of the k tiles."""
    tm = tile.cdiv(m, bm)
    splits = partial.shape[0] // (tm * bm)
    r = tile.bid(0)
    s = r // tm
    kt = tile.cdiv(k, bk)
    per = tile.cdiv(kt, splits)
    return r % tm, tile.bid(1), s * per, min(kt, s * per + per)


@tile.kernel(requires=["dout.shape[0] == inp.shape[0]", "inp.shape[1] == partial.shape[1]"])
def matmul_tn_split(dout: tile.Array[f32, 2], inp: tile.Array[f32, 2], partial: tile.Partition[f32, 2], bk: Const):
    """Split-K dout^T @ inp into `partial` (split_k_share)."""
    bm, bn = partial.tile_shape
    i, j, k0, k1 = split_k_share(dout.shape[1], dout.shape[0], partial, bm, bk)
    acc = tile.zeros((bm, bn), f32)
    for k in range(k0, k1):
        acc = tile.mma(tile.transpose(tile.load(dout, (k, i), (bk, bm))), tile.load(inp, (k, j), (bk, bn)), acc)
    partial.store(acc)


@tile.kernel(requires=["dout.shape[0] == xt.shape[1]", "dout.shape[1] == out.shape[0]",
                       "xt.shape[0] == out.shape[1]"])
def matmul_tn_acc_xt(dout: tile.Array[f32, 2], xt: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out += dout^T @ xt^T: the weight gradient with X^T written first (N x K: K-major, so B comes by
    TMA and only dout goes through the transposing register stage)."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(dout.shape[0], bk)):
        acc = tile.mma(tile.transpose(tile.load(dout, (k, i), (bk, bm))), tile.transpose(tile.load(xt, (j, k), (bn, bk))),
                       acc)
    out.store(out.load() + acc)


@tile.kernel(requires=["dout.shape[0] == xt.shape[1]", "xt.shape[0] == partial.shape[1]"])
def matmul_tn_split_xt(dout: tile.Array[f32, 2], xt: tile.Array[f32, 2], partial: tile.Partition[f32, 2], bk: Const):
    """matmul_tn_split with X^T written first (as matmul_tn_acc_xt)."""
    bm, bn = partial.tile_shape
    i, j, k0, k1 = split_k_share(dout.shape[1], dout.shape[0], partial, bm, bk)
    acc = tile.zeros((bm, bn), f32)
    for k in range(k0, k1):
        acc = tile.mma(tile.transpose(tile.load(dout, (k, i), (bk, bm))), tile.transpose(tile.load(xt, (j, k), (bn, bk))),
                       acc)
    partial.store(acc)


@tile.kernel(requires=["dyt.shape[1] == xt.shape[1]", "dyt.shape[0] == out.shape[0]",
                       "xt.shape[0] == out.shape[1]"])
def matmul_nt_acc(dyt: tile.Array[f32, 2], xt: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: Const):
    """out += dyt @ xt^T: the weight gradient with dY^T and X^T both written first (both K-major: the
    NT loop, both operands by TMA, none through the register stage)."""
    bm, bn = out.tile_shape
    out.store(out.load() + nt_loop(dyt, xt, bm, bn, bk))


@tile.kernel(requires=["dyt.shape[1] == xt.shape[1]", "xt.shape[0] == partial.shape[1]"])
def matmul_nt_split(dyt: tile.Array[f32, 2], xt: tile.Array[f32, 2], partial: tile.Partition[f32, 2], bk: Const):
    """Split-K dyt @ xt^T into `partial` (split_k_share)."""
    bm, bn = partial.tile_shape
    i, j, k0, k1 = split_k_share(dyt.shape[0], dyt.shape[1], partial, bm, bk)
    partial.store(nt_range(dyt, xt, i, j, k0, k1, bm, bn, bk))


@tile.kernel(requires=["partial.shape[1] == out.shape[1]"])
def add_splits(partial: tile.Array[f32, 2], out: tile.Partition[f32, 2], splits: Const):
    """out += the sum of the `splits` row blocks of `partial` (matmul_tn_split's), in split order."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    per = partial.shape[0] // (splits * bm)          # out's tile rows per split
    acc = out.load()
    for s in range(splits):
        acc = acc + tile.load(partial, (s * per + i, j), (bm, bn))
    out.store(acc)


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
