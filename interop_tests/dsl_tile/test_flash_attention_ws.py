"""Flash attention's loop fed by TMA rings (KB_TILE_LOOP_PIPELINE=tma / ws, dsl/tile/lower/matmul/ring.py,
ring_ws.py), with register reallocation (KB_TILE_SETMAXNREG) and the products overlapped with the
softmax (KB_TILE_PRODUCT_OVERLAP, matmul/overlap.py): the PTX each switch produces, ptxas assembling
it for sm_90a without spills or serialised wgmmas, the lowered kernels on the CPU simulator against a
float64 NumPy reference (causal and not, sequences that are no multiple of 128 where the tile allows),
a kernel that is not attention (ragged key rows the copy engine zero-fills), a deadlock the simulator
reports, and the same kernels on the H200 against torch SDPA.

GPU part: python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_flash_attention_ws.py
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import TypeVar

import ml_dtypes
import numpy as np
import pytest

import bridge
from dsl import f32, i32, tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.sim.faults import SimulationError
from attention_refs import attention64

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_ws", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

E = TypeVar("E")
SWITCHES = ("KB_TILE_LOOP_PIPELINE", "KB_TILE_LOOP_STAGES", "KB_TILE_SETMAXNREG", "KB_TILE_PRODUCT_OVERLAP",
            "KB_TILE_WS_CHAIN", "KB_TILE_PINGPONG", "KB_TILE_REVERSE_BLOCKS", "KB_TILE_PINGPONG_SPAN")
# name -> (switches, warps, {head dim: (query rows, key rows)})
ONE_WG = {64: (64, 128), 128: (64, 64)}
TWO_WG = {64: (128, 128), 128: (128, 64)}
VARIANTS = {
    "tma": ({"KB_TILE_LOOP_PIPELINE": "tma"}, 4, ONE_WG),
    "tma3-overlap": ({"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_LOOP_STAGES": "3", "KB_TILE_PRODUCT_OVERLAP": "1"},
                     4, ONE_WG),
    "ws": ({"KB_TILE_LOOP_PIPELINE": "ws"}, 8, TWO_WG),
    "ws-setmaxnreg": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24"}, 8, TWO_WG),
    "ws-setmaxnreg-overlap": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                               "KB_TILE_PRODUCT_OVERLAP": "1"}, 8, TWO_WG),
    "ws3-setmaxnreg-overlap": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_LOOP_STAGES": "3", "KB_TILE_SETMAXNREG": "240/24",
                                "KB_TILE_PRODUCT_OVERLAP": "1"}, 8, TWO_WG),
    "ws-setmaxnreg-bn128": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24"}, 8,
                            {64: (128, 128), 128: (128, 128)}),
    # causal: both loops on the producer's ring (ring_ws.chained_loops), with and without the overlap
    "ws-chain-setmaxnreg": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24", "KB_TILE_WS_CHAIN": "1"},
                            8, {64: (128, 128), 128: (128, 128)}),
    "ws-chain-setmaxnreg-overlap": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                     "KB_TILE_PRODUCT_OVERLAP": "1", "KB_TILE_WS_CHAIN": "1"}, 8, TWO_WG),
    # the two consumer warpgroups' products in turns (KB_TILE_PINGPONG, matmul/pingpong.py), one loop
    # and causal attention's two on one ring
    "ws-setmaxnreg-bn128-pingpong": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                      "KB_TILE_PINGPONG": "1"}, 8, {64: (128, 128), 128: (128, 128)}),
    "ws-chain-setmaxnreg-pingpong": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                      "KB_TILE_WS_CHAIN": "1", "KB_TILE_PINGPONG": "1"}, 8,
                                     {64: (128, 128), 128: (128, 128)}),
    # both FlashAttention-3 overlaps: a turn issues the first product and the previous last one
    "ws-chain-setmaxnreg-overlap-pingpong": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                              "KB_TILE_WS_CHAIN": "1", "KB_TILE_PRODUCT_OVERLAP": "1",
                                              "KB_TILE_PINGPONG": "1"}, 8, {64: (128, 128), 128: (128, 128)}),
    # and the turns opened once for the consumers' program, not around each loop (pingpong_span "program")
    "ws-chain-setmaxnreg-overlap-pingpong-span": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                                   "KB_TILE_WS_CHAIN": "1", "KB_TILE_PRODUCT_OVERLAP": "1",
                                                   "KB_TILE_PINGPONG": "1", "KB_TILE_PINGPONG_SPAN": "program"}, 8,
                                                  {64: (128, 128), 128: (128, 128)}),
    # and the blocks in reverse order (the heaviest causal query blocks first)
    "ws-chain-setmaxnreg-pingpong-reversed": ({"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24",
                                               "KB_TILE_WS_CHAIN": "1", "KB_TILE_PINGPONG": "1",
                                               "KB_TILE_REVERSE_BLOCKS": "1"}, 8, {64: (128, 128), 128: (128, 128)}),
}


def switch(monkeypatch, env: dict) -> None:
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)




def flash_args(rng, d, bm, bn, seq, causal, heads=2):
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    return (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1), out


def kernel(warps):
    """A fresh kernel object: it compiles with the switches set when it is first used."""
    return tile.kernel(FA.flash_fwd.pyfunc, num_warps=warps)


# ------------------------------------------------------------------------------ what each switch emits
def test_tma_copies_k_and_v_into_a_ring_of_stages_on_full_mbarriers(monkeypatch, rng):
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_LOOP_STAGES": "3"})
    args, _ = flash_args(rng, 128, 64, 64, 256, False)
    ck = kernel(4).compile(args, "sm_90")
    ptx = ck.ptx
    assert "cp.async.cg" not in ptx and "cp.async.bulk.tensor.2d" in ptx and ".target sm_90a" in ptx
    assert ptx.count("mbarrier.init.shared::cta.b64") == 2 * 3           # K and V, 3 stages each, "full" only
    maps = json.loads(ck.contract_json)["tensor_maps"]
    assert maps == [{"arg": "k", "box": [64, 64], "swizzle": 128}, {"arg": "v", "box": [64, 64], "swizzle": 128}]
    assert ck.threads == 128 and ck.dynamic_smem >= 3 * 2 * 64 * 128 * 2    # 3 stages of K and V (16 KiB each)


def test_ws_adds_a_producer_warpgroup_that_reallocates_registers_when_asked(monkeypatch, rng):
    args, _ = flash_args(rng, 128, 128, 64, 256, True)
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "ws"})
    plain = kernel(8).compile(args, "sm_90")
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_SETMAXNREG": "240/24"})
    ck = kernel(8).compile(args, "sm_90")
    for c in (plain, ck):
        assert c.threads == 384 and json.loads(c.contract_json)["block"] == {"exact": [384, 1, 1]}
        assert c.ptx.count("mbarrier.init.shared::cta.b64") == 2 * 2 * 2        # full and empty, 2 stages, K and V
        assert "mbarrier.arrive.shared::cta.b64" in c.ptx                      # the consumers release stages
    assert "setmaxnreg" not in plain.ptx and ".minnctapersm" not in plain.ptx
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in ck.ptx and "setmaxnreg.dec.sync.aligned.u32 24;" in ck.ptx
    assert ".minnctapersm 1" in ck.ptx


def test_overlap_leaves_the_first_product_behind_the_previous_last_one(monkeypatch, rng):
    args, _ = flash_args(rng, 128, 64, 64, 256, False)
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "tma"})
    plain = kernel(4).compile(args, "sm_90").ptx
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_PRODUCT_OVERLAP": "1"})
    ptx = kernel(4).compile(args, "sm_90").ptx
    assert "wgmma.wait_group.sync.aligned 1;" not in plain
    assert ptx.count("wgmma.wait_group.sync.aligned 1;") == 1
    # S = Q K^T (8 k steps at D128) and P V (4 steps at BN 64) in the loop, P V once more after it
    assert ptx.count("wgmma.mma_async") == 8 + 4 + 4


def test_the_switches_are_in_the_cache_key_and_refuse_other_values(monkeypatch):
    from dsl.tile.compile import switches_key
    switch(monkeypatch, {})
    keys = {switches_key()}
    envs = {tuple(sorted(v[0].items())) for v in VARIANTS.values()}
    for env in envs:
        switch(monkeypatch, dict(env))
        keys.add(switches_key())
    assert len(keys) == 1 + len(envs)
    monkeypatch.setenv("KB_TILE_LOOP_PIPELINE", "fast")
    with pytest.raises(bridge.ConfigurationError, match="KB_TILE_LOOP_PIPELINE='fast'"):
        switches_key()
    switch(monkeypatch, {"KB_TILE_SETMAXNREG": "512/8"})
    with pytest.raises(bridge.ConfigurationError, match="KB_TILE_SETMAXNREG"):
        switches_key()


def test_the_ring_needs_warpgroup_mma_else_the_loop_keeps_cp_async(monkeypatch, rng):
    args, _ = flash_args(rng, 128, 64, 64, 256, False)
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "ws"})
    sm80 = kernel(4).compile(args, "sm_80")
    assert "cp.async.cg" in sm80.ptx and "cp.async.bulk" not in sm80.ptx and sm80.threads == 128
    monkeypatch.setenv("KB_TILE_WGMMA_PRODUCTS", "0")
    sync = kernel(4).compile(args, "sm_90")
    assert "mma.sync" in sync.ptx and "cp.async.bulk" not in sync.ptx and sync.threads == 128


# 384 threads leave ptxas 168 registers a thread: the two query warpgroups at D128 (64 accumulators, 32
# of queries, 32 of scores a thread) spilled without register reallocation until the queries came in as
# 4-byte pairs (runs.load_pairs: 162 registers, no spill). Causal attention runs in two loops
# (2026-12-05); with both on the producer's ring (ws_chain), D64 with 3 stages and the product overlap
# spills 8 bytes (two rotated loops' carried A registers), so that combination is not a variant here.
# "ws" at D128 (no register reallocation: 168 a thread) spills 8 bytes since its queries' pair loads take
# shared bases (runs.load_pairs, 2026-12-05), which took the persistent forms' spills away; it was at 0
KNOWN_SPILLS: set = {("ws", 128)}


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("d", [64, 128])
def test_ptxas_assembles_each_switch_without_spills_or_serialised_wgmmas(monkeypatch, rng, name, d):
    env, warps, tiles = VARIANTS[name]
    switch(monkeypatch, env)
    bm, bn = tiles[d]
    args, _ = flash_args(rng, d, bm, bn, 512, True)
    usage, log = assemble(kernel(warps).compile(args, "sm_90").ptx, "sm_90a")
    spills = usage[0].spill_stores + usage[0].spill_loads + usage[0].stack_frame
    assert (spills > 0) == ((name, d) in KNOWN_SPILLS), log
    assert usage[0].registers <= (168 if warps == 8 else 255), log
    assert not any(code in log for code in ("C7510", "C7512", "C7515", "C7517", "C7518", "C7519")), log


# ------------------------------------------------------------------------------ the CPU simulator
SIM_CASES = [(name, d, seq) for name in VARIANTS for d, seq in ((64, 192), (128, 192), (128, 256))
             if seq % VARIANTS[name][2][d][0] == 0 and seq % VARIANTS[name][2][d][1] == 0]


@pytest.mark.parametrize("name,d,seq", SIM_CASES)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_each_switch_matches_numpy_in_the_simulator(monkeypatch, rng, name, d, seq, causal):
    env, warps, tiles = VARIANTS[name]
    switch(monkeypatch, env)
    args, out = flash_args(rng, d, *tiles[d], seq, causal)
    kernel(warps).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], seq, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tma3-overlap", "ws-setmaxnreg-overlap", "ws3-setmaxnreg-overlap",
                                  "ws-chain-setmaxnreg-overlap"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_rings_match_numpy_with_tma_copies_landing_at_the_wait(monkeypatch, rng, name, causal):
    """KB_SIM_TMA_LANDING=wait (dsl/tile/ptx/sm90.py): each copy lands at the first wait on its barrier,
    so a product that reads a stage before its wait reads the old data; with a producer warpgroup the
    consumers' waits run concurrently with the producer's copies (dsl/sim/roles.py)."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    env, warps, tiles = VARIANTS[name]
    switch(monkeypatch, env)
    args, out = flash_args(rng, 128, *tiles[128], 256, causal)
    kernel(warps).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], 256, causal), rtol=2e-2, atol=1e-2)


@tile.kernel(num_warps=4)
def chained(x: tile.Array[E, 2], w: tile.Array[E, 2], u: tile.Array[E, 2], c: tile.Partition[f32, 2], blocks: i32,
            bn: tile.Constant):
    """c = sum over j < blocks of bf16(x_i w_j^T) u_j: not attention, the same loop shape (both B
    operands loads indexed by the loop variable, the second product accumulating)."""
    bm, d = c.tile_shape
    xt = tile.load(x, (tile.bid(0), 0), (bm, d))
    acc = tile.zeros((bm, d), f32)
    for j in range(blocks):
        s = tile.matmul(xt, tile.transpose(tile.load(w, (j, 0), (bn, d))))
        acc = tile.matmul(s.astype(x.dtype), tile.load(u, (j, 0), (bn, d)), acc)
    c.store(acc)


@pytest.mark.parametrize("env", [{"KB_TILE_LOOP_PIPELINE": "tma", "KB_TILE_PRODUCT_OVERLAP": "1"},
                                 {"KB_TILE_LOOP_PIPELINE": "ws", "KB_TILE_LOOP_STAGES": "3"}], ids=["tma", "ws"])
def test_ragged_ring_loads_are_zero_filled_in_any_such_loop(monkeypatch, rng, env):
    """w and u have 200 rows: the last of 4 blocks of 64 reads 56 rows past their end, which TMA fills
    with zeros as tile.load pads."""
    switch(monkeypatch, env)
    x = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    w, u = (rng.standard_normal((200, 64)).astype(ml_dtypes.bfloat16) for _ in range(2))
    c = np.full((128, 64), np.nan, np.float32)
    args = (x, w, u, tile.partition(c, (64, 64)), 4, 64)
    assert "cp.async.bulk.tensor.2d" in chained.compile(args, "sm_90").ptx
    chained.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    s = (x.astype(np.float64) @ w.astype(np.float64).T).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(c, s.astype(np.float64) @ u.astype(np.float64), rtol=2e-2, atol=5e-2)


def test_consumers_that_never_release_a_stage_deadlock_the_simulated_producer(monkeypatch, rng):
    from dsl.tile.ptx import sm80 as ptx_sim
    from dsl.tile.ptx import table as ptx_table
    from dsl.tile.ptx.table import SemanticsRef
    switch(monkeypatch, {"KB_TILE_LOOP_PIPELINE": "ws"})
    monkeypatch.setitem(ptx_table._RESOLVED, SemanticsRef("mbarrier.arrive"), ptx_sim.no_op)
    args, _ = flash_args(rng, 64, 64, 64, 256, False)            # 4 key blocks: more than the 2 stages
    with pytest.raises(SimulationError, match="every role of the block waits"):
        kernel(4).simulate_lowered(*args, tensor_cores=True, arch="sm_90")


# ------------------------------------------------------------------------------ the GPU
@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_each_switch_matches_torch_sdpa(monkeypatch, name, d, causal):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA rings and warpgroup MMA need sm_90")
    env, warps, tiles = VARIANTS[name]
    switch(monkeypatch, env)
    bm, bn = tiles[d]
    batch, heads, seq = 2, 3, 384
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    args = (*(x.reshape(-1, d) for x in (q, k, v)), tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
    kern = kernel(warps)
    kern(*args)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    err = (out.reshape(ref.shape) - ref).abs().max().item()
    assert err < 2e-2, err
    assert "cp.async.bulk.tensor.2d" in kern.compile(args, bridge.current_device().arch).ptx


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_a_persistent_block_runs_its_turns_through_many_tiles_and_matches_torch_sdpa(monkeypatch, d, causal):
    """pingpong_span "program" on a persistent kernel with more tiles than its grid holds blocks: each block's
    warpgroups take turns through every loop of every tile it walks, opened and closed once (a protocol
    error would hang or corrupt here, where the lock-step simulator cannot order the warpgroups)."""
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    dev = bridge.current_device()
    if dev.cc < (9, 0):
        pytest.skip("TMA rings and warpgroup MMA need sm_90")
    env, warps, tiles = VARIANTS["ws-chain-setmaxnreg-overlap-pingpong-span"]
    switch(monkeypatch, env)
    bm, bn = tiles[d]
    batch, heads, seq = 2, 12, 1536                     # 288 query tiles: more than 2 blocks an SM on 132 SMs
    assert batch * heads * seq // bm > 2 * dev.sm_count
    g = torch.Generator(device="cuda").manual_seed(7 * d + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    args = (*(x.reshape(-1, d) for x in (q, k, v)), tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
    kern = tile.kernel(FA.flash_fwd.pyfunc, num_warps=warps, persistent=True)
    kern(*args)
    bridge.current_stream().synchronize()
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    err = (out.reshape(ref.shape) - ref).abs().max().item()
    assert err < 2e-2, err
