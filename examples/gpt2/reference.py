"""The same GPT-2 in plain eager PyTorch (torch.nn, autograd, torch.optim.AdamW,
clip_grad_norm_), loaded with the same initial weights, trained on the same batches: what the step's
loss and gradient norm are checked against. Float64 by default, so the difference measured is the
step's own rounding (f32 activations, tf32 GEMMs, f16 attention operands on the DSL side).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import GPT2Config, param_shapes
from .model import batch, layer_slices


class Attention(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.n_head = c.n_head
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd, eps=1e-5), nn.LayerNorm(c.n_embd, eps=1e-5)
        self.attn = Attention(c)
        self.c_fc, self.c_proj = nn.Linear(c.n_embd, 4 * c.n_embd), nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class ReferenceGPT2(nn.Module):
    """GPT-2 with a tied classifier over the padded vocabulary, the loss over the first V columns."""

    def __init__(self, c: GPT2Config) -> None:
        super().__init__()
        self.cfg = c
        self.wte = nn.Embedding(c.padded_vocab_size, c.n_embd)
        self.wpe = nn.Embedding(c.max_seq_len, c.n_embd)
        self.h = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.ln_f = nn.LayerNorm(c.n_embd, eps=1e-5)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits[..., :self.cfg.vocab_size].reshape(-1, self.cfg.vocab_size), targets)

    def tensors(self) -> dict[str, list[torch.Tensor]]:
        """Our flat layout's names -> this model's parameters (one per layer for the stacked ones)."""
        L = range(self.cfg.n_layer)
        per = {"ln1w": "ln_1.weight", "ln1b": "ln_1.bias", "qkvw": "attn.c_attn.weight", "qkvb": "attn.c_attn.bias",
               "attprojw": "attn.c_proj.weight", "attprojb": "attn.c_proj.bias", "ln2w": "ln_2.weight",
               "ln2b": "ln_2.bias", "fcw": "c_fc.weight", "fcb": "c_fc.bias", "fcprojw": "c_proj.weight",
               "fcprojb": "c_proj.bias"}
        named = dict(self.named_parameters())
        out = {"wte": [self.wte.weight], "wpe": [self.wpe.weight], "lnfw": [self.ln_f.weight], "lnfb": [self.ln_f.bias]}
        out.update({k: [named[f"h.{l}.{v}"] for l in L] for k, v in per.items()})
        return out

    @torch.no_grad()
    def load_flat(self, flat: np.ndarray) -> None:
        """Copy our flat parameter buffer in."""
        tensors = self.tensors()
        for name, shape in param_shapes(self.cfg).items():
            for t, (sl, sub) in zip(tensors[name], layer_slices(self.cfg, name, shape)):
                t.copy_(torch.from_numpy(flat[sl].reshape(sub)))


def reference_run(cfg: GPT2Config, flat: np.ndarray, steps: int, device: str = "cpu",
                  dtype: Any = torch.float64) -> list[tuple[float, float]]:
    """(loss, gradient norm before clipping) of each of `steps` training steps from weights `flat`."""
    model = ReferenceGPT2(cfg).to(device=device, dtype=dtype)
    model.load_flat(flat)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                            weight_decay=cfg.weight_decay)
    out = []
    for step in range(steps):
        inputs, targets = batch(cfg, step)
        loss = model(torch.from_numpy(inputs).long().to(device), torch.from_numpy(targets).long().to(device))
        opt.zero_grad(set_to_none=False)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        out.append((float(loss.detach()), float(norm)))
    return out


def reference_grads(cfg: GPT2Config, flat: np.ndarray, step: int = 0, device: str = "cpu",
                    dtype: Any = torch.float64) -> tuple[float, dict[str, list[np.ndarray]]]:
    """(loss, name -> the gradient of each of its tensors, unclipped) of one forward and backward on
    batch(cfg, step) from weights `flat`."""
    model = ReferenceGPT2(cfg).to(device=device, dtype=dtype)
    model.load_flat(flat)
    inputs, targets = batch(cfg, step)
    loss = model(torch.from_numpy(inputs).long().to(device), torch.from_numpy(targets).long().to(device))
    loss.backward()
    return float(loss.detach()), {k: [t.grad.detach().cpu().numpy() for t in ts] for k, ts in model.tensors().items()}
