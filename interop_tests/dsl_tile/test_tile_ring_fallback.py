"""Tile kernels with more than one loop fed by TMA rings. Triton tutorial 06's causal attention
(examples/triton_tutorials/06_fused_attention.py) has two loops one after the other (the blocks left of
the diagonal, then the diagonal), each with a K/V ring under `tma`: a ring loop ends drained, so the
two rings share their stages and the causal kernel takes the shared memory of the full one (at D128
with 128 x 128 tiles two separate rings could not fit at all, and at 64 x 64 they halved the blocks an
SM holds). Rings that cannot share (other sizes) and do not fit together make the lowering keep
cp.async for every loop (a kernel no launch could hold used to come out), said as a `ring-fallback`
slow path; the kernel stays correct. Under `ws` only the loop the kernel splits at takes a ring (the
producer's); its other loops keep cp.async, since a consumer-issued ring there hung on the H200, unless
`ws_chain` lets the loops over the same K/V share the producer's ring (ring_ws.chained_loops)."""
from __future__ import annotations

import json
from typing import TypeVar

import numpy as np
import pytest

from dsl import f32, tile
from interop_tests.dsl_tile.tutorial_kit import attention_on_gpu, tutorial

T = tutorial("06_fused_attention")
WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24"}
CHAIN = {**WS, "ws_chain": True}
TMA = {"loop_pipeline": "tma"}
E = TypeVar("E")


def args(causal, d=128, s=256, rng=None, bm=128, bn=128):
    rng = rng or np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2 * s, d)).astype(np.float16) for _ in range(3))
    out = np.full((2 * s, d), np.nan, np.float16)
    return T.launch_args(q, k, v, out, s, causal, bm, bn), out


@pytest.mark.parametrize("d,bm,bn,warps", [(128, 128, 128, 8), (128, 64, 64, 4), (64, 128, 64, 8)])
def test_the_two_causal_loops_share_one_ring_of_stages(d, bm, bn, warps):
    kern = tile.kernel(T.attn_fwd.pyfunc, num_warps=warps, lowering=TMA)
    causal = kern.compile(args(True, d, bm=bm, bn=bn)[0], "sm_90")
    full = kern.compile(args(False, d, bm=bm, bn=bn)[0], "sm_90")
    assert len(json.loads(causal.contract_json)["tensor_maps"]) == 4        # K and V of each loop
    assert causal.dynamic_smem == full.dynamic_smem, (causal.dynamic_smem, full.dynamic_smem)
    assert "ring-fallback" not in [p["kind"] for p in causal.metadata.get("slow_paths", [])]


@tile.kernel(num_warps=4, lowering={"loop_pipeline": "tma", "loop_stages": 3})
def two_key_tiles(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], o: tile.Partition[f32, 2]):
    """Sum over the keys of (q k^T) v, once in 128-row key tiles and once in 64-row ones: two ring loops
    whose stages differ in size (3 stages: 192 KiB, then 96 KiB)."""
    bm, d = o.tile_shape
    qb = tile.load(q, (tile.bid(0), 0), (bm, d))
    acc = tile.zeros((bm, d), f32)
    for j in range(k.shape[0] // 128):
        s = tile.matmul(qb, tile.transpose(tile.load(k, (j, 0), (128, d))))
        acc = acc + tile.matmul(s.astype(k.dtype), tile.load(v, (j, 0), (128, d)))
    for j in range(k.shape[0] // 64):
        s2 = tile.matmul(qb, tile.transpose(tile.load(k, (j, 0), (64, d))))
        acc = acc + tile.matmul(s2.astype(k.dtype), tile.load(v, (j, 0), (64, d)))
    o.store(acc)


def two_key_args(rng):
    q = (rng.standard_normal((128, 128)) / 8).astype(np.float16)
    k, v = ((rng.standard_normal((256, 128)) / 8).astype(np.float16) for _ in range(2))
    out = np.full((128, 128), np.nan, np.float32)
    return (q, k, v, tile.partition(out, (64, 128))), out


def test_rings_that_cannot_share_and_do_not_fit_together_fall_back_to_cp_async_and_say_so():
    a, _ = two_key_args(np.random.default_rng(0))
    ck = two_key_tiles.compile(a, "sm_90")
    assert "cp.async.bulk.tensor" not in ck.ptx and ck.dynamic_smem <= 227 * 1024
    kinds = [p["kind"] for p in ck.metadata.get("slow_paths", [])]
    assert "ring-fallback" in kinds, kinds


@pytest.mark.slow
def test_the_fallen_back_kernel_matches_float64_in_the_lowered_simulator():
    a, out = two_key_args(np.random.default_rng(4))
    two_key_tiles.simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    q, k, v = (x.astype(np.float64) for x in a[:3])
    s = (q @ k.T).astype(np.float16).astype(np.float64)      # the kernel casts the scores to f16
    np.testing.assert_allclose(out, 2 * (s @ v), rtol=0, atol=2e-2)


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
@pytest.mark.parametrize("lowering", [TMA, WS], ids=["tma-shared-rings", "ws-split-ring"])
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
    loads keep cp.async (said as `ws-other-loop`); the split loop keeps its producer-fed ring."""
    a, _ = _d64_causal(bn)
    ws = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=WS).compile(a, "sm_90")
    assert len(json.loads(ws.contract_json)["tensor_maps"]) == 2     # K and V of the split loop
    said = [p for p in ws.metadata["slow_paths"] if p["kind"] == "ws-other-loop"]
    assert len(said) == 1, said
    assert "cp.async.bulk.tensor" in ws.ptx and "cp.async.cg.shared.global" in ws.ptx


@pytest.mark.parametrize("bn", [64, 128])
def test_under_ws_chain_the_loops_after_the_split_one_share_its_producer_fed_ring(bn):
    """With `ws_chain` the producer warpgroup feeds both causal loops from one ring (ring_ws.py
    chained_loops): two tensor maps, no cp.async left, no slow path reported. Under `tma` (no roles)
    each loop keeps its own ring and maps."""
    a, _ = _d64_causal(bn)
    ws = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=CHAIN).compile(a, "sm_90")
    maps = json.loads(ws.contract_json)["tensor_maps"]
    assert len(maps) == 2, maps                     # K and V, once for both loops
    assert not [p for p in ws.metadata["slow_paths"] if p["kind"] == "ws-other-loop"]
    assert "cp.async.bulk.tensor" in ws.ptx and "cp.async.cg.shared.global" not in ws.ptx
    tma = tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering={"loop_pipeline": "tma"}).compile(a, "sm_90")
    assert len(json.loads(tma.contract_json)["tensor_maps"]) == 4
    assert "ws-other-loop" not in [p["kind"] for p in tma.metadata["slow_paths"]]


@pytest.mark.parametrize("lowering", [WS, CHAIN], ids=["ws", "ws-chain"])
@pytest.mark.parametrize("bn", [64, 128])
def test_the_warp_specialised_causal_kernel_matches_float64_in_the_lowered_simulator(bn, lowering):
    a, out = _d64_causal(bn, np.random.default_rng(11))
    tile.kernel(T.attn_fwd.pyfunc, num_warps=8, lowering=lowering).simulate_lowered(*a, tensor_cores=True,
                                                                                    arch="sm_90")
    want = T.reference(*(np.asarray(x) for x in a[:3]), 256, True)
    assert np.abs(out.astype(np.float64) - want).max() < 2e-2


@pytest.mark.gpu
@pytest.mark.parametrize("lowering,bm,bn,warps,d,s", [
    (WS, 128, 128, 8, 64, 128), (WS, 128, 128, 8, 64, 1024), (WS, 128, 64, 8, 64, 1024),
    (WS, 128, 128, 8, 128, 1024), (TMA, 64, 64, 4, 128, 1024), (TMA, 128, 128, 8, 128, 1024),
    (TMA, 128, 64, 8, 64, 1024), (CHAIN, 128, 128, 8, 64, 1024), (CHAIN, 128, 128, 8, 128, 1024)],
    ids=lambda x: "-".join(map(str, x.values())) if isinstance(x, dict) else str(x))
def test_gpu_the_causal_kernel_finishes_and_matches_sdpa(lowering, bm, bn, warps, d, s):
    """The causal tutorial kernel's two loops on the H200: under ws (the split loop's ring, the diagonal
    on cp.async; 128x128 at D64 used to hang), under ws + ws_chain (both loops on the producer's ring)
    and under tma (both loops on one shared ring of stages).
    In a child process with a deadline: a hang fails the test instead of stopping the suite."""
    done = attention_on_gpu(lowering, bm, bn, warps, d, s, True, batch=1, heads=2, seed=bn + s + d)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 2e-2
