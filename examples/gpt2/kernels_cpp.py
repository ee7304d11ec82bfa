"""The "cpp" side of every op of the step: the CUDA C++ kernels of cpp/kernels/llm/ (installed fatbins,
contracts embedded, launched through the bridge's validator), and torch for the three ops that have
no kernel there: the linear layer (cuBLAS: torch.addmm / mm), attention (the memory-efficient
attention kernels torch's SDPA runs for f32, called directly so their backward runs in this thread
with no autograd engine) and the clipping scale (a few torch ops on the device norm).

Every function takes the Runtime first and then the same arrays as its "dsl" twin (kernels_dsl.py).
Grids are the ones llm.c uses: the C++ kernels stride over rows, so any grid is correct.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from .runtime import Runtime

LN_WARPS = 8                    # rows a 256-thread layernorm block owns at a time


def encoder_forward(rt: Runtime, out: Any, inp: Any, wte: Any, wpe: Any) -> None:
    B, T, C = out.shape
    rt.cpp("encoder_forward")[(math.ceil(B * T * C / 4 / 256),), 256](out, inp, wte, wpe, B, T, C, wte.shape[0])


def encoder_backward(rt: Runtime, dwte: Any, dwpe: Any, dout: Any, inp: Any) -> None:
    B, T, C = dout.shape
    rt.cpp("encoder_backward")[(math.ceil(B * T * C / 256),), 256](dwte, dwpe, dout, inp, B, T, C, dwte.shape[0])


def layernorm_forward(rt: Runtime, out: Any, mean: Any, rstd: Any, inp: Any, weight: Any, bias: Any) -> None:
    N, C = inp.shape
    rt.cpp("layernorm_forward")[(math.ceil(N / LN_WARPS),), 256](out, mean, rstd, inp, weight, bias, N, C)


def layernorm_backward(rt: Runtime, dinp: Any, dweight: Any, dbias: Any, dout: Any, inp: Any, weight: Any,
                       mean: Any, rstd: Any) -> None:
    N, C = inp.shape
    grid = (min(math.ceil(N / LN_WARPS), 4 * rt.sm_count),)     # few blocks: few global atomics per column
    rt.cpp("layernorm_backward")[grid, 256](dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C)


def gelu_forward(rt: Runtime, out: Any, inp: Any) -> None:
    rt.cpp("gelu_forward_f32")(out, inp, len(out), block=512)


def gelu_backward(rt: Runtime, dinp: Any, inp: Any, dout: Any) -> None:
    rt.cpp("gelu_backward_f32")(dinp, inp, dout, len(dinp), block=512)


def residual_forward(rt: Runtime, out: Any, inp1: Any, inp2: Any) -> None:
    rt.cpp("residual_forward")(out, inp1, inp2, len(out), block=512)


def crossentropy_forward(rt: Runtime, losses: Any, logits: Any, targets: Any, V: int) -> None:
    N, Vp = logits.shape
    rt.cpp("crossentropy_forward")[(N,), 1024](losses, logits, targets, N, V, Vp)


def crossentropy_backward(rt: Runtime, dlogits: Any, logits: Any, dlosses: Any, targets: Any, V: int) -> None:
    N, Vp = logits.shape
    rt.cpp("crossentropy_backward")[(N,), 1024](dlogits, logits, dlosses, targets, N, V, Vp)


def global_norm_squared(rt: Runtime, out: Any, values: Any) -> None:
    rt.cpp("global_norm_squared")(out, values, len(values))


def adamw_update(rt: Runtime, params: Any, m: Any, v: Any, grads: Any, lr: float, beta1: float, beta2: float,
                 eps: float, weight_decay: float, grad_scale: float, t: int) -> None:
    rt.cpp("adamw_update")(params, m, v, grads, len(params), lr, beta1, beta2, eps, weight_decay, grad_scale, t,
                           block=512)


# ---- torch: cuBLAS, attention, clipping ------------------------------------------------------------
def matmul_forward(rt: Runtime, out: Any, inp: Any, weight: Any, bias: Any | None) -> None:
    import torch
    o, x, w = rt.torch(out), rt.torch(inp), rt.torch(weight)
    if bias is None:
        torch.mm(x, w.t(), out=o)
    else:
        torch.addmm(rt.torch(bias), x, w.t(), out=o)


def matmul_backward(rt: Runtime, dinp: Any, dweight: Any, dbias: Any | None, dout: Any, inp: Any, weight: Any) -> None:
    """dinp = dout @ weight; dweight += dout^T @ inp; dbias += the sum of dout's rows."""
    import torch
    dy = rt.torch(dout)
    torch.mm(dy, rt.torch(weight), out=rt.torch(dinp))
    rt.torch(dweight).addmm_(dy.t(), rt.torch(inp))
    if dbias is not None:
        rt.torch(dbias).add_(dy.sum(dim=0))


def _heads(rt: Runtime, a: Any, parts: int) -> list[Any]:
    """(B, H, T, D) views of the `parts` C-wide column blocks of a (B*T, parts*C) activation."""
    c = rt.cfg
    x = rt.torch(a).view(c.batch_size, c.seq_len, parts, c.n_head, c.head_dim)
    return [x[:, :, p].permute(0, 2, 1, 3) for p in range(parts)]


def sdpa_efficient() -> tuple[Callable, Callable]:
    """torch's memory-efficient attention forward and backward ops (CUDA only; a CPU test stands in)."""
    import torch
    aten = torch.ops.aten
    return aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_efficient_attention_backward


def _efficient_forward(rt: Runtime, qkv: Any) -> tuple[Any, Any]:
    q, k, v = _heads(rt, qkv, 3)
    out, lse, seed, offset = sdpa_efficient()[0](q, k, v, None, True, 0.0, True)
    rt.state.setdefault("philox", (seed, offset))    # unused without dropout, but the backward takes them
    return out, lse


def attention_forward(rt: Runtime, out: Any, lse: Any, qkv: Any) -> None:
    """Causal attention of the (B*T, 3C) qkv activation into (B*T, C) `out`, and each query row's
    log-sum-exp into `lse` (B*H*T)."""
    y, l = _efficient_forward(rt, qkv)
    _heads(rt, out, 1)[0].copy_(y)
    c = rt.cfg
    rt.torch(lse).view(c.batch_size, c.n_head, c.seq_len).copy_(l[..., :c.seq_len])


def attention_backward(rt: Runtime, dqkv: Any, dout: Any, qkv: Any, out: Any, lse: Any, recompute: bool) -> None:
    """dqkv from dout; `recompute`: the forward ran on the other side, so its out / lse are rebuilt here."""
    import torch
    c = rt.cfg
    q, k, v = _heads(rt, qkv, 3)
    if recompute:
        o, l = _efficient_forward(rt, qkv)
    else:
        o, l = _heads(rt, out, 1)[0], rt.torch(lse).view(c.batch_size, c.n_head, c.seq_len)
    seed, offset = rt.state.get("philox") or (torch.zeros((), dtype=torch.int64),) * 2
    dq, dk, dv, _ = sdpa_efficient()[1](_heads(rt, dout, 1)[0], q, k, v, None, o, l, seed, offset, 0.0,
                                        [True, True, True, False], True)
    for dst, g in zip(_heads(rt, dqkv, 3), (dq, dk, dv)):
        dst.copy_(g)


def grad_clip(rt: Runtime, grads: Any, norm_sq: Any, max_norm: float) -> None:
    """grads *= min(1, max_norm / (sqrt(norm_sq) + 1e-6)), on the device (no host read)."""
    import torch
    scale = torch.sqrt(rt.torch(norm_sq)).add_(1e-6).reciprocal_().mul_(max_norm).clamp_(max=1.0)
    rt.torch(grads).mul_(scale)
