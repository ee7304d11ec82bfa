"""The GPT-2 training step over flat parameter / gradient / AdamW buffers and per-layer activations
(llm.c's layout), each elementary op called through the registry on the side `--dsl` chose.

One step: encoder -> L x (LN, qkv matmul, attention, proj matmul, residual, LN, fc matmul, GELU, proj
matmul, residual) -> LN -> tied classifier -> fused cross-entropy; the backward through all of it
(the residual stream's gradient accumulates in one buffer, as the layernorm backward kernels add into
dinp); the squared global norm, clipping on the device, AdamW. Nothing reads the device inside a
step: the loss and norm are read after it.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import registry
from .config import GPT2Config, is_stacked, layer_stride, param_offsets, param_shapes
from .runtime import Runtime

INIT_STD = 0.02


def init_params(cfg: GPT2Config) -> np.ndarray:
    """The flat f32 parameter buffer from cfg.seed: weights N(0, 0.02) (residual projections scaled by
    1/sqrt(2L), GPT-2's), biases 0, layernorm weights 1; the vocabulary padding rows of wte 0."""
    rng = np.random.default_rng(cfg.seed)
    flat = np.zeros(param_offsets(cfg)[1], np.float32)
    for name, shape in param_shapes(cfg).items():
        for sl, sub in layer_slices(cfg, name, shape):
            if name.startswith("ln"):
                value = np.ones(sub) if name.endswith("w") else np.zeros(sub)
            elif name.endswith("b"):
                value = np.zeros(sub)
            else:
                std = INIT_STD / math.sqrt(2 * cfg.n_layer) if name in ("attprojw", "fcprojw") else INIT_STD
                value = rng.normal(0.0, std, sub)
                if name == "wte":
                    value[cfg.vocab_size:] = 0.0
            flat[sl] = value.astype(np.float32).reshape(-1)
    return flat


def layer_slices(cfg: GPT2Config, name: str, shape: tuple[int, ...]) -> list[tuple[slice, tuple[int, ...]]]:
    """(slice of the flat buffer, shape) of `name`, one per layer for a stacked parameter."""
    offset = param_offsets(cfg)[0][name]
    if not is_stacked(name):
        return [(slice(offset, offset + math.prod(shape)), shape)]
    stride, n = layer_stride(shape), math.prod(shape[1:])
    return [(slice(offset + l * stride, offset + l * stride + n), shape[1:]) for l in range(shape[0])]


def batch(cfg: GPT2Config, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic (inputs (B, T), targets (B*T,)) int32 for `step`, from cfg.seed: each row walks the
    vocabulary by steps of 1-3 from a random start, so the next token is learnable (loss falls from
    ln V towards ln 3)."""
    rng = np.random.default_rng((cfg.seed, step))
    B, T, V = cfg.batch_size, cfg.seq_len, cfg.vocab_size
    walk = rng.integers(0, V, (B, 1)) + np.cumsum(rng.integers(1, 4, (B, T + 1)), axis=1)
    tokens = (walk % V).astype(np.int32)
    return tokens[:, :-1].copy(), tokens[:, 1:].reshape(-1).copy()


class Activations:
    """The forward's saved activations (per layer: leading axis L) and the backward's scratch."""

    def __init__(self, rt: Runtime) -> None:
        c, z = rt.cfg, rt.lib.zeros
        L, BT, C, Vp = c.n_layer, c.tokens, c.n_embd, c.padded_vocab_size
        self.encoded = z((c.batch_size, c.seq_len, C))
        for name in ("ln1", "atty", "attproj", "residual2", "ln2", "fcproj", "residual3"):
            setattr(self, name, z((L, BT, C)))
        for name in ("ln1_mean", "ln1_rstd", "ln2_mean", "ln2_rstd"):
            setattr(self, name, z((L, BT)))
        self.qkv, self.lse = z((L, BT, 3 * C)), z((L, c.batch_size * c.n_head * c.seq_len))
        self.fch, self.fch_gelu = z((L, BT, 4 * C)), z((L, BT, 4 * C))
        self.lnf, self.lnf_mean, self.lnf_rstd = z((BT, C)), z((BT,)), z((BT,))
        self.logits, self.losses = z((BT, Vp)), z((BT,))
        self.dresidual, self.dln, self.datty = z((BT, C)), z((BT, C)), z((BT, C))
        self.dqkv, self.dfch, self.dfch_gelu, self.dlogits = z((BT, 3 * C)), z((BT, 4 * C)), z((BT, 4 * C)), z((BT, Vp))


class GPT2:
    """Buffers and the step of one model; `ops[name]` is the chosen side of registry op `name`."""

    def __init__(self, rt: Runtime, dsl: frozenset[str]) -> None:
        self.rt, self.cfg, self.dsl = rt, rt.cfg, dsl
        self.sides = registry.sides(dsl)
        self.ops: dict[str, Callable] = registry.bind(dsl)
        lib, c = rt.lib, rt.cfg
        _, total = param_offsets(c)
        self.params, self.grads, self.m, self.v = (lib.zeros((total,)) for _ in range(4))
        self.p, self.g = self._views(self.params), self._views(self.grads)
        self.acts = Activations(rt)
        self.inputs, self.targets = lib.zeros((c.batch_size, c.seq_len), "int32"), lib.zeros((c.tokens,), "int32")
        self.dlosses = lib.from_numpy(np.full(c.tokens, 1.0 / c.tokens, np.float32))   # d(mean loss)/d(loss_i)
        self.norm_sq = lib.zeros((1,))
        self.load_params(init_params(c))

    def _views(self, flat: Any) -> dict[str, Any]:
        """name -> view, or a list of per-layer views for a stacked parameter."""
        out: dict[str, Any] = {}
        for name, shape in param_shapes(self.cfg).items():
            views = [self.rt.lib.view(flat, sl.start, sub) for sl, sub in layer_slices(self.cfg, name, shape)]
            out[name] = views if is_stacked(name) else views[0]
        return out

    def load_params(self, flat: np.ndarray) -> None:
        self.params[...] = self.rt.lib.from_numpy(flat)

    def set_batch(self, inputs: np.ndarray, targets: np.ndarray) -> None:
        """Copy the next batch into the fixed input buffers (before the step: a graph replays on them)."""
        self.inputs[...] = self.rt.lib.from_numpy(inputs)
        self.targets[...] = self.rt.lib.from_numpy(targets)

    # ---- the step ----------------------------------------------------------------------------------
    def forward(self) -> None:
        rt, op, p, a, c = self.rt, self.ops, self.p, self.acts, self.cfg
        op["encoder_forward"](rt, a.encoded, self.inputs, p["wte"], p["wpe"])
        residual = a.encoded.reshape(c.tokens, c.n_embd)
        for l in range(c.n_layer):
            op["layernorm_forward"](rt, a.ln1[l], a.ln1_mean[l], a.ln1_rstd[l], residual, p["ln1w"][l], p["ln1b"][l])
            op["matmul_forward"](rt, a.qkv[l], a.ln1[l], p["qkvw"][l], p["qkvb"][l])
            op["attention_forward"](rt, a.atty[l], a.lse[l], a.qkv[l])
            op["matmul_forward"](rt, a.attproj[l], a.atty[l], p["attprojw"][l], p["attprojb"][l])
            op["residual_forward"](rt, _flat(a.residual2[l]), _flat(residual), _flat(a.attproj[l]))
            op["layernorm_forward"](rt, a.ln2[l], a.ln2_mean[l], a.ln2_rstd[l], a.residual2[l], p["ln2w"][l],
                                    p["ln2b"][l])
            op["matmul_forward"](rt, a.fch[l], a.ln2[l], p["fcw"][l], p["fcb"][l])
            op["gelu_forward"](rt, _flat(a.fch_gelu[l]), _flat(a.fch[l]))
            op["matmul_forward"](rt, a.fcproj[l], a.fch_gelu[l], p["fcprojw"][l], p["fcprojb"][l])
            op["residual_forward"](rt, _flat(a.residual3[l]), _flat(a.residual2[l]), _flat(a.fcproj[l]))
            residual = a.residual3[l]
        op["layernorm_forward"](rt, a.lnf, a.lnf_mean, a.lnf_rstd, residual, p["lnfw"], p["lnfb"])
        op["matmul_forward"](rt, a.logits, a.lnf, p["wte"], None)
        op["crossentropy_forward"](rt, a.losses, a.logits, self.targets, c.vocab_size)

    def backward(self) -> None:
        rt, op, p, g, a, c = self.rt, self.ops, self.p, self.g, self.acts, self.cfg
        rt.lib.fill(self.grads, 0.0)
        rt.lib.fill(a.dresidual, 0.0)
        recompute = self.sides["attention_forward"] != self.sides["attention_backward"]
        op["crossentropy_backward"](rt, a.dlogits, a.logits, self.dlosses, self.targets, c.vocab_size)
        op["matmul_backward"](rt, a.dln, g["wte"], None, a.dlogits, a.lnf, p["wte"])
        op["layernorm_backward"](rt, a.dresidual, g["lnfw"], g["lnfb"], a.dln, a.residual3[c.n_layer - 1],
                                 p["lnfw"], a.lnf_mean, a.lnf_rstd)
        for l in reversed(range(c.n_layer)):
            residual = a.encoded.reshape(c.tokens, c.n_embd) if l == 0 else a.residual3[l - 1]
            # a.dresidual is the gradient of residual3[l], so of fcproj[l] and residual2[l]
            op["matmul_backward"](rt, a.dfch_gelu, g["fcprojw"][l], g["fcprojb"][l], a.dresidual, a.fch_gelu[l],
                                  p["fcprojw"][l])
            op["gelu_backward"](rt, _flat(a.dfch), _flat(a.fch[l]), _flat(a.dfch_gelu))
            op["matmul_backward"](rt, a.dln, g["fcw"][l], g["fcb"][l], a.dfch, a.ln2[l], p["fcw"][l])
            op["layernorm_backward"](rt, a.dresidual, g["ln2w"][l], g["ln2b"][l], a.dln, a.residual2[l],
                                     p["ln2w"][l], a.ln2_mean[l], a.ln2_rstd[l])
            op["matmul_backward"](rt, a.datty, g["attprojw"][l], g["attprojb"][l], a.dresidual, a.atty[l],
                                  p["attprojw"][l])
            op["attention_backward"](rt, a.dqkv, a.datty, a.qkv[l], a.atty[l], a.lse[l], recompute)
            op["matmul_backward"](rt, a.dln, g["qkvw"][l], g["qkvb"][l], a.dqkv, a.ln1[l], p["qkvw"][l])
            op["layernorm_backward"](rt, a.dresidual, g["ln1w"][l], g["ln1b"][l], a.dln, residual, p["ln1w"][l],
                                     a.ln1_mean[l], a.ln1_rstd[l])
        op["encoder_backward"](rt, g["wte"], g["wpe"], a.dresidual.reshape(c.batch_size, c.seq_len, c.n_embd),
                               self.inputs)

    def clip(self) -> None:
        """norm_sq = |grads|^2 (kept: the step's grad norm), then grads scaled to norm <= grad_clip."""
        self.rt.lib.fill(self.norm_sq, 0.0)
        self.ops["global_norm_squared"](self.rt, self.norm_sq, self.grads)
        self.ops["grad_clip"](self.rt, self.grads, self.norm_sq, self.cfg.grad_clip)

    def update(self, t: int) -> None:
        """AdamW step t >= 1 (the gradients are already clipped: grad_scale 1)."""
        c = self.cfg
        self.ops["adamw_update"](self.rt, self.params, self.m, self.v, self.grads, c.lr, c.beta1, c.beta2, c.eps,
                                 c.weight_decay, 1.0, t)

    def step(self, t: int) -> None:
        """One whole training step on the current batch (no host read)."""
        self.forward()
        self.backward()
        self.clip()
        self.update(t)

    # ---- read after a step -------------------------------------------------------------------------
    def loss(self) -> float:
        return float(self.rt.lib.to_numpy(self.acts.losses).astype(np.float64).mean())

    def grad_norm(self) -> float:
        """The global gradient norm before clipping."""
        return float(np.sqrt(self.rt.lib.to_numpy(self.norm_sq).astype(np.float64)[0]))


def _flat(a: Any) -> Any:
    return a.reshape(-1)
