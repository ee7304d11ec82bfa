"""f8 (e4m3fn / e5m2) tiles: loaded from f8 arrays, multiplied by tile.matmul with f32 accumulation
(B stored N x K, as torch._scaled_mm takes it), a per-tensor scale in the epilogue, and produced by
`.astype` (nearest even, saturating). On the tile simulator, on the portable lowering and on the
sm_89 tensor-core lowering (cp.async + ldmatrix + mma.sync m16n8k32) run by the SIMT simulator,
against float64 NumPy; the PTX for sm_89/sm_90a (wgmma k32 fed by TMA) assembles."""
from __future__ import annotations

import collections
import json

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

import dsl.sim.interp as interp
from dsl import tile
from dsl.backend.ptxas import find_ptxas
from dsl import DslCompileError

E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
PAIRS = [(E4, E4), (E4, E5), (E5, E5)]


def f8_reference(a, bt, scale):
    return scale * (a.astype(np.float64) @ bt.astype(np.float64).T)


def count_ptx(monkeypatch) -> collections.Counter:
    seen: collections.Counter = collections.Counter()
    original = interp.Machine.e_InlinePtx

    def spy(mach, e, sel):
        seen[e.asm.split()[0]] += 1
        return original(mach, e, sel)
    monkeypatch.setattr(interp.Machine, "e_InlinePtx", spy)
    return seen


@pytest.mark.parametrize("ta,tb", PAIRS, ids=["e4m3-e4m3", "e4m3-e5m2", "e5m2-e5m2"])
@pytest.mark.parametrize("k", [208, 200], ids=["16-byte-rows", "8-byte-rows"])
@pytest.mark.slow
def test_f8_gemm_with_a_scale_matches_numpy_on_every_simulated_path(monkeypatch, rng, ta, tb, k):
    """K = 208: rows of whole 16-byte chunks, the tensor-core loop; K = 200: the portable path."""
    m, n, scale = 136, 72, 0.375
    a = rng.standard_normal((m, k)).astype(ta)
    bt = rng.standard_normal((n, k)).astype(tb)
    ref = f8_reference(a, bt, scale)
    c = np.full((m, n), np.nan, np.float32)
    K.gemm_f8.simulate(a, bt, np.float32(scale), tile.partition(c, (64, 64)), 64)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    seen = count_ptx(monkeypatch)
    c = np.full((m, n), np.nan, np.float32)
    K.gemm_f8.simulate_lowered(a, bt, np.float32(scale), tile.partition(c, (64, 64)), 64, tensor_cores=True)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    mma = f"mma.sync.aligned.m16n8k32.row.col.f32.{'e4m3' if ta is E4 else 'e5m2'}.{'e4m3' if tb is E4 else 'e5m2'}.f32"
    assert (seen[mma] > 0) == (k % 16 == 0)


def test_f8_gemm_stores_bf16_rounded_once(rng):
    m, k, n = 72, 96, 40
    a, bt = rng.standard_normal((m, k)).astype(E4), rng.standard_normal((n, k)).astype(E4)
    c = np.zeros((m, n), ml_dtypes.bfloat16)
    K.gemm_f8.simulate_lowered(a, bt, np.float32(2.0), tile.partition(c, (64, 64)), 32, tensor_cores=True)
    ref = f8_reference(a, bt, 2.0).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(c.astype(np.float32), ref.astype(np.float32))


@pytest.mark.parametrize("runner", ["simulate", "simulate_lowered"])
@pytest.mark.parametrize("dt", [E4, E5], ids=["e4m3", "e5m2"])
def test_quantising_to_f8_rounds_to_nearest_even_and_saturates(rng, runner, dt):
    x = (rng.standard_normal((50, 70)) * 300).astype(np.float32)
    x[0, :4] = [np.nan, np.inf, -np.inf, 1e9]
    q = np.zeros((50, 70), dt)
    getattr(K.quantize_f8, runner)(x, np.float32(0.5), tile.partition(q, (16, 32)))
    top = 448.0 if dt is E4 else 57344.0
    ref = np.clip(x * np.float32(0.5), -top, top).astype(dt)
    assert np.array_equal(q.astype(np.float64), ref.astype(np.float64), equal_nan=True)


def test_an_f8_tile_times_a_16_bit_tile_is_refused_at_compile_time():
    a = np.zeros((64, 64), E4)
    with pytest.raises(DslCompileError, match="two f8"):
        K.gemm_f8.compile((a, np.zeros((64, 64), np.float16), np.float32(1),
                           tile.partition(np.zeros((64, 64), np.float32), (64, 64)), 32), "sm_90")


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("tshape,bk", [((128, 128), 64), ((128, 256), 128)])
@pytest.mark.slow
def test_f8_gemm_runs_wgmma_k32_through_tma_on_sm90(tshape, bk):
    from test_tile_ptx_assembles import ptxas_usage
    a = np.zeros((256, 256), E4)
    bt = np.zeros((256, 256), E5)
    args = (a, bt, np.float32(1), tile.partition(np.zeros((256, 256), ml_dtypes.bfloat16), tshape), bk)
    ck = K.gemm_f8.compile(args, "sm_90")
    wg = [line for line in ck.ptx.splitlines() if "wgmma.mma_async" in line]
    assert wg and all(f"m64n{tshape[1]}k32.f32.e4m3.e5m2" in w and w.rstrip().endswith("p, 1, 1; }") for w in wg)
    c = json.loads(ck.contract_json)
    assert c["tensor_maps"] == [{"arg": "a", "box": [128, bk], "swizzle": bk},
                                {"arg": "bt", "box": [tshape[1], bk], "swizzle": bk}]
    assert c["requires"] == ["a.shape[1] % 16 == 0", "bt.shape[1] % 16 == 0", "c.shape[1] % 8 == 0"]
    assert ptxas_usage(ck.ptx, "sm_90a")["spill"] == 0


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.slow
def test_f8_gemm_uses_mma_sync_k32_on_sm89_and_the_portable_path_on_sm80():
    from test_tile_ptx_assembles import ptxas_usage
    a = np.zeros((256, 256), E4)
    args = (a, a, np.float32(1), tile.partition(np.zeros((256, 256), np.float32), (128, 128)), 64)
    ptx89 = K.gemm_f8.compile(args, "sm_89").ptx
    assert "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32" in ptx89 and ".version 8.4" in ptx89
    assert ptxas_usage(ptx89, "sm_89")["spill"] == 0
    small = (a, a, np.float32(1), tile.partition(np.zeros((256, 256), np.float32), (64, 64)), 64)
    ptx80 = K.gemm_f8.compile(small, "sm_80").ptx
    assert "mma" not in ptx80 and "cvt.f32.f16" in ptx80      # f8 widened in software, FMA products
    ptxas_usage(ptx80, "sm_80")


def test_the_16_byte_row_fact_is_kept_for_1_byte_elements_only():
    """div16 (rows of whole 16-byte chunks of 1-byte elements) is a launch fact of f8 arrays; a 16-bit
    array whose last extent is 8 mod 16 gets no second specialisation from it."""
    e4 = np.zeros((64, 48), ml_dtypes.float8_e4m3fn)
    facts = K.gemm_f8.facts((e4, e4, np.float32(1), tile.partition(np.zeros((64, 64), np.float32), (64, 64)), 64))
    assert facts["a"]["div16"] and facts["a"]["div8"]
    h = np.zeros((64, 24), np.float16)
    facts = K.gemm.facts((h, h, tile.partition(np.zeros((64, 24), np.float32), (64, 64)), 32))
    assert facts["a"]["div8"] and not facts["a"]["div16"]
    h32 = np.zeros((64, 32), np.float16)
    assert not K.gemm.facts((h32, h32, tile.partition(np.zeros((64, 32), np.float32), (64, 64)), 32))["a"]["div16"]
