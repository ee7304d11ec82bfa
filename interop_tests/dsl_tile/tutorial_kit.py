"""The Triton tutorial modules of examples/triton_tutorials for the tile tests, and tutorial 06 run on
the GPU in a child process with a deadline: a kernel that hangs (or faults, poisoning its context)
fails its own test instead of stopping the suite."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def tutorial(stem: str) -> Any:
    """A fresh module of examples/triton_tutorials/<stem>.py (its kernels objects of their own)."""
    spec = importlib.util.spec_from_file_location(f"tutorial_{stem}", ROOT / "examples" / "triton_tutorials" /
                                                  f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_ATTENTION_CHILD = """
import json, sys
import torch, torch.nn.functional as F
from dsl import tile
from interop_tests.dsl_tile.tutorial_kit import tutorial
T = tutorial("06_fused_attention")
low, (bm, bn, warps, d, s, batch, heads, seed), causal = json.loads(sys.argv[1]), map(int, sys.argv[2:10]), sys.argv[10] == "1"
kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=low)
g = torch.Generator(device="cuda").manual_seed(seed)
q, k, v = (torch.randn(batch, heads, s, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
out = torch.full((batch * heads * s, d), float("nan"), device="cuda", dtype=torch.float16)
kern(*T.launch_args(*(t.reshape(-1, d) for t in (q, k, v)), out, s, causal, bm, bn))
torch.cuda.synchronize()
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
print(json.dumps((out.double().reshape(ref.shape) - ref).abs().max().item()))
"""


def attention_on_gpu(lowering: dict | None, bm: int, bn: int, warps: int, d: int, s: int, causal: bool, *,
                     batch: int, heads: int, seed: int) -> subprocess.CompletedProcess:
    """Tutorial 06 (`lowering`, BLOCK_M x BLOCK_N on `warps` warps) on f16 (batch, heads, s, d) seeded
    inputs, in a child process (120 s): its last stdout line is max |out - SDPA in float64|."""
    args = [json.dumps(lowering), *map(str, (bm, bn, warps, d, s, batch, heads, seed)), "1" if causal else "0"]
    return subprocess.run([sys.executable, "-c", _ATTENTION_CHILD, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
