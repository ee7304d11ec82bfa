"""The tile lowering switch ftz (dsl/tile/switches.py): on, a kernel's f32 math flushes denormal inputs
and results to zero, as nvcc's -ftz=true compiles it -- libdevice's exp2 becomes one ex2.approx.ftz
(Triton's exp2) instead of a range test and two multiplies around ex2.approx, and add/mul/fma take
their .ftz forms. Off (the default), denormals are kept, as the simulators keep them. The GPU tests tell
the two apart by value: 2^x for x in [-149, -127] is a denormal, flushed to 0 under ftz only."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import DslCompileError, f32, tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.tile.switches import switches_key
from interop_tests.dsl_tile.tutorial_kit import attention_on_gpu, tutorial

N, BLOCK = 1000, 256            # four blocks, the last one partial


def pow2_plus_pyfunc(x: tile.Array[f32, 1], y: tile.Array[f32, 1], out: tile.Partition[f32, 1]):
    n = out.tile_shape[0]
    i = tile.bid(0)
    out.store(tile.exp2(tile.load(x, i, (n,))) + tile.load(y, i, (n,)))


PLAIN = tile.kernel(pow2_plus_pyfunc)
FTZ = tile.kernel(pow2_plus_pyfunc, lowering={"ftz": True})


def _inputs(rng):
    """x: half normal exponents in [-20, 10], half denormal ones in [-148, -128]; y: zeros, so that the
    sum shows 2^x itself (an add of 0 keeps a denormal unless the add flushes it)."""
    x = np.where(rng.random(N) < 0.5, rng.uniform(-20, 10, N), rng.uniform(-148, -128, N)).astype(np.float32)
    return x, np.zeros(N, np.float32)


def _ptx(kernel) -> str:
    x, y = _inputs(np.random.default_rng(1))
    return kernel.compile((x, y, tile.partition(np.zeros(N, np.float32), (BLOCK,))), "sm_90").ptx


def test_an_ftz_kernel_computes_exp2_as_one_flushing_ex2_and_adds_with_ftz():
    ftz, plain = _ptx(FTZ), _ptx(PLAIN)
    assert "ex2.approx.ftz.f32" in ftz and re.search(r"add(\.rn)?\.ftz\.f32", ftz), ftz[-3000:]
    assert not re.search(r"ex2\.approx\.f32", ftz)
    assert "ex2.approx.f32" in plain and ".ftz" not in plain, plain[-3000:]


def test_the_environment_switch_flushes_kernels_that_do_not_fix_it(monkeypatch):
    monkeypatch.setenv("KB_TILE_FTZ", "1")
    assert "ex2.approx.ftz.f32" in _ptx(tile.kernel(pow2_plus_pyfunc))
    assert "ftz" in switches_key()


def test_a_kernel_fixing_ftz_off_keeps_denormals_whatever_the_environment(monkeypatch):
    monkeypatch.setenv("KB_TILE_FTZ", "1")
    assert ".ftz" not in _ptx(tile.kernel(pow2_plus_pyfunc, lowering={"ftz": False}))


def test_two_kernels_over_one_function_keep_their_own_ptx():
    """The switch is part of the compile keys: the flushing kernel compiled second is not served the
    plain kernel's PTX."""
    assert ".ftz" not in _ptx(tile.kernel(pow2_plus_pyfunc))
    assert ".ftz" in _ptx(tile.kernel(pow2_plus_pyfunc, lowering={"ftz": True}))


def test_a_non_bool_ftz_is_refused_at_the_def_naming_the_switch():
    with pytest.raises(DslCompileError, match=r"ftz must be True or False, got 'yes'"):
        tile.kernel(pow2_plus_pyfunc, lowering={"ftz": "yes"})


def test_a_bad_environment_value_is_refused_naming_the_variable_and_the_output_is_untouched(monkeypatch):
    from bridge.errors import ConfigurationError
    monkeypatch.setenv("KB_TILE_FTZ", "sometimes")
    x, y = _inputs(np.random.default_rng(2))
    out = np.full(N, np.nan, np.float32)
    with pytest.raises(ConfigurationError, match="KB_TILE_FTZ"):
        tile.kernel(pow2_plus_pyfunc).compile((x, y, tile.partition(out, (BLOCK,))), "sm_90")
    assert np.isnan(out).all()


def test_the_simulator_keeps_denormals_with_or_without_ftz():
    """The documented difference: the simulators do not flush, so 2^-140 stays 2^-140 there."""
    x, y = _inputs(np.random.default_rng(3))
    out = np.full(N, np.nan, np.float32)
    FTZ.simulate(x, y, tile.partition(out, (BLOCK,)))
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    assert (want[x < -127] != 0).all()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=0)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not found (install the CUDA toolkit)")
@pytest.mark.parametrize("bm, bn, warps, lowering", [
    (64, 64, None, {"loop_pipeline": "tma", "fp_fusion": True, "ftz": True}),
    (128, 128, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24", "fp_fusion": True, "ftz": True}),
    (128, 64, 4, {"wgmma_slices": True, "loop_pipeline": "tma", "fp_fusion": True, "ftz": True}),
    (64, 64, None, {"loop_pipeline": "tma", "wgmma_a": "shared", "fp_fusion": True, "ftz": True})],
    ids=["64x64-tma", "128x128-ws", "128x64-w4-slices", "64x64-tma-q-shared"])
def test_tutorial_attention_under_ftz_has_only_flushing_exp2_and_no_spills(bm, bn, warps, lowering):
    attn = tutorial("06_fused_attention")
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2 * 1024, 64)).astype(np.float16) for _ in range(3))
    args = attn.launch_args(q, k, v, np.zeros_like(q), 1024, False, bm, bn)
    ck = tile.kernel(attn.attn_fwd.pyfunc, num_warps=warps, lowering=lowering).compile(args, "sm_90")
    assert ck.ptx.count("ex2.approx.ftz.f32") > 0 and "ex2.approx.f32" not in ck.ptx
    usage, _ = assemble(ck.ptx, ck.metadata["arch"])
    assert usage[0].spill_stores == 0 and usage[0].spill_loads == 0, usage


@pytest.mark.gpu
def test_gpu_ftz_flushes_denormal_results_and_the_default_keeps_them():
    import torch
    x, y = _inputs(np.random.default_rng(5))
    tx, ty = (torch.from_numpy(a).cuda() for a in (x, y))
    got = {}
    for name, kernel in (("plain", PLAIN), ("ftz", FTZ)):
        out = torch.full((N,), float("nan"), device="cuda")
        kernel(tx, ty, tile.partition(out, (BLOCK,)))
        torch.cuda.synchronize()
        got[name] = out.cpu().numpy().astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    tiny = x < -127
    assert tiny.sum() > N // 4 and (~tiny).sum() > N // 4
    assert (got["ftz"][tiny] == 0).all()
    assert (got["plain"][tiny] > 0).all()
    # a denormal result is a multiple of 2^-149: within two of those steps of 2^x (and ex2's 2 ulp)
    np.testing.assert_allclose(got["plain"][tiny], want[tiny], rtol=2.0 ** -21, atol=2.0 ** -148)
    for name in ("plain", "ftz"):                                          # ex2.approx: 2 ulp of normals
        np.testing.assert_allclose(got[name][~tiny], want[~tiny], rtol=2.0 ** -21)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bm, bn, warps, lowering", [
    (64, 64, 4, {"loop_pipeline": "tma", "fp_fusion": True, "ftz": True}),
    (128, 128, 8, {"loop_pipeline": "ws", "setmaxnreg": "240/24", "fp_fusion": True, "ftz": True})],
    ids=["64x64-tma", "128x128-ws"])
def test_gpu_tutorial_attention_under_ftz_matches_sdpa(bm, bn, warps, lowering, causal):
    """The lowerings tutorial 06's head-dim-64 bars are met with (benchmarks/triton_tutorials.py)."""
    done = attention_on_gpu(lowering, bm, bn, warps, 64, 1024, causal, batch=2, heads=3, seed=12)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert float(done.stdout.strip().splitlines()[-1]) < 2e-2
