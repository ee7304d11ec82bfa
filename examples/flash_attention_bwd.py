"""Flash attention backward (dQ, dK, dV) as three dsl.tile kernels, causal or not, head dims 64, 128 and 256,
f16/bf16 inputs with f32 accumulation, checked against torch autograd of
torch.nn.functional.scaled_dot_product_attention on the GPU (against float64 NumPy on the CPU simulator).

    python examples/flash_attention_bwd.py        # GPU when present (bf16; --dtype float16 or both), else the simulator (--simulate)

The forward (examples/flash_attention.py, `flash_fwd_lse`) leaves the output O and each query row's
log-sum-exp L of its scaled scores, so the backward can rebuild any block of P = exp(Q K^T * scale - L)
without the S x S matrix. The scheme is FlashAttention-2's, without atomics (so it is deterministic):
  1. `attn_bwd_preprocess`: Delta_i = rowsum(dO_i * O_i), one value per query row;
  2. `flash_bwd_dkdv`: each block owns BN key rows of one (batch, head) and walks that head's query
     blocks, accumulating dV += P^T dO and dK += dS^T Q * scale in registers, with dS = P * (dP - Delta)
     and dP = dO V^T. It computes the transposed products (S^T = K Q^T, dP^T = V dO^T), so P^T and
     dS^T come out of the tensor cores already as the A operand of the next product;
  3. `flash_bwd_dq`: each block owns BM query rows and walks the key blocks, dQ += dS K * scale.
Causal: blocks entirely above the diagonal are skipped, the others masked. The arrays are (B*H*S, D)
row stacks of (B, H, S, D) tensors, S a multiple of the tile rows; gradients are stored in the
partitions' dtype (f32 by default here, like the forward's output; the input dtype works too).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bridge import DTypeError, ShapeRelationError
from dsl import TypeVar, f32, i32, tile

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import flash_attention as fwd  # noqa: E402  (a sibling example, not a package)

E = TypeVar("E")
F = TypeVar("F")
G = TypeVar("G")
LOG2E = fwd.LOG2E
# (rows a block owns, rows it streams) per head dim, in order of preference: the first whose sides both
# divide the sequence length is taken; the same for both kernels (dK/dV: key rows x query rows; dQ:
# query rows x key rows). On sm_90 a block's 4 warps hold 16 rows each (64 rows: one warpgroup), so
# all seven products run on warpgroup MMA. The largest without register spills (ptxas -v, sm_90a):
# at D128 the dK/dV accumulators take 128 registers a thread, K and V wait in shared memory, and 32
# query rows a step leave 252 registers in use (64 spill 444 bytes); docs/tile.md, "Attention backward".
# mma.sync (sm_80, KB_TILE_WGMMA_PRODUCTS=0): the same tiles, no spills either. The portable FMA path
# (KB_TILE_TC_MATMUL=0): tiles whose relayouts fit 48 KiB of static shared memory with f32 inputs.
# D256: the dK and dV accumulators of 64 key rows on 4 warps alone need 256 registers a thread, so every
# wgmma tile spills; 32 x 16 on mma.sync assembles with dK/dV at 215/191 registers (causal/full, sm_90a)
# and dQ at 124 full, 128 causal with a 4-byte spill ptxas chose itself (scripts/attention_tile_sweep.py).
WGMMA_TILES = {64: ((64, 64),), 128: ((64, 32),), 256: ((32, 16),)}
TILES = {64: ((64, 64),), 128: ((64, 32),), 256: ((32, 16),)}
PORTABLE_TILES = {64: ((32, 32),), 128: ((32, 16),), 256: ((8, 8),)}
PRE_ROWS = 64                                   # query rows per block of the preprocess kernel (any: edges masked)


@tile.kernel
def attn_bwd_preprocess(o: tile.Array[F, 2], dout: tile.Array[E, 2], delta: tile.Partition[f32, 1],
                        d: tile.Constant):
    """Delta_i = sum_d dO_id O_id: the row term of dS = P * (dP - Delta), since rowsum(P * dP) = Delta."""
    (br,) = delta.tile_shape
    i = tile.bid(0)
    prod = tile.load(o, (i, 0), (br, d)).astype(f32) * tile.load(dout, (i, 0), (br, d)).astype(f32)
    delta.store(tile.sum(prod, axis=1))


@tile.func
def dkdv_step(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, q0, i, col0, scale2, bm, bn, d, causal):
    """One query block i (its head's first block q0) against this block's keys: dK and dV accumulated."""
    st = tile.matmul(kt, tile.transpose(tile.load(q, (q0 + i, 0), (bm, d)))) * scale2   # S^T (bn, bm)
    if causal:
        c = col0 + tile.arange(bn)[:, None]
        r = i * bm + tile.arange(bm)[None, :]
        st = tile.where(c <= r, st, -tile.inf)
    pt = tile.exp2(st - (tile.load(lse, (q0 + i,), (bm,)) * LOG2E)[None, :])
    dv_acc = dv_acc + tile.matmul(pt.astype(q.dtype), tile.load(dout, (q0 + i, 0), (bm, d)))
    dpt = tile.matmul(vt, tile.transpose(tile.load(dout, (q0 + i, 0), (bm, d))))                # dP^T (bn, bm)
    dst = pt * (dpt - tile.load(delta, (q0 + i,), (bm,))[None, :])
    dk_acc = dk_acc + tile.matmul(dst.astype(q.dtype), tile.load(q, (q0 + i, 0), (bm, d)))
    return dk_acc, dv_acc


@tile.func
def key_block(k, v, seq, bn, d, bm, group, causal, j):
    """Key block `j`'s BN key rows of one (batch, key/value head): the first key's position in its
    sequence, the K and V tiles, the first query block of the group's first query head, and the first
    query block of each head that sees any of these keys."""
    head = (j * bn) // seq                      # which (batch, key/value head) these key rows belong to
    col0 = j * bn - head * seq                  # first key position of the tile in its sequence
    kt = tile.load(k, (j, 0), (bn, d))
    vt = tile.load(v, (j, 0), (bn, d))
    q0 = head * group * (seq // bm)             # the first query block of the group's first query head
    start = 0
    if causal:                                  # query blocks that end before col0 see none of these keys
        start = col0 // bm
    return col0, kt, vt, q0, start


@tile.kernel
def flash_bwd_dkdv(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                   lse: tile.Array[f32, 1], delta: tile.Array[f32, 1], dk: tile.Partition[G, 2],
                   dv: tile.Partition[G, 2], seq: i32, scale: f32, bm: tile.Constant, causal: tile.Constant,
                   group: tile.Constant):
    """Grouped-query attention (group > 1): a key/value head serves `group` query heads, so its block
    walks each of them in turn; the sums stay in registers (no atomics)."""
    bn, d = dk.tile_shape
    col0, kt, vt, q0, start = key_block(k, v, seq, bn, d, bm, group, causal, tile.bid(0))
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    scale2 = scale * LOG2E                      # base 2, as the forward: P = 2^(S scale log2 e - L log2 e)
    if group == 1:
        for i in range(start, seq // bm):
            dk_acc, dv_acc = dkdv_step(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, q0, i, col0, scale2, bm, bn,
                                       d, causal)
    else:
        for g in range(group):                  # query head (batch, head * group + g)
            for i in range(start, seq // bm):
                dk_acc, dv_acc = dkdv_step(q, dout, lse, delta, kt, vt, dk_acc, dv_acc, q0 + g * (seq // bm), i,
                                           col0, scale2, bm, bn, d, causal)
    dk.store(dk_acc * scale)
    dv.store(dv_acc)


@tile.kernel
def flash_bwd_dq(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], dout: tile.Array[E, 2],
                 lse: tile.Array[f32, 1], delta: tile.Array[f32, 1], dq: tile.Partition[G, 2], seq: i32,
                 scale: f32, bn: tile.Constant, causal: tile.Constant, group: tile.Constant):
    bm, d = dq.tile_shape
    i = tile.bid(0)
    head = (i * bm) // seq
    row0 = i * bm - head * seq                  # first query position of the tile in its sequence
    kv_head = head
    if group != 1:                              # grouped-query attention: the group's key/value head
        kv_head = head // group
    qt = tile.load(q, (i, 0), (bm, d))
    dot = tile.load(dout, (i, 0), (bm, d))
    lse2 = tile.load(lse, (i,), (bm,)) * LOG2E
    delta_i = tile.load(delta, (i,), (bm,))
    acc = tile.zeros((bm, d), f32)
    kv0 = kv_head * (seq // bn)
    scale2 = scale * LOG2E
    stop = seq // bn
    if causal:                                  # key blocks right of the diagonal contribute nothing
        stop = (row0 + bm + bn - 1) // bn
    for j in range(stop):
        s = tile.matmul(qt, tile.transpose(tile.load(k, (kv0 + j, 0), (bn, d)))) * scale2
        if causal:
            r = row0 + tile.arange(bm)[:, None]
            c = j * bn + tile.arange(bn)[None, :]
            s = tile.where(c <= r, s, -tile.inf)
        p = tile.exp2(s - lse2[:, None])
        dp = tile.matmul(dot, tile.transpose(tile.load(v, (kv0 + j, 0), (bn, d))))
        ds = p * (dp - delta_i[:, None])
        acc = acc + tile.matmul(ds.astype(q.dtype), tile.load(k, (kv0 + j, 0), (bn, d)))
    dq.store(acc * scale)


# On sm_90 (warpgroup MMA) at D128 both kernels read their loop-invariant operands (K, V of dK/dV; Q, dO
# of dQ) from shared memory and run with fp_fusion + ftz: 232.0 / 208.8 TFLOP/s against 206.3 / 183.2 for
# the plain kernels, bf16 B4 H16 S4096 full / causal, the same run (H200, 2026-12-04 19:22 UTC,
# benchmarks/attention.py --bwd-sweep; docs/tile.md). Other head dims keep the plain kernels (not measured).
SM90_LOWERING = {128: {"wgmma_a": "shared", "fp_fusion": True, "ftz": True}}


def kernels_for(d: int, wgmma: bool) -> tuple[Any, Any]:
    """(dK/dV kernel, dQ kernel) for head dim d: SM90_LOWERING's variants on warpgroup MMA, else the plain
    kernels above."""
    lowering = SM90_LOWERING.get(d) if wgmma else None
    return fwd.variant(flash_bwd_dkdv, lowering), fwd.variant(flash_bwd_dq, lowering)


def pick_tiles(d: int, seq: int, tensor_cores: bool | None = None, wgmma: bool | None = None) -> tuple[int, int]:
    """(rows a block owns, rows it streams) for head dim `d` and sequence length `seq`, as the forward's
    launch_args picks: the tensor-core tiles unless KB_TILE_TC_MATMUL=0, the sm_90 ones on an sm_90 GPU."""
    from dsl.tile.compile import tc_matmul_enabled
    if d not in TILES:
        raise ValueError(f"q: head dim {d} not supported (expected one of {sorted(TILES)})")
    tc = tc_matmul_enabled() if tensor_cores is None else tensor_cores
    choices = ((WGMMA_TILES if fwd.on_warpgroup_mma(wgmma, tc) else TILES) if tc else PORTABLE_TILES)[d]
    fits = [t for t in choices if seq > 0 and seq % t[0] == 0 and seq % t[1] == 0]
    if not fits:
        raise ValueError(f"seq: {seq} is not a positive multiple of {max(choices[-1])} (the tile rows)")
    return fits[0]


def _check_arguments(q: Any, seq: int, group: int, named: dict, vectors: dict) -> None:
    """Shapes and dtypes of launch_args' arrays, before anything runs: ShapeRelationError (a ValueError)
    or DTypeError (a TypeError) naming the argument and what it expected. k, v, dk and dv have q's rows
    over `group` (grouped-query attention), the others q's."""
    rows, d = q.shape
    if seq <= 0 or rows % seq:
        raise ShapeRelationError(f"q: {rows} rows are not whole sequences of {seq}", arg_name="q")
    if isinstance(group, bool) or not isinstance(group, int) or group < 1 or (rows // seq) % group:
        raise ShapeRelationError(f"group: expected a positive number of query heads per key/value head that "
                                 f"divides the {rows // seq} query heads, got {group!r}", arg_name="group")
    for name, x in named.items():
        want = rows // group if name in ("k", "v", "dk", "dv") else rows
        if tuple(x.shape) != (want, d):
            like = "like q" if want == rows else f"(q's rows / group {group})"
            raise ShapeRelationError(f"{name}: expected shape {(want, d)} {like}, got {tuple(x.shape)}",
                                     arg_name=name)
    for name, x in vectors.items():
        if tuple(x.shape) != (rows,):
            raise ShapeRelationError(f"{name}: expected shape {(rows,)} (one value per query row), got "
                                     f"{tuple(x.shape)}", arg_name=name)
    for name in ("k", "v", "dout"):
        if str(named[name].dtype) != str(q.dtype):
            raise DTypeError(f"{name}: expected q's dtype {q.dtype}, got {named[name].dtype}", arg_name=name)
    for name, x in vectors.items():
        if not str(x.dtype).endswith("float32"):
            raise DTypeError(f"{name}: expected float32, got {x.dtype}", arg_name=name)


def launch_args(q: Any, k: Any, v: Any, o: Any, dout: Any, lse: Any, delta: Any, dq: Any, dk: Any, dv: Any,
                seq: int, causal: bool, scale: float | None = None, tensor_cores: bool | None = None,
                wgmma: bool | None = None, group: int = 1, tiles: tuple[int, int, int] | None = None,
                lowering: dict | None = None) -> list[tuple[Any, tuple]]:
    """The backward's three launches, [(kernel, arguments)] in order, for (B*H*S, D) row stacks: the
    inputs q, k, v, the forward's output `o` and log-sum-exp `lse` (flash_fwd_lse), the output gradient
    `dout`; `delta` (B*H*S,) f32 scratch the first launch fills; the gradients dq, dk, dv written.
    `group`: query heads per key/value head (k, v, dk, dv then have B*H_kv*S rows, H = group * H_kv).
    `tiles` (rows a block owns, rows it streams, warps) or `lowering` (the tile lowering's switches):
    the dK/dV and dQ kernels made with exactly these (benchmarks/attention.py --bwd-sweep), else
    pick_tiles' on 4 warps under kernels_for's switches. Shapes and dtypes are checked before anything
    runs (ShapeRelationError, DTypeError naming the argument), the tile rows by pick_tiles (ValueError)."""
    _check_arguments(q, seq, group, {"k": k, "v": v, "o": o, "dout": dout, "dq": dq, "dk": dk, "dv": dv},
                     {"lse": lse, "delta": delta})
    d = q.shape[1]
    own, stream, warps = block_tiles(d, seq, tiles, tensor_cores, wgmma)
    if tiles is None and lowering is None:
        dkdv, dq_kernel = kernels_for(d, fwd.on_warpgroup_mma(wgmma, tensor_cores))
    else:
        dkdv, dq_kernel = fwd.variant(flash_bwd_dkdv, lowering, warps), fwd.variant(flash_bwd_dq, lowering, warps)
    sc = float(scale if scale is not None else d ** -0.5)
    return [(attn_bwd_preprocess, (o, dout, tile.partition(delta, (PRE_ROWS,)), d)),
            (dkdv, (q, k, v, dout, lse, delta, tile.partition(dk, (own, d)), tile.partition(dv, (own, d)),
                    seq, sc, stream, bool(causal), group)),
            (dq_kernel, (q, k, v, dout, lse, delta, tile.partition(dq, (own, d)), seq, sc, stream, bool(causal),
                         group))]


def block_tiles(d: int, seq: int, tiles: tuple[int, int, int] | None, tensor_cores: bool | None = None,
                wgmma: bool | None = None) -> tuple[int, int, int | None]:
    """(rows a block owns, rows it streams, warps or None for the default): `tiles` when given and they
    divide `seq` (else ShapeRelationError naming seq), else pick_tiles' on the default warps."""
    if tiles is None:
        return (*pick_tiles(d, seq, tensor_cores, wgmma), None)
    own, stream, warps = tiles
    if seq <= 0 or seq % own or seq % stream:
        raise ShapeRelationError(f"seq: {seq} is not a multiple of the tiles' {own} and {stream} rows", arg_name="seq")
    return own, stream, warps


def run(steps: list[tuple[Any, tuple]], simulate: bool = False) -> None:
    """Launch (or, with `simulate`, run on the CPU simulator) the steps launch_args made, in order."""
    for kern, args in steps:
        (kern.simulate if simulate else kern)(*args)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, dout: np.ndarray, seq: int,
              causal: bool, group: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 (dQ, dK, dV) of softmax(Q K^T / sqrt(d)) V for (B*H*S, D) row stacks, from the formulas:
    dV = P^T dO, dP = dO V^T, dS = P * (dP - rowsum(dP * P)), dQ = dS K scale, dK = dS^T Q scale.
    Grouped-query attention: k, v (B*H_kv*S, D) serve `group` query heads each, so their gradients are
    the sums over the group of the per-query-head ones."""
    d = q.shape[1]
    q3, k3, v3, do3 = (x.astype(np.float64).reshape(-1, seq, d) for x in (q, k, v, dout))
    k3, v3 = (np.repeat(x, group, axis=0) for x in (k3, v3))
    scale = d ** -0.5
    s = q3 @ k3.transpose(0, 2, 1) * scale
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    dv = p.transpose(0, 2, 1) @ do3
    dp = do3 @ v3.transpose(0, 2, 1)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    dq = ds @ k3 * scale
    dk = ds.transpose(0, 2, 1) @ q3 * scale
    dk, dv = (x.reshape(-1, group, seq, d).sum(axis=1) for x in (dk, dv))
    return dq.reshape(-1, d), dk.reshape(-1, d), dv.reshape(-1, d)


def forward_and_backward(q: Any, k: Any, v: Any, dout: Any, seq: int, causal: bool,
                         simulate: bool = False, group: int = 1, steps: Any = None,
                         dtype: Any = None) -> tuple[Any, Any, Any, Any]:
    """(o, dq, dk, dv) of attention over (B*H*S, D) row stacks (NumPy arrays with `simulate`, else
    CUDA torch tensors): flash_fwd_lse, then the backward's launches (`steps`: a function taking
    launch_args' arguments, launch_args by default). `group` query heads share a key/value head (k, v,
    dk, dv have q's rows / group). O, dK and dV in `dtype` (a NumPy or torch dtype as the arrays are; the
    SDPA drop-in's training path stores them in the inputs' dtype), f32 when None; dQ f32 (the fused
    backward adds into it), lse and Delta f32."""
    rows, d = q.shape
    kv_rows = k.shape[0]
    if simulate:
        def new(*shape, dt=None):
            return np.full(shape, np.nan, dt or np.float32)
    else:
        import torch

        def new(*shape, dt=None):
            return torch.full(shape, float("nan"), device=q.device, dtype=dt or torch.float32)
    o, lse, delta, dq = new(rows, d, dt=dtype), new(rows), new(rows), new(rows, d)
    dk, dv = new(kv_rows, d, dt=dtype), new(kv_rows, d, dt=dtype)
    lse_kernel, fwd_args = fwd.lse_launch(q, k, v, o, lse, seq, causal, group=group,
                                          wgmma=not simulate and fwd.on_warpgroup_mma())
    (lse_kernel.simulate if simulate else lse_kernel)(*fwd_args)
    run((steps or launch_args)(q, k, v, o, dout, lse, delta, dq, dk, dv, seq, causal, group=group), simulate)
    return o, dq, dk, dv


def run_gpu(batch: int, heads: int, seq: int, d: int, dtype: str = "bfloat16", kv_heads: int | None = None,
            steps: Any = None, label: str = "") -> None:
    """Ours against torch autograd of SDPA in float64 on the same (rounded) inputs, the error relative to
    the largest gradient: P and dS are rounded to the input dtype for the products, which the lowered
    sm_90 simulator measures at up to 3.3e-3 for bf16 (8-bit mantissa) and 3.0e-4 for f16 (B2 H4 S256);
    the bounds, 1e-2 and 2e-3, leave a factor of 3 and more. `kv_heads` (a divisor of `heads`): grouped-
    query attention, against SDPA's enable_gqa. `steps`: forward_and_backward's (the backward's launches),
    `label` printed with the result."""
    import torch
    import torch.nn.functional as F

    import bridge
    hk = heads if kv_heads is None else kv_heads
    g = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, dout = (torch.randn(batch, h, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
                     for h in (heads, hk, hk, heads))
    for causal in (False, True):
        o, *grads = forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), seq, causal,
                                         group=heads // hk, steps=steps)
        x64 = [x.double().requires_grad_() for x in (q, k, v)]
        ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=hk != heads)
        ref.backward(dout.double())
        worst = 0.0
        for name, ours, x in zip(("dq", "dk", "dv"), grads, x64):
            worst = max(worst, ((ours.reshape(x.shape) - x.grad).abs().max() / x.grad.abs().max()).item())
        print(f"GPU{label} B{batch} H{heads} H_kv{hk} S{seq} D{d} {dtype} causal={causal}: "
              f"max |ours - autograd(f64)| / max |grad| = {worst:.2e}")
        assert worst < (1e-2 if dtype == "bfloat16" else 2e-3), worst
    bridge.current_stream().synchronize()


def run_simulator(seq: int, d: int, group: int = 1, steps: Any = None, label: str = "") -> None:
    rng = np.random.default_rng(0)
    q, dout = (rng.standard_normal((2 * seq, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((2 * seq // group, d)).astype(np.float32) for _ in range(2))
    for causal in (False, True):
        _, *grads = forward_and_backward(q, k, v, dout, seq, causal, simulate=True, group=group, steps=steps)
        ref = reference(q, k, v, dout, seq, causal, group)
        err = max(float(np.abs(g - r).max()) for g, r in zip(grads, ref))
        print(f"simulator{label} S{seq} D{d} group={group} causal={causal}: max |ours - NumPy| over dQ, dK, dV = {err:.2e}")
        assert err < 1e-2, err


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--simulate", action="store_true", help="run on the CPU simulator even with a GPU")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "both"), default="bfloat16",
                    help="input dtype on the GPU (each compiles its own kernels: both takes about twice as long)")
    args = ap.parse_args(argv)
    import bridge
    if bridge.gpu_available() and not args.simulate:
        for d in sorted(TILES):
            for dtype in (("bfloat16", "float16") if args.dtype == "both" else (args.dtype,)):
                run_gpu(2, 4, args.seq, d, dtype)
            run_gpu(2, 4, args.seq, d, kv_heads=2)              # grouped-query attention, 2 heads a group
        print("ran on the GPU")
    else:
        for d in sorted(TILES):
            run_simulator(min(args.seq, 128), d)
        run_simulator(64, 64, group=2)
        print("ran on the CPU simulator" + ("" if args.simulate else f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
