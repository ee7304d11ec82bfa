"""Loop-invariant A operands in shared memory copied by the producer warpgroup (loop_pipeline "ws" with
wgmma_a "shared", dsl/tile/lower/matmul/produced_a.py): flash attention's Q comes by the producer's TMA
on a "full" mbarrier instead of every consumer thread's cp.async, and in a persistent block the next
tile's copy waits only for the consumers' release after their last loop. The PTX (TMA boxes for Q, no
cp.async), the lowered simulator against float64 (one tile a block and 1-6 tiles a block, ping-pong,
the product overlap, causal and not; head dim 256, which it brings onto warpgroup MMA), ptxas without
spills, the kernels it does not apply to, and on the GPU against SDPA. The fused backward's ws forms (K and V copied so): test_flash_attention_bwd_fused.py.

GPU part: python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_produced_a.py
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import bridge
from dsl.backend.ptxas import assemble, find_ptxas
from attention_refs import attention64, gpu_error_against_sdpa

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_produced_a", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

WS = {"loop_pipeline": "ws", "setmaxnreg": "240/24", "ws_chain": True, "fp_fusion": True, "ftz": True,
      "pingpong": True}
PRODUCED = {**WS, "wgmma_a": "shared"}


def case(rng, d: int, seq: int, heads: int, causal: bool):
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    return FA.launch_args(q, k, v, out, seq, causal, tensor_cores=True, wgmma=True, tiles=(128, 128)), out


def kernel(lowering: dict, persistent: bool = False):
    return FA.variant(FA.flash_fwd, lowering, 8, persistent=persistent)


def test_q_comes_by_the_producers_tma_not_by_the_consumers_copies(rng):
    """D128: Q's two 64-column boxes beside K's and V's (one tile: 2 + 2 + 2), no cp.async, and the
    score products read A from shared memory; without wgmma_a "shared" Q stays in registers."""
    args, _ = case(rng, 128, 256, 2, False)
    produced, plain = (kernel(low).compile(args, "sm_90") for low in (PRODUCED, WS))
    ptx = produced.ptx
    assert "cp.async.cg" not in ptx and "cp.async.ca" not in ptx
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == \
        plain.ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") + 2
    maps = {m["arg"]: m for m in json.loads(produced.contract_json)["tensor_maps"]}
    assert maps["q"] == {"arg": "q", "box": [128, 64], "swizzle": 128}
    assert "q" not in {m["arg"] for m in json.loads(plain.contract_json)["tensor_maps"]}
    assert "ld.global.nc.b32" in plain.ptx and "ld.global.nc.b32" not in ptx


@pytest.mark.slow
@pytest.mark.parametrize("d,causal,persistent,blocks,extra", [
    (128, False, False, None, {}),
    (128, True, False, None, {}),
    (64, True, False, None, {}),
    (128, False, True, 1, {}),
    (128, True, True, 2, {}),
    (128, True, True, 4, {"product_overlap": True}),
    (128, False, True, 5, {"product_overlap": True}),
    (64, True, True, 2, {"pingpong": False}),
    # two buffers of Q (produced_a_buffers): one block takes all six tiles (each buffer three times), or 2 or 4
    (128, False, True, 1, {"produced_a_buffers": 2, "product_overlap": True}),
    (128, True, True, 2, {"produced_a_buffers": 2}),
    (64, True, True, 4, {"produced_a_buffers": 2, "product_overlap": True, "pingpong_span": "program"}),
])
def test_attention_with_q_from_the_producer_matches_float64_in_the_lowered_simulator(rng, d, causal, persistent,
                                                                                    blocks, extra):
    """Three heads of 256 rows: six tiles, one a block or 1, 2, 4 or 5 blocks walking them."""
    seq = 256
    args, out = case(rng, d, seq, 3, causal)
    kernel({**PRODUCED, **extra}, persistent).simulate_lowered(*args, tensor_cores=True, arch="sm_90",
                                                               **({"blocks": blocks} if blocks else {}))
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, attention64(*args[:3], seq, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_two_buffers_of_q_are_right_when_each_copy_lands_only_at_its_wait(monkeypatch, rng, causal):
    """KB_SIM_TMA_LANDING=wait: each copy lands at the first wait on its barrier, so a tile that read its Q
    buffer before the copy of that tile's Q (or through the other buffer's barrier) reads another tile's.
    One block walks all six tiles: each buffer three times, its barriers through both phases."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    args, out = case(rng, 128, 256, 3, causal)
    kernel({**PRODUCED, "product_overlap": True, "produced_a_buffers": 2}, True).simulate_lowered(
        *args, tensor_cores=True, arch="sm_90", blocks=1)
    np.testing.assert_allclose(out, attention64(*args[:3], 256, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.slow
def test_two_buffers_of_q_on_the_snake_with_the_turns_through_the_program_are_right(monkeypatch, rng):
    """The causal autotune candidate: two persistent blocks walk six tiles on the snake (block 0 takes tiles
    0, 3, 4: not the strided 0, 2, 4), so each block's buffers alternate over tiles whose numbers do not
    alternate in parity; every copy lands only at its wait."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    args, out = case(rng, 128, 256, 3, True)
    low = {**PRODUCED, "product_overlap": True, "produced_a_buffers": 2, "pingpong_span": "program",
           "persistent_order": "snake"}
    kernel(low, True).simulate_lowered(*args, tensor_cores=True, arch="sm_90", blocks=2)
    np.testing.assert_allclose(out, attention64(*args[:3], 256, True), rtol=2e-2, atol=1e-2)


def test_two_buffers_of_q_only_in_a_persistent_block(rng):
    """A persistent block initialises a full and an empty barrier for each of Q's two buffers and copies into
    either by the tile's parity; a block of one tile has no next tile: its PTX is byte for byte the one-buffer
    kernel's, as is every kernel's at the default."""
    args, _ = case(rng, 128, 256, 2, False)
    two = {**PRODUCED, "product_overlap": True, "produced_a_buffers": 2}
    one, both = (kernel(low, True).compile(args, "sm_90").ptx for low in ({**two, "produced_a_buffers": 1}, two))
    assert both.count("mbarrier.init") == one.count("mbarrier.init") + 2
    assert both.count("cp.async.bulk.tensor.2d") == one.count("cp.async.bulk.tensor.2d")    # one copy site
    assert kernel(two).compile(args, "sm_90").ptx == kernel({**two, "produced_a_buffers": 1}).compile(args, "sm_90").ptx


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("extra", [{}, {"product_overlap": True},
                                   {"product_overlap": True, "produced_a_buffers": 2, "pingpong_span": "program"}],
                         ids=["pingpong", "overlap-pingpong", "overlap-pingpong-2q-span"])
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ptxas_assembles_it_without_spills(rng, extra, persistent, causal):
    """Q no longer held as 32 registers of A fragments a thread: the persistent overlap form, which
    spills 12 bytes causal with Q in registers, assembles without."""
    args, _ = case(rng, 128, 512, 2, causal)
    usage, log = assemble(kernel({**PRODUCED, **extra}, persistent).compile(args, "sm_90").ptx, "sm_90a")
    assert usage[0].spill_stores + usage[0].spill_loads + usage[0].stack_frame == 0, log


# D256: Q's 64 registers of A fragments a thread kept the head dim off warpgroup MMA (the example's D256
# launch is the cp.async loop); from the producer, 128 x 64 tiles on two consumer warpgroups fit
D256 = {**PRODUCED, "pingpong": False}


@pytest.mark.slow
@pytest.mark.parametrize("extra", [{}, {"pingpong": True}, {"pingpong": True, "product_overlap": True}],
                         ids=["ws", "pingpong", "overlap-pingpong"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_256_on_a_producer_warpgroup_matches_float64_in_the_lowered_simulator(rng, extra, causal):
    seq = 256
    q, k, v = (rng.standard_normal((2 * seq, 256)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((2 * seq, 256), np.nan, np.float32)
    args = FA.launch_args(q, k, v, out, seq, causal, tensor_cores=True, wgmma=True, tiles=(128, 64))
    kern = kernel({**D256, **extra})
    ptx = kern.compile(args, "sm_90").ptx
    assert "wgmma.mma_async.sync.aligned.m64n256k16" in ptx and "mma.sync" not in ptx
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    assert not np.isnan(out).any()
    np.testing.assert_allclose(out, attention64(q, k, v, seq, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_256_assembles_without_spills(causal):
    q = np.zeros((512, 256), ml_dtypes.bfloat16)
    args = FA.launch_args(q, q, q, np.zeros((512, 256), np.float32), 256, causal, tensor_cores=True, wgmma=True,
                          tiles=(128, 64))
    usage, log = assemble(kernel({**D256, "pingpong": True}).compile(args, "sm_90").ptx, "sm_90a")
    assert usage[0].spill_stores + usage[0].spill_loads + usage[0].stack_frame == 0, log


def test_without_a_producer_warpgroup_the_consumers_copy_it_as_before(rng):
    """Under the TMA ring with no producer warpgroup (loop_pipeline "tma") Q in shared memory keeps
    shared_a's cp.async copy by every thread; only the ws split hands it to the producer."""
    q = np.zeros((512, 128), ml_dtypes.bfloat16)
    args = FA.launch_args(q, q, q, np.zeros((512, 128), np.float32), 256, False, tensor_cores=True, wgmma=True)
    ptx = FA.variant(FA.flash_fwd, {"loop_pipeline": "tma", "wgmma_a": "shared"}, None).compile(args, "sm_90").ptx
    assert "cp.async.cg" in ptx and "mbarrier.try_wait.parity" in ptx


def test_an_operand_whose_index_the_producer_cannot_compute_keeps_the_consumers_copy(monkeypatch, rng):
    """The producer runs only the scalar statements its loops and copies need (ring_ws.producer_prefix);
    where Q's index needed more, Q keeps shared_a's copy by the consumers and the kernel stays right."""
    from dsl import tile
    from dsl.tile.lower.matmul import ring_ws
    real = ring_ws.producer_prefix

    def refuse_q(before, loops):
        return None if any(ld.param.name == "q" for _, loads in loops for ld in loads) else real(before, loops)
    monkeypatch.setattr(ring_ws, "producer_prefix", refuse_q)
    monkeypatch.setenv("KB_CACHE", "0")
    args, out = case(rng, 128, 256, 3, True)
    kern = tile.kernel(FA.flash_fwd.pyfunc, num_warps=8, lowering=PRODUCED)     # a fresh object: no kept compile
    ptx = kern.compile(args, "sm_90").ptx
    assert "cp.async.cg" in ptx and "setmaxnreg" in ptx
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], 256, True), rtol=2e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("persistent", [False, True], ids=["grid", "persistent"])
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_q_from_the_producer_matches_torch_sdpa(persistent, d, causal):
    """B4 H8 S1024 (256 tiles: persistent blocks walk two or more; D256 on 128 x 64 tiles), bf16 output."""
    pytest.importorskip("torch", reason="the SDPA reference needs torch")
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA rings and warpgroup MMA need sm_90")
    err = gpu_error_against_sdpa(FA, kernel({**PRODUCED, "product_overlap": True}, persistent), d, causal,
                                 d + causal + 9, "bfloat16", (128, 64) if d == 256 else (128, 128))
    assert err < 2e-2, err


@pytest.mark.gpu
@pytest.mark.parametrize("span", ["loop", "program"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_two_buffers_of_q_match_torch_sdpa(span, d, causal):
    """produced_a_buffers=2 in a persistent block (B4 H8 S1024, 256 tiles: blocks walk two or more, so both
    buffers are used), with the ping-pong turns around each loop or through the program; bf16 output."""
    pytest.importorskip("torch", reason="the SDPA reference needs torch")
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA rings and warpgroup MMA need sm_90")
    low = {**PRODUCED, "product_overlap": True, "produced_a_buffers": 2, "pingpong_span": span}
    err = gpu_error_against_sdpa(FA, kernel(low, True), d, causal, d + causal + 19, "bfloat16", (128, 128))
    assert err < 2e-2, err


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_two_buffers_of_q_on_the_snake_match_torch_sdpa(d):
    """The causal autotune candidate (examples/flash_attention.py SM90_CAUSAL_CANDIDATES): two Q buffers and the
    turns through the program, each block's tiles in a snake, so a block's consecutive tiles are not the
    strided order's; B4 H8 S1024 causal, bf16 output."""
    pytest.importorskip("torch", reason="the SDPA reference needs torch")
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA rings and warpgroup MMA need sm_90")
    low = {**PRODUCED, "product_overlap": True, "produced_a_buffers": 2, "pingpong_span": "program",
           "persistent_order": "snake"}
    err = gpu_error_against_sdpa(FA, kernel(low, True), d, True, d + 23, "bfloat16", (128, 128))
    assert err < 2e-2, err
