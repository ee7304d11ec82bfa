"""The seeded random mixes the GPT-2 step tests run (registry.random_mix: each op on the DSL side with
probability 1/2, never all or none), and test ids that show each mix's DSL side, e.g.
`mix3[dsl:lnF+mmB+attF+ceB+clip]`."""
from __future__ import annotations

import numpy as np

from examples.gpt2 import registry

_FAMILY = {"encoder": "enc", "layernorm": "ln", "matmul": "mm", "attention": "att", "gelu": "gelu",
           "residual": "res", "crossentropy": "ce"}
_WHOLE = {"global_norm_squared": "norm", "grad_clip": "clip", "adamw_update": "adamw"}


def mix(seed: int) -> frozenset[str]:
    """The ops on the DSL side in mix `seed`."""
    return registry.random_mix(np.random.default_rng(seed))


def short(name: str) -> str:
    """'layernorm_backward' -> 'lnB', 'grad_clip' -> 'clip'."""
    if name in _WHOLE:
        return _WHOLE[name]
    family, direction = name.rsplit("_", 1)
    return _FAMILY[family] + direction[0].upper()


def mix_id(seed: int) -> str:
    return f"mix{seed}[dsl:{'+'.join(short(n) for n in registry.NAMES if n in mix(seed))}]"


def spec_id(spec: str) -> str:
    """An id for 'none', 'all' or 'mixN'."""
    return mix_id(int(spec[3:])) if spec.startswith("mix") else spec


def dsl_of(spec: str) -> frozenset[str]:
    """The DSL side of 'none', 'all' or 'mixN'."""
    return mix(int(spec[3:])) if spec.startswith("mix") else registry.parse_dsl(spec)
