"""The per-kernel switch: every op of the step, by name, with its two sides, and `--dsl` parsing.

    REGISTRY["layernorm_forward"] == {"cpp": kernels_cpp.layernorm_forward, "dsl": kernels_dsl.layernorm_forward}

Names are the C++ kernels' (cpp/kernels/llm/; GELU's f32 kernels without the suffix), plus the ops
whose C++ side is torch: matmul_* (cuBLAS), attention_* (SDPA's memory-efficient kernels), grad_clip.
`--dsl` takes "all", "none", or a comma list of names and families ("layernorm" = both its kernels).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from . import kernels_cpp, kernels_dsl

NAMES: tuple[str, ...] = (
    "encoder_forward", "encoder_backward", "layernorm_forward", "layernorm_backward",
    "matmul_forward", "matmul_backward", "attention_forward", "attention_backward",
    "gelu_forward", "gelu_backward", "residual_forward", "crossentropy_forward", "crossentropy_backward",
    "global_norm_squared", "grad_clip", "adamw_update")

# what runs on the "cpp" side of each op
CPP_SIDE: dict[str, str] = {n: f"cpp/kernels/llm {n}" for n in NAMES}
CPP_SIDE.update({"gelu_forward": "cpp/kernels/llm gelu_forward_f32", "gelu_backward": "cpp/kernels/llm gelu_backward_f32",
                 "matmul_forward": "torch.addmm (cuBLAS)", "matmul_backward": "torch.mm / addmm_ (cuBLAS)",
                 "attention_forward": "torch SDPA memory-efficient kernel",
                 "attention_backward": "torch SDPA memory-efficient backward kernel",
                 "grad_clip": "torch ops"})

REGISTRY: dict[str, dict[str, Callable]] = {n: {"cpp": getattr(kernels_cpp, n), "dsl": getattr(kernels_dsl, n)}
                                            for n in NAMES}


def _family(name: str) -> str:
    return name.rsplit("_", 1)[0] if name.endswith(("_forward", "_backward")) else name


FAMILIES: dict[str, tuple[str, ...]] = {f: tuple(n for n in NAMES if _family(n) == f) for f in map(_family, NAMES)}


class UnknownKernelError(ValueError):
    """`--dsl` named something that is not an op of the step; the message lists the names."""


def parse_dsl(spec: str) -> frozenset[str]:
    """The ops `spec` puts on the DSL side: "all", "none", or comma-separated op and family names."""
    spec = spec.strip()
    if spec == "all":
        return frozenset(NAMES)
    if spec in ("none", ""):
        return frozenset()
    chosen: set[str] = set()
    for item in (s.strip() for s in spec.split(",")):
        if item in REGISTRY:
            chosen.add(item)
        elif item in FAMILIES:
            chosen.update(FAMILIES[item])
        else:
            raise UnknownKernelError(
                f"--dsl: unknown kernel {item!r}; expected 'all', 'none' or a comma list of: "
                f"{', '.join(NAMES)} (or the families {', '.join(sorted(f for f, ns in FAMILIES.items() if len(ns) > 1))})")
    return frozenset(chosen)


def sides(dsl: frozenset[str]) -> dict[str, str]:
    """Op name -> "dsl" or "cpp"."""
    return {n: "dsl" if n in dsl else "cpp" for n in NAMES}


def bind(dsl: frozenset[str]) -> dict[str, Callable]:
    """Op name -> the function of its chosen side."""
    return {n: REGISTRY[n][side] for n, side in sides(dsl).items()}


def random_mix(rng: np.random.Generator) -> frozenset[str]:
    """A mixed step: each op on the DSL side with probability 1/2, never all or none."""
    while True:
        pick = frozenset(n for n in NAMES if rng.random() < 0.5)
        if 0 < len(pick) < len(NAMES):
            return pick


def describe(dsl: frozenset[str]) -> str:
    """'all', 'none' or the sorted comma list (what --dsl takes back)."""
    if dsl == frozenset(NAMES):
        return "all"
    return ",".join(sorted(dsl)) or "none"
