"""Register reallocation of warp-specialised tile kernels (KB_TILE_SETMAXNREG="C/P",
dsl/tile/lower/matmul/warp_specialised.py): the producer warpgroup gives registers back (setmaxnreg.dec P),
the consumer warpgroups take them (setmaxnreg.inc C), the kernel states `.minnctapersm 1` so ptxas
sizes the block's register pool for it; only where it helps (the consumers get more than ptxas could
give every thread) and the pool covers it. In the warp-specialised GEMM the code after the GEMM loop
then runs inside the consumer role: live accumulators across the roles' join made ptxas fail (C7600).

GPU part: the GEMM and attention GPU tests run with it set, e.g.
KB_TILE_SETMAXNREG=240/24 KB_TILE_GEMM_PIPELINE=ws python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_gpu.py -k pipeline
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas


def _gemm_args(rng, which: str, m: int, k: int, n: int):
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    c = np.full((m, n), np.nan, np.float32)
    if which == "gemm_bias_relu":
        bias = rng.standard_normal(n).astype(np.float32)
        return (a, b, bias, tile.partition(c, (128, 256)), 64), np.maximum(ref + bias, 0), c
    return (a, b, tile.partition(c, (128, 256)), 64), ref, c


@pytest.mark.parametrize("which", ["gemm", "gemm_bias_relu"])
def test_the_warp_specialised_gemm_reallocates_and_matches_numpy_in_the_simulator(monkeypatch, rng, which):
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    monkeypatch.setenv("KB_TILE_SETMAXNREG", "240/24")
    args, ref, c = _gemm_args(rng, which, 300, 208, 264)
    kernel = getattr(K, which)
    ptx = kernel.compile(args, "sm_90").ptx
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in ptx and "setmaxnreg.dec.sync.aligned.u32 24;" in ptx
    assert ".minnctapersm 1" in ptx and ".reqntid 384, 1, 1" in ptx
    kernel.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
def test_ptxas_allocates_the_reallocated_gemm(monkeypatch):
    """128x256 tiles: the plain GEMM no longer fails (C7600) and spills nothing; the bias epilogue spills
    less than without reallocation (396 bytes there, 168 registers for all 384 threads)."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    spills = {}
    for regs in ("off", "240/24"):
        monkeypatch.setenv("KB_TILE_SETMAXNREG", regs)
        for kernel, args in ((K.gemm, (a, a)), (K.gemm_bias_relu, (a, a, np.zeros(256, np.float32)))):
            kern = tile.kernel(kernel.pyfunc)
            ptx = kern.compile((*args, tile.partition(np.zeros((256, 256), np.float32), (128, 256)), 64), "sm_90").ptx
            usage, log = assemble(ptx, "sm_90a")
            assert "C7512" not in log, log           # no wgmma serialised for want of registers
            spills[kernel.name, regs] = usage[0].spill_stores
    assert spills["gemm", "240/24"] == 0
    assert spills["gemm_bias_relu", "240/24"] < spills["gemm_bias_relu", "off"]


def test_reallocation_is_left_out_where_it_cannot_help_or_be_met(monkeypatch, rng):
    """One consumer warpgroup (256 threads: 255 registers each already), a persistent GEMM (its roles
    run once per tile), and no warp specialisation at all: no setmaxnreg."""
    monkeypatch.setenv("KB_TILE_SETMAXNREG", "240/24")
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    monkeypatch.setenv("KB_TILE_LOOP_PIPELINE", "ws")
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("fa_regs", Path(__file__).resolve().parents[2] / "examples" /
                                                  "flash_attention.py")
    fa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fa)
    q = np.zeros((512, 128), ml_dtypes.bfloat16)
    flash = (q, q, q, tile.partition(np.zeros((512, 128), np.float32), (64, 128)), 256, 0.1, 64, False, 1)
    one_wg = tile.kernel(fa.flash_fwd.pyfunc, num_warps=4).compile(flash, "sm_90")
    assert one_wg.threads == 256 and "setmaxnreg" not in one_wg.ptx
    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    gemm = (a, a, tile.partition(np.zeros((256, 256), np.float32), (128, 128)), 64)
    persistent = tile.kernel(K.gemm.pyfunc, persistent=True).compile(gemm, "sm_90")
    assert persistent.threads == 384 and "setmaxnreg" not in persistent.ptx
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "sync")
    assert "setmaxnreg" not in tile.kernel(K.gemm.pyfunc).compile(gemm, "sm_90").ptx
