"""GPU: kernels linked through nvJitLink compute the right values, both directions, and the linked
DSL kernel keeps its contract (a violation is refused, the output untouched)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from dsl import f32, link
from interop_tests.cpp_link import link_kernels_src as src

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("n", [1, 1000, 100_003])
@pytest.mark.parametrize("lto", [False, True])
def test_dsl_kernel_calling_cpp_matches_numpy(rng, n, lto, nvjitlink, nvcc):
    x = rng.standard_normal(n).astype(np.float32)
    a, b = np.float32(rng.uniform(-3, 3)), np.float32(rng.uniform(-1, 1))
    dx, dout = bridge.from_host(x), bridge.from_host(np.full(n, np.nan, np.float32))
    k = link.load_linked(src.affine_via_cpp, dx, a, b, dout, lto=lto)
    k(dx, a, b, dout)
    ref = a.astype(np.float64) * x.astype(np.float64) + b
    np.testing.assert_allclose(dout.to_host(), ref, rtol=1e-6, atol=1e-6)


def test_linked_dsl_kernel_refuses_violation_output_untouched(rng, nvjitlink, nvcc):
    n = 1001
    x = rng.standard_normal(n).astype(np.float32)
    poison = (rng.standard_normal(n + 3) * 1e6 + 12345.0).astype(np.float32)
    dx, dout = bridge.from_host(x), bridge.from_host(poison)
    k = link.load_linked(src.affine_via_cpp, dx, np.float32(2), np.float32(1), dout)
    with pytest.raises(bridge.errors.ShapeRelationError) as info:
        k(dx, np.float32(2), np.float32(1), dout)
    assert "out" in str(info.value)
    bridge.synchronize()
    np.testing.assert_array_equal(dout.to_host(), poison)


@pytest.mark.parametrize("n", [1, 1000, 65_537])
def test_cpp_kernel_calling_exported_dsl_function(rng, tmp_path, n, nvjitlink, nvcc):
    cc = bridge.current_device().cc
    arch = f"sm_{cc[0]}{cc[1]}"
    ptx = tmp_path / "softclip.ptx"
    ptx.write_text(link.export_device(src.softclip, [f32, f32], arch))
    cubin = link.link([src.CPP_USER, ptx], arch)
    mod = bridge.load_module(cubin, name="softclip_user")
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    limit = np.float32(1.5)
    dx, dout = bridge.from_host(x), bridge.from_host(np.full(n, np.nan, np.float32))
    block = 128
    bridge.unsafe_launch(mod.apply_softclip, ((n + block - 1) // block,), (block,), dx, limit, dout, np.int32(n))
    x64 = x.astype(np.float64)
    ref = np.where(x64 > limit, limit + (x64 - limit) * 0.125,
                   np.where(x64 < -limit, -limit + (x64 + limit) * 0.125, x64))
    np.testing.assert_allclose(dout.to_host(), ref, rtol=1e-6, atol=1e-6)
