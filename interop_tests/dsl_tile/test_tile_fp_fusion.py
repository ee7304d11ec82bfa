"""The tile lowering switch fp_fusion (dsl/tile/switches.py): on, a float multiply whose result feeds a
subtract rounds once, as one fma.rn (Triton's enable_fp_fusion, nvcc's --fmad); off (the default), each
operation rounds, as the simulators do. The GPU test tells the two apart by value: for c = fl(a * b),
a * b - c is exactly 0 when the product is rounded first and the product's rounding error (nonzero
for most random f32 a, b) when fused; float64 holds a * b of two f32 exactly, so the fused result
is float64's a * b - c rounded to f32."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import DslCompileError, f32, tile

N, BLOCK = 1000, 256            # four blocks, the last one partial


def residual_pyfunc(a: tile.Array[f32, 1], b: tile.Array[f32, 1], c: tile.Array[f32, 1], out: tile.Partition[f32, 1]):
    n = out.tile_shape[0]
    i = tile.bid(0)
    out.store(tile.load(a, i, (n,)) * tile.load(b, i, (n,)) - tile.load(c, i, (n,)))


PLAIN = tile.kernel(residual_pyfunc)
FUSED = tile.kernel(residual_pyfunc, lowering={"fp_fusion": True})


def _inputs(rng):
    a, b = (rng.standard_normal(N).astype(np.float32) for _ in range(2))
    return a, b, (a * b).astype(np.float32)          # c = the product rounded to f32


def _ptx(kernel, rng) -> str:
    a, b, c = _inputs(rng)
    return kernel.compile((a, b, c, tile.partition(np.zeros(N, np.float32), (BLOCK,))), "sm_90").ptx


def test_a_fused_kernel_multiplies_and_subtracts_with_one_fma():
    rng = np.random.default_rng(1)
    fused, plain = _ptx(FUSED, rng), _ptx(PLAIN, rng)
    assert "fma.rn.f32" in fused and "mul.rn.f32" not in fused, fused[-3000:]
    assert "fma.rn.f32" not in plain and "mul.rn.f32" in plain and "sub.rn.f32" in plain, plain[-3000:]


def test_the_environment_switch_fuses_kernels_that_do_not_fix_it(monkeypatch):
    monkeypatch.setenv("KB_TILE_FP_FUSION", "1")
    assert "fma.rn.f32" in _ptx(tile.kernel(residual_pyfunc), np.random.default_rng(2))


def test_a_non_bool_fp_fusion_is_refused_at_the_def_naming_the_switch():
    with pytest.raises(DslCompileError, match=r"fp_fusion must be True or False, got 1"):
        tile.kernel(residual_pyfunc, lowering={"fp_fusion": 1})


def test_the_simulator_rounds_each_operation_with_or_without_fusion():
    """The documented difference: the simulators do not fuse, so a * b - fl(a * b) is 0 there."""
    a, b, c = _inputs(np.random.default_rng(3))
    out = np.full(N, np.nan, np.float32)
    FUSED.simulate(a, b, c, tile.partition(out, (BLOCK,)))
    assert (out == 0).all()


@pytest.mark.gpu
def test_gpu_fusion_leaves_the_products_rounding_error_and_no_fusion_leaves_zero():
    import torch
    a, b, c = _inputs(np.random.default_rng(4))
    ta, tb, tc = (torch.from_numpy(x).cuda() for x in (a, b, c))
    got = {}
    for name, kernel in (("plain", PLAIN), ("fused", FUSED)):
        out = torch.full((N,), float("nan"), device="cuda")
        kernel(ta, tb, tc, tile.partition(out, (BLOCK,)))
        torch.cuda.synchronize()
        got[name] = out.cpu().numpy()
    assert (got["plain"] == 0).all()
    want = (a.astype(np.float64) * b - c).astype(np.float32)      # exact product, one rounding
    assert np.array_equal(got["fused"], want)
    assert np.count_nonzero(want) > N // 2

