"""A kernel whose loops asked for TMA rings they cannot all have: Triton tutorial 06's causal attention
(examples/triton_tutorials/06_fused_attention.py) has two loops, each with its own K/V ring under
`tma`; at D128 with 128 x 128 tiles the two rings together need more shared memory than a block may opt
into. The lowering keeps cp.async for every loop (a kernel no launch could hold used to come out), says
so as a `ring-fallback` slow path, and the kernel stays correct; where the rings fit (one loop,
non-causal) they stay. Under `ws` only the loop the kernel splits at takes a ring (the producer's); its
other loops keep cp.async, since a consumer-issued ring there hung on the H200."""
from __future__ import annotations

import importlib.util
import json
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
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering={"loop_pipeline": "tma"})
    a, _ = args(True)
    ck = kern.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" not in ck.ptx and ck.dynamic_smem <= 227 * 1024
    kinds = [p["kind"] for p in ck.metadata.get("slow_paths", [])]
    assert "ring-fallback" in kinds, kinds


def test_the_split_loop_of_a_warp_specialised_kernel_keeps_its_ring_where_two_would_not_fit():
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS)
    a, _ = args(True)
    ck = kern.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" in ck.ptx and ck.dynamic_smem <= 227 * 1024
    assert len(json.loads(ck.contract_json)["tensor_maps"]) == 2
    assert "ring-fallback" not in [p["kind"] for p in ck.metadata.get("slow_paths", [])]


def test_a_single_loop_keeps_its_ring():
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS)
    a, _ = args(False)
    ck = kern.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" in ck.ptx
    assert "ring-fallback" not in [p["kind"] for p in ck.metadata.get("slow_paths", [])]


@pytest.mark.slow
@pytest.mark.parametrize("lowering", [{"loop_pipeline": "tma"}, WS], ids=["tma-fallen-back", "ws-split-ring"])
def test_the_d128_causal_kernel_matches_float64_in_the_lowered_simulator(lowering):
    a, out = args(True, rng=np.random.default_rng(5))
    tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=lowering).simulate_lowered(*a, tensor_cores=True,
                                                                                      arch="sm_90")
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


# ---- a warp-specialised kernel's second loop: no ring of its own ------------------------------------------
def _d64_causal(bn, rng=None):
    rng = rng or np.random.default_rng(3)
    s = 256
    q, k, v = (rng.standard_normal((2 * s, 64)).astype(np.float16) for _ in range(3))
    out = np.full((2 * s, 64), np.nan, np.float16)
    return T.launch_args(q, k, v, out, s, True, 128, bn), out


@pytest.mark.parametrize("bn", [64, 128])
def test_only_the_split_loop_of_a_warp_specialised_kernel_takes_a_ring(bn):
    """At D64 both causal rings fit, but the diagonal loop after the split one would be fed by a ring a
    consumer thread issues inside the consumer role: at 128x128 that hung on the H200 (2026-12-04). Its
    loads keep cp.async; the split loop keeps its producer-fed ring. Under `tma` (no roles) both loops
    keep theirs."""
    a, _ = _d64_causal(bn)
    ws = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS).compile(a, "sm_90")
    maps = json.loads(ws.contract_json)["tensor_maps"]
    assert len(maps) == 2, maps                     # K and V of the split loop
    assert "cp.async.bulk.tensor" in ws.ptx and "cp.async.cg.shared.global" in ws.ptx
    tma = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering={"loop_pipeline": "tma"}).compile(a, "sm_90")
    assert len(json.loads(tma.contract_json)["tensor_maps"]) == 4


@pytest.mark.parametrize("bn", [64, 128])
def test_the_warp_specialised_causal_kernel_matches_float64_in_the_lowered_simulator(bn):
    a, out = _d64_causal(bn, np.random.default_rng(11))
    tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS).simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    want = T.reference(*(np.asarray(x) for x in a[:3]), 256, True)
    assert np.abs(out.astype(np.float64) - want).max() < 2e-2


CHILD = """
import importlib.util, json, sys
import torch, torch.nn.functional as F
from dsl import tile
spec = importlib.util.spec_from_file_location("t06", "examples/triton_tutorials/06_fused_attention.py")
T = importlib.util.module_from_spec(spec); spec.loader.exec_module(T)
bn, s = int(sys.argv[1]), int(sys.argv[2])
kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering={"loop_pipeline": "ws", "setmaxnreg": "240/24"})
g = torch.Generator(device="cuda").manual_seed(bn + s)
q, k, v = (torch.randn(1, 2, s, 64, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
q2, k2, v2 = (t.reshape(-1, 64) for t in (q, k, v))
out = torch.full_like(q2, float("nan"))
kern(*T.launch_args(q2, k2, v2, out, s, True, 128, bn))
torch.cuda.synchronize()
ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
print(json.dumps((out.double().reshape(ref.shape) - ref).abs().max().item()))
"""


@pytest.mark.gpu
@pytest.mark.parametrize("bn,s", [(128, 128), (128, 1024), (64, 1024)])
def test_gpu_the_warp_specialised_causal_kernel_finishes_and_matches_sdpa(bn, s):
    """In a child process with a deadline: the hang this guards against would otherwise stop the suite."""
    import os
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", CHILD, str(bn), str(s)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 2e-2
