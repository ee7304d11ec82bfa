"""Flash attention as a framework operation, forward AND backward: a PyTorch custom op pair with autograd
(torch.compile(fullgraph=True) traces it, torch.library.opcheck passes), a drop-in for
torch.nn.functional.scaled_dot_product_attention for the cases the kernels cover (others refused with a
typed error before anything runs), and the same kernels under jax.custom_vjp.

    python examples/attention_op.py            # GPU when present, else the CPU simulator (says which)

The kernels are examples/flash_attention.py's `flash_fwd_lse` (output and each query row's log-sum-exp)
and examples/flash_attention_bwd.py's three backward kernels, or, where it is faster (sm_90, D64 and
D128, flash_attention_bwd_fused.FASTEST) and determinism is not asked for, the fused backward of
examples/flash_attention_bwd_fused.py (`backward_form`). The ops take (B, H, S, D) tensors, work
on their (B*H*S, D) row stacks (a view of a contiguous tensor) and return O and the gradients in the
inputs' dtype, as SDPA does: the kernels store them so (the backward reads O so, half the bytes of f32);
only the fused backward's dQ is summed in f32 (it adds into it atomically) and converted at the end. Where
no gradient is wanted (torch.no_grad, or inputs that do not require one) it runs ::infer instead:
flash_fwd writing O in the inputs' dtype, without the log-sum-exp, on the fastest fixed form measured for
the head dim (flash_attention.infer_launch). CUDA tensors launch on torch's current stream (capturable in
CUDA graphs); CPU tensors run the kernels on the simulator (small shapes: it is an interpreter). In eager
mode on plain tensors the drop-in calls the ops' implementations directly (`eager_path`: torch.library's
dispatch costs more host time than the rest of a call); compiling, tracing, FakeTensors, vmap and torch
modes go through the registered ops.
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import flash_attention as fwd  # noqa: E402  (sibling examples, not a package)
import flash_attention_bwd as bwd  # noqa: E402
import flash_attention_bwd_fused as fused  # noqa: E402

from bridge import DTypeError, ShapeRelationError  # noqa: E402

NAMESPACE = "kb_attention"
HEAD_DIMS = tuple(sorted(fwd.TILES))
SEQ_MULTIPLE = 64                      # every tile choice of both passes divides a multiple of 64


class UnsupportedAttentionError(ValueError):
    """An SDPA argument these kernels do not cover (mask, dropout, ...): refused before any launch."""

    def __init__(self, arg: str, message: str) -> None:
        super().__init__(f"scaled_dot_product_attention: {arg}: {message}")
        self.arg_name = arg


# ------------------------------------------------------------------------------------------- checks
def check_inputs(q: Any, k: Any, v: Any) -> tuple[int, int, int, int, int]:
    """(B, H, S, D, group) of SDPA-shaped q, k, v that the kernels take, else a typed error naming the
    argument. key and value may have fewer heads H_kv dividing H (grouped-query attention: `group` =
    H / H_kv query heads share each key/value head, as SDPA's enable_gqa)."""
    if q.ndim != 4:
        raise ShapeRelationError(f"query: expected (batch, heads, seq, head_dim), got shape {tuple(q.shape)}",
                                 arg_name="query")
    b, h, s, d = q.shape
    hk = k.shape[1] if k.ndim == 4 else h
    for name, x in (("key", k), ("value", v)):
        if tuple(x.shape) != (b, hk, s, d) or hk == 0 or h % hk:
            raise ShapeRelationError(f"{name}: expected shape (batch {b}, heads dividing {h} and equal for key "
                                     f"and value, seq {s}, head_dim {d}) (self-attention of one length), got "
                                     f"{tuple(x.shape)}", arg_name=name)
        if x.dtype != q.dtype:
            raise DTypeError(f"{name}: expected query's dtype {q.dtype}, got {x.dtype}", arg_name=name)
        if hasattr(q, "is_cuda") and x.device != q.device:      # torch tensors (JAX places by its own rules)
            raise UnsupportedAttentionError(name, f"on {x.device}, expected query's device {q.device}")
    if d not in HEAD_DIMS:
        raise UnsupportedAttentionError("query", f"head dim {d}: expected one of {HEAD_DIMS}")
    if s % SEQ_MULTIPLE:
        raise UnsupportedAttentionError("query", f"sequence length {s}: expected a multiple of {SEQ_MULTIPLE}")
    return b, h, s, d, h // hk


# -------------------------------------------------------------------------------------------- torch
def _host(t: Any) -> np.ndarray:
    """A NumPy view (no copy) of a CPU tensor, bfloat16 through its bits: the simulator writes into it."""
    import torch
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _run(steps: list[tuple[Any, tuple]], tensors: list[Any]) -> None:
    """Launch [(kernel, args)] on torch's current stream (CUDA tensors) or simulate them (CPU tensors,
    whose NumPy views the args already are)."""
    if tensors[0].is_cuda:
        import dsl
        with dsl.torch.launching(*tensors) as stream:
            for kernel, args in steps:
                kernel(*args, stream=stream)
    else:
        for kernel, args in steps:
            kernel.simulate(*args)


_SIDE_STREAMS: dict[Any, Any] = {}   # device -> the fused backward's high-priority stream (a cache: made once)


def _side_stream(device: Any) -> Any:
    import torch
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device, priority=-1)    # above the default priority, 0
    return _SIDE_STREAMS[device]


def run_converting(stages: Any, dq: Any, dq_out: Any, tensors: list[Any]) -> None:
    """Run the fused backward's `stages` (flash_attention_bwd_fused.Stages) and convert its f32 dQ sum `dq`
    into `dq_out` (the inputs' dtype). CUDA tensors: the launches run on a stream of higher priority than
    torch's current one, and the rows the first stage finishes are converted on the current stream meanwhile,
    so the block scheduler gives the conversion only the SMs the second stage's last wave leaves idle; the
    current stream then waits for both (what any later op, or a CUDA graph's capture, sees). CPU tensors: in
    order on the simulator."""
    if not tensors[0].is_cuda or not stages.rest:      # nothing to overlap: in order
        _run(stages.first + stages.rest, tensors)
        dq_out.copy_(dq)
        return
    import torch
    main = torch.cuda.current_stream(dq.device)
    side = _side_stream(dq.device)
    side.wait_stream(main)
    first_done = torch.cuda.Event()
    with torch.cuda.stream(side):
        _run(stages.first, tensors)
        first_done.record(side)
        _run(stages.rest, tensors)
        dq_out[stages.done:].copy_(dq[stages.done:])
    main.wait_event(first_done)
    dq_out[:stages.done].copy_(dq[:stages.done])
    main.wait_stream(side)


def _view(t: Any) -> Any:
    return t if t.is_cuda else _host(t)


def _on_warpgroup_mma(t: Any) -> bool:
    """Do this tensor's kernels run their products on warpgroup MMA: a CUDA tensor where
    flash_attention.on_warpgroup_mma says so (CPU tensors run on the simulator)."""
    return bool(t.is_cuda) and fwd.on_warpgroup_mma()


def backward_form(q: Any, seq: int, causal: bool = False) -> str | None:
    """The fused backward's form (examples/flash_attention_bwd_fused.py: dQ added atomically, so its last
    bits depend on the order blocks run in) where it is the faster backward for q's head dim, length and
    `causal` on this GPU, else None: the two-kernel backward, which is also what runs, bit for bit repeatable,
    under torch.use_deterministic_algorithms(True)."""
    import torch
    if torch.are_deterministic_algorithms_enabled():
        return None
    return fused.pick_form(q.shape[-1], seq, _on_warpgroup_mma(q), causal)


def _forward(q: Any, k: Any, v: Any, causal: bool, scale: float) -> tuple[Any, Any]:
    """(O, lse): kb_attention::forward's implementation (and the eager path's)."""
    import torch
    b, h, s, d, group = check_inputs(q, k, v)
    o = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)     # as SDPA returns it; the backward reads it
    lse = torch.empty((b, h, s), dtype=torch.float32, device=q.device)
    rows = [_view(x.reshape(-1, d)) for x in (q, k, v, o)]
    _run([fwd.lse_launch(*rows, _view(lse.reshape(-1)), s, causal, scale, group=group,
                         wgmma=_on_warpgroup_mma(q))], [q, k, v, o, lse])
    return o, lse


def _infer(q: Any, k: Any, v: Any, causal: bool, scale: float) -> Any:
    """O without the log-sum-exp: kb_attention::infer's implementation (and the eager path's)."""
    import torch
    b, h, s, d, group = check_inputs(q, k, v)
    o = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)
    rows = [_view(x.reshape(-1, d)) for x in (q, k, v, o)]
    _run([fwd.infer_launch(*rows, s, causal, scale, group=group, wgmma=_on_warpgroup_mma(q))], [q, k, v, o])
    return o


def _backward(dout: Any, q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool, scale: float) -> tuple[Any, Any, Any]:
    """(dQ, dK, dV): kb_attention::backward's implementation (and the eager path's)."""
    import torch
    b, h, s, d, group = check_inputs(q, k, v)
    # the gradients stored by the kernels in the inputs' dtype; the fused kernel's dQ summed in f32 (it adds
    # into it atomically), then converted
    form = backward_form(q, s, causal)
    new = [torch.empty(q.shape, dtype=q.dtype if form is None else torch.float32, device=q.device),
           *(torch.empty(x.shape, dtype=x.dtype, device=q.device) for x in (k, v))]
    delta = torch.empty((b * h * s,), dtype=torch.float32, device=q.device)
    rows = [_view(x.reshape(-1, d)) for x in (q, k, v, o, dout)]
    arrays = (*rows, _view(lse.reshape(-1)), _view(delta), *(_view(x.reshape(-1, d)) for x in new))
    tensors = [q, k, v, o, dout, lse, delta, *new]
    if form is None:
        _run(bwd.launch_args(*arrays, s, causal, scale, group=group), tensors)
        return new[0], new[1], new[2]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    stages = fused.staged_launch_args(*arrays, s, causal, scale, group=group, **fused.form_options(form))
    run_converting(stages, new[0].reshape(-1, d), dq.reshape(-1, d), tensors + [dq])
    return dq, new[1], new[2]


def _gradients(backward: Any, saved: tuple, dout: Any, causal: bool, scale: float) -> tuple[Any, Any, Any]:
    """(dQ, dK, dV) of the saved (q, k, v, O, lse) for O's cotangent `dout`, through `backward` (the op or
    its implementation). The kernels read dO in the inputs' dtype (as FlashAttention does); lse is a
    statistic, not an output anyone differentiates (its cotangent is ignored)."""
    q, k, v, o, lse = saved
    return backward(dout.to(q.dtype).contiguous(), q, k, v, o, lse, causal, scale)


def define_torch_ops() -> Any:
    """Register kb_attention::forward, ::infer and ::backward (once per process) and return
    torch.ops.kb_attention."""
    import torch
    ns = getattr(torch.ops, NAMESPACE)
    if hasattr(ns, "forward"):
        return ns
    forward = torch.library.custom_op(f"{NAMESPACE}::forward", _forward, mutates_args=(), schema=(
        "(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> (Tensor, Tensor)"))

    @forward.register_fake
    def _(q, k, v, causal, scale):
        b, h, s, d, _ = check_inputs(q, k, v)
        return q.new_empty((b, h, s, d)), q.new_empty((b, h, s), dtype=torch.float32)

    infer = torch.library.custom_op(f"{NAMESPACE}::infer", _infer, mutates_args=(), schema=(
        "(Tensor q, Tensor k, Tensor v, bool causal, float scale) -> Tensor"))

    @infer.register_fake
    def _(q, k, v, causal, scale):
        b, h, s, d, _ = check_inputs(q, k, v)
        return q.new_empty((b, h, s, d))

    backward = torch.library.custom_op(f"{NAMESPACE}::backward", _backward, mutates_args=(), schema=(
        "(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal, float scale) -> "
        "(Tensor, Tensor, Tensor)"))

    @backward.register_fake
    def _(dout, q, k, v, o, lse, causal, scale):
        return tuple(x.new_empty(x.shape) for x in (q, k, v))

    def setup_context(ctx, inputs, output):
        q, k, v, causal, scale = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.causal, ctx.scale = causal, scale

    def grad(ctx, dout, dlse):
        return (*_gradients(ns.backward, ctx.saved_tensors, dout, ctx.causal, ctx.scale), None, None)

    forward.register_autograd(grad, setup_context=setup_context)
    return ns


@functools.cache
def _eager_function() -> Any:
    """The eager path's autograd.Function over the implementations (made once: torch is optional here)."""
    import torch
    from torch.autograd.function import once_differentiable

    class EagerAttention(torch.autograd.Function):
        """kb_attention::forward's autograd without torch.library's dispatch (eager_path)."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale):
            o, lse = _forward(q, k, v, causal, scale)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.scale = causal, scale
            return o

        @staticmethod
        @once_differentiable                # as the op's: its backward has no gradient of its own
        def backward(ctx, dout):
            return (*_gradients(_backward, ctx.saved_tensors, dout, ctx.causal, ctx.scale), None, None)

    return EagerAttention


_PLAIN_KEYS: dict[Any, Any] = {}   # device -> a plain tensor's dispatch keys there (a cache: they never change)


def eager_path(tensors: tuple) -> bool:
    """May the drop-in call its implementations directly, not through torch.library's ops: torch.library's
    dispatch costs ~80 us of host time a call (H100 machine, 2026-12-07), more than everything else the call
    does. Yes in eager mode (not compiling or tracing) with no torch function or dispatch mode active, for
    plain tensors: no subclass (FakeTensor), vmap or functionalization wrapper, whose dispatch keys differ
    from a plain tensor's. Everything else takes the registered ops, which those modes see."""
    import torch
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    try:
        if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
            return False
        dev = tensors[0].device
        if dev not in _PLAIN_KEYS:
            _PLAIN_KEYS[dev] = torch._C._dispatch_keys(torch.empty(0, device=dev))
        return all(type(t) is torch.Tensor and torch._C._dispatch_keys(t) == _PLAIN_KEYS[dev] for t in tensors)
    except AttributeError:          # a torch without these internals: the ops, always right
        return False


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Any:
    """torch.nn.functional.scaled_dot_product_attention on our kernels, with its signature and result
    dtype, for: no mask, no dropout, query (B, H, S, D) and key/value (B, H_kv, S, D) with H_kv = H, or
    H_kv dividing H with enable_gqa=True (as SDPA requires), D in HEAD_DIMS, S a multiple of 64,
    f16/bf16 on the GPU (any float dtype the simulator takes on the CPU); or jagged nested tensors
    (B, H, j, D) of sequences of any lengths, causal or not (attention_varlen_op.nested_attention). Anything else raises
    UnsupportedAttentionError / ShapeRelationError / DTypeError naming the argument, before any launch."""
    if attn_mask is not None:
        raise UnsupportedAttentionError("attn_mask", "masks are not supported (use is_causal=True for causal)")
    if dropout_p != 0.0:
        raise UnsupportedAttentionError("dropout_p", f"{dropout_p}: only 0.0 is supported")
    if any(getattr(x, "is_nested", False) for x in (query, key, value)):
        import attention_varlen_op                 # packed sequences of different lengths: the varlen kernels
        return attention_varlen_op.nested_attention(query, key, value, is_causal, scale, enable_gqa)
    if not enable_gqa and key.ndim == 4 and query.ndim == 4 and key.shape[1] != query.shape[1]:
        raise ShapeRelationError(f"key: {key.shape[1]} heads for {query.shape[1]} query heads needs "
                                 "enable_gqa=True (as torch's SDPA)", arg_name="key")
    check_inputs(query, key, value)
    import torch
    d = query.shape[-1]
    ops = define_torch_ops()
    qkv = (query.contiguous(), key.contiguous(), value.contiguous())
    scale = float(scale if scale is not None else d ** -0.5)
    eager = eager_path(qkv)
    if not (torch.is_grad_enabled() and any(x.requires_grad for x in qkv)):
        # no gradient wanted: O in q's dtype, no lse
        return (_infer if eager else ops.infer)(*qkv, bool(is_causal), scale)
    if eager:
        return _eager_function().apply(*qkv, bool(is_causal), scale)
    o, _ = ops.forward(*qkv, bool(is_causal), scale)
    return o


# Registered at import (when torch is installed), not at the first call: a first call inside
# torch.compile(fullgraph=True) would have Dynamo trace torch.library's registration, which it refuses.
if importlib.util.find_spec("torch") is not None:
    define_torch_ops()


# ---------------------------------------------------------------------------------------------- JAX
def jax_attention(causal: bool, scale: float | None = None, deterministic: bool | None = None) -> Any:
    """attention(q, k, v) for (B, H, S, D) q and (B, H_kv, S, D) k, v (H_kv dividing H: grouped-query
    attention) JAX arrays, differentiable (jax.custom_vjp; jax.jit works around it): returns O in f32. Its
    backward is the torch op's: the fused kernel (dQ added atomically) where it is measured faster on this GPU
    (flash_attention_bwd_fused.pick_form), else the three kernels, which also run, bit for bit repeatable, when
    `deterministic` is True (None: when XLA_FLAGS asks XLA's own ops for it, `--xla_gpu_exclude_nondeterministic_ops`
    or its older name `--xla_gpu_deterministic_ops`; XLA's scatter and attention are not deterministic either
    without it)."""
    import jax

    import dsl
    if deterministic is None:
        flags = os.environ.get("XLA_FLAGS", "").lower().split()
        deterministic = any(f"--xla_gpu_{name}={on}" in flags for name in ("exclude_nondeterministic_ops",
                                                                        "deterministic_ops") for on in ("true", "1"))

    def calls(q, k):
        b, h, s, d, group = check_inputs(q, k, k)
        rows, kv_rows, sc = b * h * s, b * (h // group) * s, float(scale if scale is not None else d ** -0.5)
        standin = np.broadcast_to(np.float32(0), (rows, d))          # shape only: the kernel and tiles it picks
        wgmma = fwd.on_warpgroup_mma()             # the variants the torch ops launch (lse_launch, kernels_for)
        lse_kernel, picked = fwd.lse_launch(standin, standin[:kv_rows], standin[:kv_rows], standin, standin[:, 0],
                                            s, causal, group=group, wgmma=wgmma)
        bm, bn = picked[3].tile_shape[0], picked[7]
        f = dsl.jax.kernel_call(lse_kernel, out_shapes={"o": (rows, d), "lse": (rows,)},
                                out_dtypes={"o": "f32", "lse": "f32"}, tiles={"o": (bm, d), "lse": (bm,)},
                                static={"seq": s, "scale": sc, "bn": bn, "causal": causal, "group": group})
        form = None if deterministic else fused.pick_form(d, s, wgmma, causal)
        gradients = (_jax_three_kernels(dsl, d, s, rows, kv_rows, sc, causal, group, wgmma) if form is None
                     else _jax_fused(dsl, form, d, s, rows, kv_rows, sc, causal, group, wgmma))
        return (b, h, s, d), f, gradients

    @jax.custom_vjp
    def attention(q, k, v):
        return forward(q, k, v)[0]

    def forward(q, k, v):
        shape, f, *_ = calls(q, k)
        d = shape[-1]
        o, lse = f(*(x.reshape(-1, d) for x in (q, k, v)))
        return o.reshape(shape), (q, k, v, o, lse)

    def backward(saved, g):
        q, k, v, o, lse = saved
        shape, _, gradients = calls(q, k)
        d = shape[-1]
        q2, k2, v2, g2 = (x.reshape(-1, d) for x in (q, k, v, g.astype(q.dtype)))
        dq, dk, dv = gradients(q2, k2, v2, g2, o, lse)
        return tuple(x.reshape(y.shape).astype(y.dtype) for x, y in ((dq, q), (dk, k), (dv, v)))

    attention.defvjp(lambda q, k, v: forward(q, k, v), backward)
    return jax.jit(attention)


def _jax_three_kernels(dsl: Any, d: int, s: int, rows: int, kv_rows: int, sc: float, causal: bool, group: int,
                       wgmma: bool) -> Any:
    """gradients(q, k, v, dout, o, lse) -> (dQ, dK, dV) in f32 through the preprocess, dK/dV and dQ kernels."""
    own, stream = bwd.pick_tiles(d, s)
    dkdv_kernel, dq_kernel = bwd.kernels_for(d, wgmma)
    pre = dsl.jax.kernel_call(bwd.attn_bwd_preprocess, out_shapes={"delta": (rows,)},
                              tiles={"delta": (bwd.PRE_ROWS,)}, static={"d": d})
    dkdv = dsl.jax.kernel_call(dkdv_kernel, out_shapes={"dk": (kv_rows, d), "dv": (kv_rows, d)},
                               out_dtypes={"dk": "f32", "dv": "f32"}, tiles={"dk": (own, d), "dv": (own, d)},
                               static={"seq": s, "scale": sc, "bm": stream, "causal": causal, "group": group})
    dq = dsl.jax.kernel_call(dq_kernel, out_shapes={"dq": (rows, d)}, out_dtypes={"dq": "f32"},
                             tiles={"dq": (own, d)},
                             static={"seq": s, "scale": sc, "bn": stream, "causal": causal, "group": group})

    def gradients(q2, k2, v2, g2, o, lse):
        delta = pre(o, g2)
        dk, dv = dkdv(q2, k2, v2, g2, lse, delta)
        return dq(q2, k2, v2, g2, lse, delta), dk, dv
    return gradients


def _jax_fused(dsl: Any, form: str, d: int, s: int, rows: int, kv_rows: int, sc: float, causal: bool, group: int,
               wgmma: bool) -> Any:
    """gradients(q, k, v, dout, o, lse) -> (dQ, dK, dV) in f32 through the fused backward in LADDER form `form`:
    its preprocess (Delta, and dQ zeroed) and one fused launch adding into that dQ (the XLA buffer passed
    through, mutates=). The kernels, constants and tiles are those fused.launch_args gives the torch op, read
    off its launches for stand-in arrays; unsplit and without PDL (the last wave's split needs scratch of the
    arrays' library)."""
    standin = np.broadcast_to(np.float32(0), (rows, d))           # shape only
    kv = standin[:kv_rows]
    steps = fused.launch_args(standin, kv, kv, standin, standin, standin[:, 0], standin[:, 0], standin, kv, kv, s,
                              causal, sc, wgmma=wgmma, group=group,
                              **{**fused.form_options(form), "split": False, "pdl": False})
    (pre_kernel, pre_args), (kernel, args) = steps

    def bound(kern: Any, launch: tuple) -> tuple[dict, dict]:
        """(static, tiles) of a launch: its scalars and constants, its partitions' tile shapes."""
        pairs = list(zip(kern.specs, launch))
        return ({spec.name: a for spec, a in pairs if spec.kind in ("scalar", "const")},
                {spec.name: a.tile_shape for spec, a in pairs if spec.kind == "partition"})
    pre_static, pre_tiles = bound(pre_kernel, pre_args)
    static, tiles = bound(kernel, args)
    pre = dsl.jax.kernel_call(pre_kernel, out_shapes={"delta": (rows,), "dq": (rows, d)}, tiles=pre_tiles,
                              static=pre_static)
    main = dsl.jax.kernel_call(kernel, mutates="dq", out_shapes={"dk": (kv_rows, d), "dv": (kv_rows, d)},
                               out_dtypes={"dk": "f32", "dv": "f32"}, tiles=tiles, static=static)

    def gradients(q2, k2, v2, g2, o, lse):
        delta, dq = pre(o, g2)
        return main(q2, k2, v2, g2, lse, delta, dq)
    return gradients


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--simulate", action="store_true", help="CPU tensors on the simulator even with a GPU")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import bridge
    gpu = bridge.gpu_available() and not args.simulate
    device, dtype, shape, tol = (("cuda", torch.bfloat16, (2, 4, 256, 128), 2e-2) if gpu
                                 else ("cpu", torch.float32, (1, 2, 64, 64), 5e-3))
    g = torch.Generator(device=device).manual_seed(0)
    b, h, s, d = shape
    for kv_heads in (h, h // 2):                    # plain, then grouped-query attention (2 heads a group)
        q, k, v = (torch.randn((b, hh, s, d), device=device, dtype=dtype, generator=g).requires_grad_()
                   for hh in (h, kv_heads, kv_heads))
        gqa = kv_heads != h
        for causal in (False, True):
            out = scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
            out.float().square().sum().backward()
            ours = [out.detach().float()] + [x.grad.float() for x in (q, k, v)]
            for x in (q, k, v):
                x.grad = None
            x64 = [x.detach().double().requires_grad_() for x in (q, k, v)]
            ref = F.scaled_dot_product_attention(*x64, is_causal=causal, enable_gqa=gqa)
            ref.square().sum().backward()
            refs = [ref.detach()] + [x.grad for x in x64]
            worst = max(((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours, refs))
            print(f"{'GPU' if gpu else 'simulator'} {tuple(shape)} H_kv {kv_heads} {dtype} causal={causal}: max "
                  f"relative error of O, dQ, dK, dV against autograd of SDPA in float64: {worst:.2e} (backward: "
                  f"{backward_form(q, s, causal) or 'two kernels'})")
            assert worst < tol, worst
    print("ran on the GPU" if gpu else "ran on the CPU simulator" + ("" if args.simulate else
                                                                     f" (no GPU: {bridge.gpu_unavailable_reason()})"))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
