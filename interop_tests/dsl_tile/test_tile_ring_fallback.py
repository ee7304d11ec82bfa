"""A kernel whose loops asked for TMA rings they cannot all have: Triton tutorial 06's causal attention
(examples/triton_tutorials/06_fused_attention.py) has two loops, each with its own K/V ring; at D128
with 128 x 128 tiles on the warp-specialised ring the two rings together need more shared memory than
a block may opt into. The lowering keeps cp.async for every loop (a kernel no launch could hold used
to come out), says so as a `ring-fallback` slow path, and the kernel stays correct; where the rings fit
(one loop, non-causal) they stay."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from dsl import tile

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("tutorial06_ring", ROOT / "examples" / "triton_tutorials" /
                                               "06_fused_attention.py")
T = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(T)
WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24"}


def args(causal, d=128, s=256, rng=None):
    rng = rng or np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2 * s, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * s, d), np.nan, np.float16)
    return T.launch_args(q, k, v, out, s, causal, 128, 128), out


def test_rings_that_do_not_fit_together_fall_back_to_cp_async_and_say_so():
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS)
    a, _ = args(True)
    ck = kern.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" not in ck.ptx and ck.dynamic_smem <= 227 * 1024
    kinds = [p["kind"] for p in ck.metadata.get("slow_paths", [])]
    assert "ring-fallback" in kinds, kinds


def test_a_single_loop_keeps_its_ring():
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS)
    a, _ = args(False)
    ck = kern.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" in ck.ptx
    assert "ring-fallback" not in [p["kind"] for p in ck.metadata.get("slow_paths", [])]


@pytest.mark.slow
def test_the_fallen_back_kernel_matches_float64_in_the_lowered_simulator():
    a, out = args(True, rng=np.random.default_rng(5))
    tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS).simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    q, k, v = (x.astype(np.float64) for x in a[:3])
    d, s = 128, 256
    want = np.empty_like(q)
    for h in range(2):
        rows = slice(h * s, (h + 1) * s)
        sc = q[rows] @ k[rows].T / np.sqrt(d)
        sc[np.triu_indices(s, 1)] = -np.inf
        w = np.exp(sc - sc.max(axis=1, keepdims=True))
        want[rows] = w / w.sum(axis=1, keepdims=True) @ v[rows]
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=0, atol=2e-2)
