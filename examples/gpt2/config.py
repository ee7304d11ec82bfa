"""GPT-2 model and training configurations, and where each parameter lives in the one flat buffer.

All parameters sit in one flat f32 array (as in llm.c), so AdamW and the global norm are one launch
each over all of them; each parameter is a view at an offset rounded up to 64 elements, so every view
is 256-byte aligned (the C++ kernels' 16-byte Packed128 accesses and the tile GEMM's cp.async / TMA
copies need 16). The gaps hold zeros, get zero gradients and so never change.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

ALIGN = 64                       # elements: 256 bytes of f32
HEAD_DIMS = (64, 128)            # what examples/flash_attention.py supports
SEQ_MULTIPLE = 64                # its tile rows: T must be a multiple


class ConfigError(ValueError):
    """A configuration the step cannot run; the message names the field and what was expected."""


@dataclass(frozen=True)
class GPT2Config:
    """Model shape, batch and optimiser settings. Defaults: GPT-2 small (124M), batch 8 x 1024."""
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    padded_vocab_size: int = 50304          # V rounded up to a multiple of 128 (faster classifier GEMM)
    max_seq_len: int = 1024
    batch_size: int = 8
    seq_len: int = 1024
    lr: float = 3e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 1337
    attn_dtype: str = "float16"             # the DSL attention's q/k/v/dO (f32 accumulation)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len

    def validate(self) -> GPT2Config:
        """Raise ConfigError naming the first field that cannot run; return self."""
        checks = [
            ("n_head", self.n_head > 0 and self.n_embd % self.n_head == 0,
             f"a divisor of n_embd={self.n_embd}"),
            ("n_embd", self.n_head > 0 and self.n_embd // self.n_head in HEAD_DIMS,
             f"n_head * a head dim of {HEAD_DIMS} (flash attention's); head dim "
             f"{self.n_embd / max(self.n_head, 1):g}"),
            ("n_embd", self.n_embd % 4 == 0, "a multiple of 4 (the C++ kernels' 16-byte accesses)"),
            ("seq_len", 0 < self.seq_len <= self.max_seq_len and self.seq_len % SEQ_MULTIPLE == 0,
             f"a multiple of {SEQ_MULTIPLE} in (0, max_seq_len={self.max_seq_len}]"),
            ("padded_vocab_size", self.padded_vocab_size >= self.vocab_size > 0,
             f">= vocab_size={self.vocab_size} > 0"),
            ("batch_size", self.batch_size > 0, "> 0"),
            ("n_layer", self.n_layer > 0, "> 0"),
            ("attn_dtype", self.attn_dtype in ("float16", "bfloat16", "float32"), "float16, bfloat16 or float32"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ConfigError(f"{name}: expected {expected}, got {getattr(self, name)!r}")
        return self

    def replace(self, **changes: object) -> GPT2Config:
        return dataclasses.replace(self, **changes).validate()


CONFIGS: dict[str, GPT2Config] = {
    "small": GPT2Config(),
    # the CPU simulator's: 2 layers, 64 channels (head dim 64: one head), 97 tokens padded to 128
    "tiny": GPT2Config(n_layer=2, n_head=1, n_embd=64, vocab_size=97, padded_vocab_size=128, max_seq_len=64,
                       batch_size=2, seq_len=64, lr=1e-3, seed=7),
    # a small GPU check: 2 layers, 2 heads, 128 channels, T 256
    "mini": GPT2Config(n_layer=2, n_head=2, n_embd=128, vocab_size=1000, padded_vocab_size=1024, max_seq_len=256,
                       batch_size=4, seq_len=256, lr=1e-3, seed=11),
}


def config(name: str, **changes: object) -> GPT2Config:
    """The named configuration, with `changes` applied, validated."""
    if name not in CONFIGS:
        raise ConfigError(f"config: expected one of {sorted(CONFIGS)}, got {name!r}")
    return CONFIGS[name].replace(**changes)


def param_shapes(c: GPT2Config) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor in buffer order (llm.c's), per-layer tensors stacked on a leading L."""
    C, L, V, T = c.n_embd, c.n_layer, c.padded_vocab_size, c.max_seq_len
    return {"wte": (V, C), "wpe": (T, C),
            "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
            "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def param_offsets(c: GPT2Config) -> tuple[dict[str, int], int]:
    """(offset of each parameter in the flat buffer, total elements): every tensor, and every layer's
    slice of a stacked one (layer_stride apart), starts at a multiple of ALIGN."""
    offsets, at = {}, 0
    for name, shape in param_shapes(c).items():
        offsets[name] = at
        at += layer_stride(shape) * shape[0] if is_stacked(name) else _round_up(math.prod(shape), ALIGN)
    return offsets, at


def layer_stride(shape: tuple[int, ...]) -> int:
    """Elements between consecutive layers' slices of a stacked parameter."""
    return _round_up(math.prod(shape[1:]), ALIGN)


def is_stacked(name: str) -> bool:
    """Whether parameter `name` has one slice per layer (a leading L axis)."""
    return name not in ("wte", "wpe", "lnfw", "lnfb")


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def real_param_count(c: GPT2Config) -> int:
    """Parameters without the alignment gaps (GPT-2 small with the padded vocabulary: 124,475,904)."""
    return sum(math.prod(s) for s in param_shapes(c).values())
