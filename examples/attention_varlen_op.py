"""Variable-length flash attention as a PyTorch op pair with autograd, a drop-in for
torch.nn.attention.varlen.varlen_attn for the cases the kernels cover (self-attention of packed sequences:
one cu_seqlens for queries and keys, full or causal, grouped-query or not; the rest refused with a typed
error before anything runs), and the same kernels under jax.custom_vjp (`jax_varlen_attention`).

    python examples/attention_varlen_op.py        # GPU when present, else the CPU simulator (says which)

The kernels are examples/flash_attention_varlen.py's: sequence_bounds, flash_fwd_varlen_lse and the three
backward kernels. The ops take (total, H, D) tensors as varlen_attn does and return O and the gradients in
the inputs' dtype, as torch's does: the kernels store them so (the backward reads O so).
`max_q` and `max_k` are accepted and not needed (each block finds its key range from the row bounds).
CUDA tensors launch on torch's current stream; CPU tensors run on the simulator (small shapes).
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import attention_op as op  # noqa: E402  (sibling examples, not a package)
import flash_attention_varlen as vl  # noqa: E402

from bridge import DTypeError, ShapeRelationError  # noqa: E402

UnsupportedAttentionError = op.UnsupportedAttentionError


def check_inputs(q: Any, k: Any, v: Any, cu_seqlens: Any, values: bool = True) -> tuple[int, int, int, int]:
    """(total, H, H_kv, D) of varlen_attn-shaped q (total, H, D) and k, v (total, H_kv, D) with H_kv
    dividing H, and int32 cu_seqlens on q's device; else a typed error naming the argument. With
    `values`, CPU offsets are also read (rising from 0 to total); under torch.compile they are read when
    the op runs, since tracing cannot read a tensor's values."""
    if q.ndim != 3:
        raise ShapeRelationError(f"query: expected (total, heads, head_dim), got shape {tuple(q.shape)}",
                                 arg_name="query")
    total, h, d = q.shape
    hk = k.shape[1] if k.ndim == 3 else h
    for name, x in (("key", k), ("value", v)):
        if tuple(x.shape) != (total, hk, d) or hk == 0 or h % hk:
            raise ShapeRelationError(f"{name}: expected shape (total {total}, heads dividing {h} and equal for key "
                                     f"and value, head_dim {d}), got {tuple(x.shape)}", arg_name=name)
        if x.dtype != q.dtype:
            raise DTypeError(f"{name}: expected query's dtype {q.dtype}, got {x.dtype}", arg_name=name)
    for name, x in (("key", k), ("value", v), ("cu_seq_q", cu_seqlens)):
        if x.device != q.device:
            raise UnsupportedAttentionError(name, f"on {x.device}, expected query's device {q.device}")
    if d not in op.HEAD_DIMS:
        raise UnsupportedAttentionError("query", f"head dim {d}: expected one of {op.HEAD_DIMS}")
    import torch
    if cu_seqlens.ndim != 1 or cu_seqlens.shape[0] < 2:
        raise ShapeRelationError(f"cu_seqlens: expected B + 1 >= 2 offsets (1-D), got shape "
                                 f"{tuple(cu_seqlens.shape)}", arg_name="cu_seqlens")
    if cu_seqlens.dtype != torch.int32:
        raise DTypeError(f"cu_seqlens: expected int32, got {cu_seqlens.dtype}", arg_name="cu_seqlens")
    if values and not cu_seqlens.is_cuda:
        vl.check_cu_seqlens(cu_seqlens.numpy(), total)
    return total, h, hk, d


def _bounds(cu_seqlens: Any, total: int, like: Any) -> tuple[list, Any, Any]:
    """[(sequence_bounds, args)] and the (total,) int32 starts and ends it fills."""
    import torch
    starts, ends = (torch.empty(total, dtype=torch.int32, device=like.device) for _ in range(2))
    return [(vl.sequence_bounds, vl.bounds_args(op._view(cu_seqlens), op._view(starts), op._view(ends)))], starts, ends


def define_torch_ops() -> Any:
    """Register kb_attention::varlen_forward and ::varlen_backward (once) and return torch.ops.kb_attention."""
    import torch
    ns = getattr(torch.ops, op.NAMESPACE)
    if hasattr(ns, "varlen_forward"):
        return ns

    @torch.library.custom_op(f"{op.NAMESPACE}::varlen_forward", mutates_args=(),
                             schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens, bool causal, float scale) "
                                    "-> (Tensor, Tensor)")
    def forward(q, k, v, cu_seqlens, causal, scale):
        total, h, hk, d = check_inputs(q, k, v, cu_seqlens)
        o = torch.empty((total, h, d), dtype=q.dtype, device=q.device)     # as attention_op: the inputs' dtype
        lse = torch.empty((total, h), dtype=torch.float32, device=q.device)
        steps, starts, ends = _bounds(cu_seqlens, total, q)
        flat = [op._view(x.reshape(total, -1)) for x in (q, k, v, o)]
        steps.append((vl.flash_fwd_varlen_lse, vl.launch_args(*flat, op._view(starts), op._view(ends), h, causal, hk,
                                                              scale, lse=op._view(lse))))
        op._run(steps, [q, k, v, cu_seqlens, o, lse, starts, ends])
        return o, lse

    @forward.register_fake
    def _(q, k, v, cu_seqlens, causal, scale):
        total, h, _, d = q.shape[0], q.shape[1], k.shape[1], q.shape[2]
        return q.new_empty((total, h, d)), q.new_empty((total, h), dtype=torch.float32)

    @torch.library.custom_op(f"{op.NAMESPACE}::varlen_backward", mutates_args=(),
                             schema="(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, "
                                    "Tensor cu_seqlens, bool causal, float scale) -> (Tensor, Tensor, Tensor)")
    def backward(dout, q, k, v, o, lse, cu_seqlens, causal, scale):
        total, h, hk, d = check_inputs(q, k, v, cu_seqlens)
        dq, dk, dv = (torch.empty(x.shape, dtype=x.dtype, device=q.device) for x in (q, k, v))
        delta = torch.empty((total, h), dtype=torch.float32, device=q.device)
        steps, starts, ends = _bounds(cu_seqlens, total, q)
        flat = [op._view(x.reshape(total, -1)) for x in (q, k, v, o, dout)]
        steps += vl.backward_launch_args(*flat, op._view(lse), op._view(delta), op._view(starts), op._view(ends),
                                         *(op._view(x.reshape(total, -1)) for x in (dq, dk, dv)), h, causal, hk, scale)
        op._run(steps, [dout, q, k, v, o, lse, cu_seqlens, delta, starts, ends, dq, dk, dv])
        return dq, dk, dv

    @backward.register_fake
    def _(dout, q, k, v, o, lse, cu_seqlens, causal, scale):
        return tuple(x.new_empty(x.shape) for x in (q, k, v))

    def setup_context(ctx, inputs, output):
        q, k, v, cu_seqlens, causal, scale = inputs
        ctx.save_for_backward(q, k, v, cu_seqlens, *output)
        ctx.causal, ctx.scale = causal, scale

    def grad(ctx, dout, dlse):
        q, k, v, cu_seqlens, o, lse = ctx.saved_tensors
        dq, dk, dv = ns.varlen_backward(dout.to(q.dtype).contiguous(), q, k, v, o, lse, cu_seqlens, ctx.causal,
                                        ctx.scale)
        return dq, dk, dv, None, None, None

    forward.register_autograd(grad, setup_context=setup_context)
    return ns


def varlen_attn(query: Any, key: Any, value: Any, cu_seq_q: Any, cu_seq_k: Any, max_q: int, max_k: int, *,
                return_aux: Any = None, scale: float | None = None, window_size: tuple[int, int] = (-1, -1),
                enable_gqa: bool = False, seqused_k: Any = None, block_table: Any = None,
                num_splits: int | None = None) -> Any:
    """torch.nn.attention.varlen.varlen_attn on our kernels, with its signature and result dtype, for:
    self-attention (cu_seq_k None or cu_seq_q itself, or equal offsets), window_size (-1, -1) (full) or
    (-1, 0) (causal), key/value heads equal to the query's or dividing them with enable_gqa=True, D in
    HEAD_DIMS, no return_aux, seqused_k or block_table. The result never depends on num_splits (one
    block per query tile: batch-invariant). Anything else raises UnsupportedAttentionError /
    ShapeRelationError / DTypeError naming the argument, before any launch."""
    for name, x in (("return_aux", return_aux), ("seqused_k", seqused_k), ("block_table", block_table)):
        if x is not None:
            raise UnsupportedAttentionError(name, "not supported (expected None)")
    if tuple(window_size) not in ((-1, -1), (-1, 0)):
        raise UnsupportedAttentionError("window_size", f"{tuple(window_size)}: expected (-1, -1) (full) or "
                                                       "(-1, 0) (causal); sliding windows are not supported")
    if cu_seq_k is not None and cu_seq_k is not cu_seq_q:
        import torch
        if torch.compiler.is_compiling():
            raise UnsupportedAttentionError("cu_seq_k", "under torch.compile pass None or the queries' offsets "
                                                        "themselves (comparing values cannot be traced)")
        if cu_seq_k.shape != cu_seq_q.shape or cu_seq_k.device != cu_seq_q.device or not torch.equal(cu_seq_k, cu_seq_q):
            raise UnsupportedAttentionError("cu_seq_k", "expected the queries' offsets (self-attention); "
                                                        "different key offsets are not supported")
    if not enable_gqa and key.ndim == 3 and query.ndim == 3 and key.shape[1] != query.shape[1]:
        raise ShapeRelationError(f"key: {key.shape[1]} heads for {query.shape[1]} query heads needs "
                                 "enable_gqa=True (as torch's varlen_attn)", arg_name="key")
    import torch
    check_inputs(query, key, value, cu_seq_q, values=not torch.compiler.is_compiling())
    d = query.shape[-1]
    o, _ = define_torch_ops().varlen_forward(query.contiguous(), key.contiguous(), value.contiguous(), cu_seq_q,
                                             tuple(window_size) == (-1, 0), float(scale if scale is not None
                                                                                  else d ** -0.5))
    return o


def nested_attention(query: Any, key: Any, value: Any, is_causal: bool = False, scale: float | None = None,
                     enable_gqa: bool = False) -> Any:
    """scaled_dot_product_attention over jagged nested tensors (B, H, j, D), as torch's SDPA takes them
    (attention_op.scaled_dot_product_attention sends nested inputs here): their values are the packed
    (total, H, D) rows and their offsets cu_seqlens, so varlen_attn runs them; the result is a nested
    tensor of the same offsets, in the query's dtype, differentiable. Causal works too (torch's own
    nested SDPA refuses it). Key and value must share the query's offsets (self-attention)."""
    import torch
    rows = []
    for name, x in (("query", query), ("key", key), ("value", value)):
        if not getattr(x, "is_nested", False) or x.layout != torch.jagged or x.dim() != 4 or x._ragged_idx != 2:
            raise UnsupportedAttentionError(name, "expected a jagged nested tensor (layout=torch.jagged) of shape "
                                                  "(B, H, j, D), ragged in its third dimension, like the query")
        rows.append(x.transpose(1, 2))
    offsets = rows[0].offsets()
    for name, x in zip(("key", "value"), rows[1:]):
        theirs = x.offsets()
        if theirs is not offsets and (theirs.shape != offsets.shape or not torch.equal(theirs, offsets)):
            raise UnsupportedAttentionError(name, "expected the query's offsets (self-attention of the same "
                                                  "sequences)")
    out = varlen_attn(*(x.values() for x in rows), offsets.to(torch.int32), None, 0, 0,
                      window_size=(-1, 0) if is_causal else (-1, -1), scale=scale, enable_gqa=enable_gqa)
    return torch.nested.nested_tensor_from_jagged(out, offsets).transpose(1, 2)


# Registered at import, as attention_op's ops are (torch.compile(fullgraph=True) cannot trace registration).
if importlib.util.find_spec("torch") is not None:
    define_torch_ops()


# ---------------------------------------------------------------------------------------------- JAX
def jax_varlen_attention(causal: bool, scale: float | None = None) -> Any:
    """attention(q, k, v, cu_seqlens) for (total, H, D) q and (total, H_kv, D) k, v JAX arrays (H_kv
    dividing H) and int32 offsets, through the same five kernels, differentiable in q, k and v
    (jax.custom_vjp, jitted): returns O in f32. The shapes are static; the offsets are data (a new
    batch of lengths with the same total compiles nothing new)."""
    import jax
    import jax.numpy as jnp

    import dsl

    def calls(q, k, nseq):
        total, h, d = q.shape
        hk = k.shape[1]
        if d not in op.HEAD_DIMS or h % hk or k.shape != (total, hk, d):
            raise ShapeRelationError(f"key: expected (total {total}, heads dividing {h}, head_dim {d} in "
                                     f"{op.HEAD_DIMS}), got {k.shape}", arg_name="key")
        group, sc = h // hk, float(scale if scale is not None else d ** -0.5)
        picked = vl.tiles(d)
        (bm, bn), (kv_rows, q_step), (q_rows, kv_step) = picked["fwd"], picked["dkdv"], picked["dq"]
        bounds = dsl.jax.kernel_call(vl.sequence_bounds, out_shapes={"starts": (total,), "ends": (total,)},
                                     out_dtypes={"starts": "i32", "ends": "i32"},
                                     tiles={"starts": (vl.BOUNDS_ROWS,), "ends": (vl.BOUNDS_ROWS,)},
                                     static={"nseq": nseq, "chunk": vl.BOUNDS_CHUNK})
        f = dsl.jax.kernel_call(vl.flash_fwd_varlen_lse, out_shapes={"o": (total, h * d), "lse": (total, h)},
                                out_dtypes={"o": "f32", "lse": "f32"}, tiles={"o": (bm, d), "lse": (bm, 1)},
                                static={"scale": sc, "bn": bn, "causal": causal, "group": group})
        pre = dsl.jax.kernel_call(vl.varlen_bwd_preprocess, out_shapes={"delta": (total, h)},
                                  tiles={"delta": (vl.PRE_ROWS, 1)}, static={"d": d})
        dkdv = dsl.jax.kernel_call(vl.flash_bwd_dkdv_varlen, out_shapes={"dk": (total, hk * d), "dv": (total, hk * d)},
                                   out_dtypes={"dk": "f32", "dv": "f32"}, tiles={"dk": (kv_rows, d), "dv": (kv_rows, d)},
                                   static={"scale": sc, "bm": q_step, "causal": causal, "group": group})
        dq = dsl.jax.kernel_call(vl.flash_bwd_dq_varlen, out_shapes={"dq": (total, h * d)}, out_dtypes={"dq": "f32"},
                                 tiles={"dq": (q_rows, d)},
                                 static={"scale": sc, "bn": kv_step, "causal": causal, "group": group})
        return bounds, f, pre, dkdv, dq

    def flat(x):
        return x.reshape(x.shape[0], -1)

    def forward(q, k, v, cu_seqlens):
        bounds, f, *_ = calls(q, k, cu_seqlens.shape[0] - 1)
        starts, ends = bounds(cu_seqlens)
        o, lse = f(flat(q), flat(k), flat(v), starts, ends)
        return o.reshape(q.shape), (q, k, v, cu_seqlens, starts, ends, o, lse)

    @jax.custom_vjp
    def attention(q, k, v, cu_seqlens):
        return forward(q, k, v, cu_seqlens)[0]

    def backward(saved, g):
        q, k, v, cu_seqlens, starts, ends, o, lse = saved
        _, _, pre, dkdv, dq = calls(q, k, cu_seqlens.shape[0] - 1)
        q2, k2, v2, g2 = flat(q), flat(k), flat(v), flat(g.astype(q.dtype))
        delta = pre(o, g2)
        dk, dv = dkdv(q2, k2, v2, g2, lse, delta, starts, ends)
        dqv = dq(q2, k2, v2, g2, lse, delta, starts, ends)
        grads = tuple(x.reshape(y.shape).astype(y.dtype) for x, y in ((dqv, q), (dk, k), (dv, v)))
        return (*grads, np.zeros(cu_seqlens.shape, jax.dtypes.float0))

    attention.defvjp(forward, backward)
    jnp.asarray(0)                                  # jax imported and initialised before the first trace
    return jax.jit(attention)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="CPU tensors on the simulator even with a GPU")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import bridge
    gpu = bridge.gpu_available() and not args.simulate
    device, dtype, lengths, d, tol = (("cuda", torch.bfloat16, [300, 1, 700, 64], 128, 2e-2) if gpu
                                      else ("cpu", torch.float32, [37, 1, 90], 64, 5e-3))
    h, hk = 4, 2
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=device)
    total = int(cu[-1])
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn((total, n, d), device=device, dtype=dtype, generator=g).requires_grad_()
               for n in (h, hk, hk))
    for causal in (False, True):
        out = varlen_attn(q, k, v, cu, cu, max(lengths), max(lengths), window_size=(-1, 0) if causal else (-1, -1),
                          enable_gqa=True)
        out.float().square().sum().backward()
        ours = [out.detach().float()] + [x.grad.float() for x in (q, k, v)]
        for x in (q, k, v):
            x.grad = None
        refs = [torch.zeros(x.shape, dtype=torch.float64, device=device) for x in ours]
        for a, e in zip(cu[:-1].tolist(), cu[1:].tolist()):
            x64 = [x.detach()[a:e].double().transpose(0, 1).requires_grad_() for x in (q, k, v)]
            ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=True)
            ref.square().sum().backward()
            for whole, part in zip(refs, [ref.detach()] + [x.grad for x in x64]):
                whole[a:e] = part.transpose(0, 1)
        worst = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours, refs))
        print(f"{'GPU' if gpu else 'simulator'} lengths {lengths} H{h} H_kv{hk} D{d} {dtype} causal={causal}: max "
              f"relative error of O, dQ, dK, dV against autograd of SDPA per sequence in float64: {worst:.2e}")
        assert worst < tol, worst
    print("ran on the GPU" if gpu else "ran on the CPU simulator" + ("" if args.simulate else
                                                                     f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
