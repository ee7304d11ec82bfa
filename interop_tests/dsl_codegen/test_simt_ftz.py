"""`@simt.kernel(ftz=True)`: f32 math flushes denormal inputs and results to zero, as nvcc's -ftz=true
(libdevice's reflect flag, and the denormal mode of every function: add, mul and fma take their .ftz
forms, exp2 is one ex2.approx.ftz); `fastmath=True` implies it, as nvcc's --use_fast_math and numba's
fastmath=True do. Off by default, as the simulators keep denormals. The GPU test tells the two apart by
value: 2^x for x in [-148, -128] is a denormal, flushed to 0 under ftz only."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dsl import DslCompileError, f32, simt

N = 1000


def pow2_plus(x: simt.Array[f32, 1], y: simt.Array[f32, 1], out: simt.DisjointSlice[f32, 1]):
    i = simt.thread.index_1d()
    out[i] = math.exp2(x[i]) + y[i]


PLAIN = simt.kernel(block=128)(pow2_plus)
FTZ = simt.kernel(block=128, ftz=True)(pow2_plus)
FAST = simt.kernel(block=128, fastmath=True)(pow2_plus)


def _inputs(rng):
    """x: half normal exponents in [-20, 10], half denormal ones in [-148, -128]; y: zeros (an add of 0
    keeps a denormal unless the add flushes it)."""
    x = np.where(rng.random(N) < 0.5, rng.uniform(-20, 10, N), rng.uniform(-148, -128, N)).astype(np.float32)
    return x, np.zeros(N, np.float32)


def _ptx(kernel) -> str:
    x, y = _inputs(np.random.default_rng(1))
    return kernel.ptx(x, y, np.zeros(N, np.float32))


def test_an_ftz_kernel_flushes_its_f32_math_and_the_default_keeps_denormals():
    ftz, plain = _ptx(FTZ), _ptx(PLAIN)
    assert "ex2.approx.ftz.f32" in ftz and re.search(r"add(\.rn)?\.ftz\.f32", ftz), ftz[-3000:]
    assert "ex2.approx.f32" in plain and ".ftz" not in plain, plain[-3000:]


def test_fastmath_implies_ftz_as_nvcc_use_fast_math_does():
    assert "ex2.approx.ftz.f32" in _ptx(FAST)


def test_ftz_and_no_ftz_over_one_function_keep_their_own_ptx():
    """ftz is part of the options in the compile keys: neither is served the other's PTX."""
    assert ".ftz" not in _ptx(simt.kernel(block=128)(pow2_plus))
    assert ".ftz" in _ptx(simt.kernel(block=128, ftz=True)(pow2_plus))


def test_a_non_bool_ftz_is_refused_at_the_def_naming_the_option():
    with pytest.raises(DslCompileError, match=r"ftz= must be True or False, got int 1"):
        simt.kernel(block=128, ftz=1)(pow2_plus)


def test_the_simulator_keeps_denormals_with_or_without_ftz():
    """The documented difference: the simulators do not flush, so 2^-140 stays 2^-140 there."""
    x, y = _inputs(np.random.default_rng(3))
    out = np.full(N, np.nan, np.float32)
    FTZ.simulate(x, y, out)
    want = np.exp2(x.astype(np.float64)).astype(np.float32)
    assert (want[x < -127] != 0).all()
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=0)


@pytest.mark.gpu
def test_gpu_ftz_and_fastmath_flush_denormal_results_and_the_default_keeps_them():
    import bridge
    x, y = _inputs(np.random.default_rng(5))
    got = {}
    for name, kernel in (("plain", PLAIN), ("ftz", FTZ), ("fastmath", FAST)):
        out = bridge.from_host(np.full(N, np.nan, np.float32))
        kernel(bridge.from_host(x), bridge.from_host(y), out)
        bridge.synchronize()
        got[name] = out.to_host().astype(np.float64)
    want = np.exp2(x.astype(np.float64))
    tiny = x < -127
    assert tiny.sum() > N // 4 and (~tiny).sum() > N // 4
    assert (got["ftz"][tiny] == 0).all() and (got["fastmath"][tiny] == 0).all()
    assert (got["plain"][tiny] > 0).all()
    # a denormal result is a multiple of 2^-149: within two of those steps of 2^x (and ex2's 2 ulp)
    np.testing.assert_allclose(got["plain"][tiny], want[tiny], rtol=2.0 ** -21, atol=2.0 ** -148)
    for name in got:                                                  # ex2.approx: 2 ulp of normals
        np.testing.assert_allclose(got[name][~tiny], want[~tiny], rtol=2.0 ** -21)
