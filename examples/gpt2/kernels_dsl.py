"""The "dsl" side of every op of the step: the DSL ports of cpp/kernels/llm/ (examples/llm_kernels/,
each under its C++ kernel's name, launched with the C++ call's arguments less the sizes their arrays
carry), the tile GEMMs and helpers of tile_kernels.py, and tile flash attention
(examples/flash_attention.py forward with its log-sum-exp, examples/flash_attention_bwd.py backward).

Every function takes the Runtime first and then the same arrays as its "cpp" twin (kernels_cpp.py).
On the simulator each launch is `kernel.simulate(...)` on NumPy views of the same buffers.
"""
from __future__ import annotations

import math
from typing import Any

from examples import flash_attention_bwd as flash_bwd
from examples import llm_kernels as ports
from examples.llm_kernels import global_norm as gn

from . import tile_kernels as K
from .runtime import Runtime

flash_fwd = flash_bwd.fwd       # the forward module the backward example imports (one copy of its kernels)
BK = 32                         # K tile of the f32 (tf32) GEMMs: 128-byte operand rows
HEAD_ROWS = 64                  # rows of a head-split tile (T is a multiple of 64)
T_TILE = (64, 64)               # transposes, split sums
DW_TILE = (128, 128)            # dW's TN GEMM: 128 rows, the tf32 wgmma loop's (any size: smaller ones pay masking)
MAX_SPLITS, MIN_SPLIT_K_TILES = 8, 8
DX_LAYOUT = "wt"                # dX = dY @ W: "wt" (W^T written, NT GEMM) or "nn" (W as stored)
DW_LAYOUTS = ("stored", "xt", "tt")   # dW += dY^T X: both as stored (TN); X^T written; dY^T and X^T written (NT)
DW_LAYOUT = "tt"                # the step's: fastest at every GPT-2 small shape (benchmarks/gpt2_step.py's
                                # per-op table); dY^T's scratch holds the classifier's (B*T*Vp floats)
BIAS_TILE, BIAS_ROWS = 64, 128  # bias gradient: columns a block, rows a step
CLIP_TILE = 2048
WIDE_TILE = (128, 256)          # the forward GEMMs' output tile where the grid fills its waves (gemm_tile)


def gemm_tile(m: int, n: int, sms: int) -> tuple[int, int]:
    """The output tile of an m x n GEMM on `sms` SMs: 64 x 64 when either is small; WIDE_TILE (more
    reuse of each operand tile) when its grid is at least 4 waves and fills >= 90 % of its last
    one, else 128 x 128 (wgmma-sized). Measured (GPT-2 small, H200): 128 x 256 wins for OC 3072 and
    the classifier, ties at 2304 (4.4 waves), loses at 768 (1.5 waves)."""
    if min(m, n) < 512:
        return (64, 64)
    waves = -(-m // WIDE_TILE[0]) * -(-n // WIDE_TILE[1]) / sms
    return WIDE_TILE if waves >= 4 and waves / math.ceil(waves) >= 0.9 else (128, 128)


def encoder_forward(rt: Runtime, out: Any, inp: Any, wte: Any, wpe: Any) -> None:
    rt.launch(ports.port("encoder_forward"), out, inp, wte, wpe)


def encoder_backward(rt: Runtime, dwte: Any, dwpe: Any, dout: Any, inp: Any) -> None:
    rt.launch(ports.port("encoder_backward"), dwte, dwpe, dout, inp)


def layernorm_forward(rt: Runtime, out: Any, mean: Any, rstd: Any, inp: Any, weight: Any, bias: Any) -> None:
    rt.launch(ports.port("layernorm_forward"), out, mean, rstd, inp, weight, bias)


def layernorm_backward(rt: Runtime, dinp: Any, dweight: Any, dbias: Any, dout: Any, inp: Any, weight: Any,
                       mean: Any, rstd: Any) -> None:
    rt.launch(ports.port("layernorm_backward"), dinp, dweight, dbias, dout, inp, weight, mean, rstd)


def gelu_forward(rt: Runtime, out: Any, inp: Any) -> None:
    rt.launch(ports.port("gelu_forward_f32"), out, inp)


def gelu_backward(rt: Runtime, dinp: Any, inp: Any, dout: Any) -> None:
    rt.launch(ports.port("gelu_backward_f32"), dinp, inp, dout)


def residual_forward(rt: Runtime, out: Any, inp1: Any, inp2: Any) -> None:
    rt.launch(ports.port("residual_forward"), out, inp1, inp2)


def crossentropy_forward(rt: Runtime, losses: Any, logits: Any, targets: Any, V: int) -> None:
    rt.launch(ports.port("crossentropy_forward"), losses, logits, targets, V)


def crossentropy_backward(rt: Runtime, dlogits: Any, logits: Any, dlosses: Any, targets: Any, V: int) -> None:
    rt.launch(ports.port("crossentropy_backward"), dlogits, logits, dlosses, targets, V)


def global_norm_squared(rt: Runtime, out: Any, values: Any) -> None:
    rt.launch(gn.global_norm_squared, out, rt.part(values, (gn.TILE,)))


def adamw_update(rt: Runtime, params: Any, m: Any, v: Any, grads: Any, lr: float, beta1: float, beta2: float,
                 eps: float, weight_decay: float, grad_scale: float, t: int) -> None:
    rt.launch(ports.port("adamw_update"), params, m, v, grads, lr, beta1, beta2, eps, weight_decay, grad_scale, t)


def grad_clip(rt: Runtime, grads: Any, norm_sq: Any, max_norm: float) -> None:
    rt.launch(K.clip_by_norm, rt.part(grads, (CLIP_TILE,)), norm_sq, max_norm)


# ---- the linear layer ------------------------------------------------------------------------------
def matmul_forward(rt: Runtime, out: Any, inp: Any, weight: Any, bias: Any | None) -> None:
    linear_forward(rt, out, inp, weight, bias, gemm_tile(*out.shape, rt.sm_count))


def linear_forward(rt: Runtime, out: Any, inp: Any, weight: Any, bias: Any | None,
                   out_tile: tuple[int, int]) -> None:
    """out = inp @ weight^T (+ bias) with output tiles of `out_tile` (benchmarks/gpt2_step.py's per-op
    table also times another tile than gemm_tile's)."""
    part = rt.part(out, out_tile)
    if bias is None:
        rt.launch(K.linear_nobias, inp, weight, part, BK)
    else:
        rt.launch(K.linear_bias, inp, weight, bias, part, BK)


def _flat_scratch(rt: Runtime, name: str, size: int, shape: tuple[int, int]) -> Any:
    return rt.lib.view(rt.scratch(name, (size,)), 0, shape)


def _transposed(rt: Runtime, name: str, x: Any, size: int) -> Any:
    """x^T written into scratch `name` (`size` elements: room for the step's largest x)."""
    xt = _flat_scratch(rt, name, size, x.shape[::-1])
    rt.launch(K.transpose, x, rt.part(xt, T_TILE))
    return xt


def dw_splits(tiles: int, k_tiles: int, sms: int) -> int:
    """How many K splits dW's GEMM takes: the fewest s whose tiles * s blocks fill their waves to >= 80%
    (a 128 x 128 tf32 block's stages take 192 KiB: one block an SM), else the fullest; each split keeps
    >= MIN_SPLIT_K_TILES k tiles. GPT-2 small, 132 SMs: 3 for the 768 x 768 and 3072 x 768 weights, 1
    for qkv's (108 tiles) and the classifier's (2358)."""
    best, best_fill = 1, 0.0
    for s in range(1, MAX_SPLITS + 1):
        if s > 1 and k_tiles < s * MIN_SPLIT_K_TILES:
            break
        blocks = tiles * s
        fill = blocks / (-(-blocks // sms) * sms)
        if fill >= 0.8:
            return s
        if fill > best_fill:
            best, best_fill = s, fill
    return best


def weight_grad(rt: Runtime, dweight: Any, dout: Any, inp: Any, layout: str = "stored") -> None:
    """dweight += dout^T @ inp, K split over idle SMs. `layout` (DW_LAYOUTS): "stored" reads both as
    stored (TN: both through the transposing register stage, tile_kernels.py); "xt" writes inp^T first
    (one read and one write of an activation), so B comes by TMA and only dout goes through registers;
    "tt" writes dout^T too, so the GEMM is the NT loop with both operands by TMA. Shapes that disagree
    go to the stored kernel, whose contract refuses them before anything (a transpose too) runs."""
    if layout not in DW_LAYOUTS:
        raise ValueError(f"layout: expected one of {', '.join(map(repr, DW_LAYOUTS))}, got {layout!r}")
    OC, C = dweight.shape
    bm, bn = DW_TILE
    tiles = -(-OC // bm) * -(-C // bn)
    splits = dw_splits(tiles, -(-inp.shape[0] // BK), rt.sm_count)
    agree = dout.shape[1] == OC and inp.shape[1] == C and dout.shape[0] == inp.shape[0]
    if not agree:
        layout = "stored"
    a, b, acc_kernel, split_kernel = dout, inp, K.matmul_tn_acc, K.matmul_tn_split
    if layout != "stored":
        c = rt.cfg
        tokens = c.batch_size * c.seq_len
        b = _transposed(rt, "inp_t", inp, max(tokens * 4 * c.n_embd, inp.shape[0] * inp.shape[1]))
        acc_kernel, split_kernel = K.matmul_tn_acc_xt, K.matmul_tn_split_xt
    if layout == "tt":
        a = _transposed(rt, "dout_t", dout, max(tokens * max(4 * c.n_embd, c.padded_vocab_size),
                                                 dout.shape[0] * dout.shape[1]))
        acc_kernel, split_kernel = K.matmul_nt_acc, K.matmul_nt_split
    if splits == 1 or not agree:        # shapes that disagree: the one-pass kernel's contract names the relation
        rt.launch(acc_kernel, a, b, rt.part(dweight, DW_TILE), BK)
        return
    rows = splits * -(-OC // bm) * bm
    partial = rt.scratch(f"dweight_partial_{rows}x{C}", (rows, C))      # one per shape, made on first use
    rt.launch(split_kernel, a, b, rt.part(partial, DW_TILE), BK)
    rt.launch(K.add_splits, partial, rt.part(dweight, T_TILE), splits)


def input_grad(rt: Runtime, dinp: Any, dout: Any, weight: Any, layout: str) -> None:
    """dinp = dout @ weight: "wt" writes weight^T once (a weight: 1/N of the GEMM's traffic) and runs
    the NT GEMM (TMA + tf32 wgmma on sm_90); "nn" reads weight as stored (row-major B: mma.sync, or
    tf32 wgmma through the register stage under KB_TILE_TF32_TRANSPOSE=1)."""
    N, C = dinp.shape
    if layout == "nn":
        rt.launch(K.matmul_nn, dout, weight, rt.part(dinp, gemm_tile(N, C, rt.sm_count)), BK)
        return
    if layout != "wt":
        raise ValueError(f"layout: expected 'wt' or 'nn', got {layout!r}")
    c = rt.cfg
    wt = _transposed(rt, "weight_t", weight, c.n_embd * max(c.padded_vocab_size, 4 * c.n_embd))
    rt.launch(K.linear_nobias, dout, wt, rt.part(dinp, gemm_tile(N, C, rt.sm_count)), BK)


def matmul_backward(rt: Runtime, dinp: Any, dweight: Any, dbias: Any | None, dout: Any, inp: Any, weight: Any) -> None:
    """dinp = dout @ weight; dweight += dout^T @ inp; dbias += the sum of dout's rows (linear_backward
    with DX_LAYOUT and DW_LAYOUT)."""
    linear_backward(rt, dinp, dweight, dbias, dout, inp, weight, DX_LAYOUT, DW_LAYOUT)


def linear_backward(rt: Runtime, dinp: Any, dweight: Any, dbias: Any | None, dout: Any, inp: Any, weight: Any,
                    dx_layout: str, dw_layout: str = "stored") -> None:
    """dinp = dout @ weight (`dx_layout`: input_grad); dweight += dout^T @ inp (`dw_layout`:
    weight_grad); dbias += the sum of dout's rows (its own kernel: the fast GEMM loops take a loop body
    of one product, so the column sum cannot ride in the dW loop)."""
    input_grad(rt, dinp, dout, weight, dx_layout)
    weight_grad(rt, dweight, dout, inp, dw_layout)
    if dbias is not None:
        rt.launch(K.colsum_add, dout, rt.part(dbias, (BIAS_TILE,)), BIAS_ROWS)


# ---- attention -------------------------------------------------------------------------------------
def _stack(rt: Runtime, name: str, dtype: str = "float32") -> Any:
    c = rt.cfg
    return rt.scratch(name, (c.batch_size * c.n_head * c.seq_len, c.head_dim), dtype)


def _split(rt: Runtime, src: Any, dst: Any, col0: int) -> None:
    c = rt.cfg
    rt.launch(K.heads_from, src, rt.part(dst, (HEAD_ROWS, c.head_dim)), c.n_head, c.seq_len, col0)


def _split_qkv(rt: Runtime, qkv: Any) -> tuple[Any, Any, Any]:
    stacks = tuple(_stack(rt, n, rt.cfg.attn_dtype) for n in ("q", "k", "v"))
    for i, dst in enumerate(stacks):
        _split(rt, qkv, dst, i * rt.cfg.n_head)
    return stacks


def _flash_forward(rt: Runtime, q: Any, k: Any, v: Any, o: Any, lse: Any) -> None:
    args = flash_fwd.launch_args_lse(*(rt.arg(a) for a in (q, k, v, o, lse)), rt.cfg.seq_len, True)
    rt.launch(flash_fwd.flash_fwd_lse, *args)


def attention_forward(rt: Runtime, out: Any, lse: Any, qkv: Any) -> None:
    """Causal attention of the (B*T, 3C) qkv activation into (B*T, C) `out`, and each query row's
    log-sum-exp into `lse` (B*H*T): heads split into row stacks (cast to cfg.attn_dtype), flash
    attention, heads merged back."""
    c = rt.cfg
    q, k, v = _split_qkv(rt, qkv)
    o = _stack(rt, "o")
    _flash_forward(rt, q, k, v, o, lse)
    rt.launch(K.heads_to, o, rt.part(out, (HEAD_ROWS, c.head_dim)), c.n_head, c.seq_len)


def attention_backward(rt: Runtime, dqkv: Any, dout: Any, qkv: Any, out: Any, lse: Any, recompute: bool) -> None:
    """dqkv from dout; `recompute`: the forward ran on the other side, so its out / lse are rebuilt here."""
    c = rt.cfg
    q, k, v = _split_qkv(rt, qkv)
    o, do = _stack(rt, "o"), _stack(rt, "do", c.attn_dtype)
    if recompute:
        _flash_forward(rt, q, k, v, o, lse)
    else:
        _split(rt, out, o, 0)
    _split(rt, dout, do, 0)
    dq, dk, dv = (_stack(rt, n) for n in ("dq", "dk", "dv"))
    delta = rt.scratch("delta", (c.batch_size * c.n_head * c.seq_len,))
    steps = flash_bwd.launch_args(*(rt.arg(a) for a in (q, k, v, o, do, lse, delta, dq, dk, dv)), c.seq_len, True)
    for kernel, args in steps:
        rt.launch(kernel, *args)
    rt.launch(K.heads_to_qkv, dq, dk, dv, rt.part(dqkv, (HEAD_ROWS, c.head_dim)), c.n_head, c.seq_len)
