"""The validator's memo on the GPU (cpp/native/launcher.hpp, AcceptedLaunch): a launch whose argument
values and configuration equal the validator's last acceptance is accepted again without running it;
anything the validator could see differently — an array's shape or strides changed in place behind the
same pointer, another scalar, another block — is validated again and refused with the validator's own
error, the output left as it was."""
from __future__ import annotations

import numpy as np
import pytest

import bridge

from runtime_helpers import all_contracts, rt_ptx

pytestmark = pytest.mark.gpu

N = 1000 + 37     # not a multiple of any block size used


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels_memo")


@pytest.fixture()
def torch():
    return pytest.importorskip("torch")


def host(n, rng):
    return (rng.standard_normal(n) * 10).astype(np.float32)


def test_an_identical_launch_is_accepted_again_and_computes_the_same(mod, rng):
    a_np, b_np = host(N, rng), host(N, rng)
    a, b = bridge.from_host(a_np), bridge.from_host(b_np)
    out = bridge.full((N,), -7.0, "float32")
    k = mod.vecadd
    before = k.launcher.accepted_again
    for _ in range(5):
        k(a, b, out, N)
    assert k.launcher.accepted_again - before == 4      # the first launch of these pointers was validated
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), a_np + b_np, rtol=1e-6)
    other = bridge.full((N,), -7.0, "float32")           # a new pointer: validated, not taken as equal
    hits = k.launcher.accepted_again
    k(a, b, other, N)
    assert k.launcher.accepted_again == hits
    bridge.synchronize()
    np.testing.assert_allclose(other.to_host(), a_np + b_np, rtol=1e-6)


def test_a_scalar_that_breaks_a_relation_is_refused_after_accepted_launches(mod, rng, torch):
    a, b = torch.rand(N, device="cuda") + 1, torch.rand(N, device="cuda") + 1
    out = torch.empty(N, device="cuda")
    for _ in range(3):
        mod.vecadd(a, b, out, N)
    out.fill_(-7.0)                                      # same pointer, poisoned
    with pytest.raises(bridge.ShapeRelationError, match=r"n == len\(out\)"):
        mod.vecadd(a, b, out, N - 1)
    torch.cuda.synchronize()
    assert bool((out == -7.0).all())


def test_a_tensor_resized_in_place_is_refused_after_accepted_launches(mod, torch):
    a, b = torch.rand(N, device="cuda") + 1, torch.rand(N, device="cuda") + 1
    out = torch.empty(N, device="cuda")
    for _ in range(3):
        mod.vecadd(a, b, out, N)
    ptr = out.data_ptr()
    out.resize_(N - 5)                                   # shape changed behind the same pointer
    assert out.data_ptr() == ptr
    out.fill_(-7.0)
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(a\) = 1037, len\(out\) = 1032"):
        mod.vecadd(a, b, out, N)
    torch.cuda.synchronize()
    assert bool((out == -7.0).all())


def test_strides_changed_in_place_are_refused_after_accepted_launches(mod, torch):
    a, b = torch.rand(N, device="cuda") + 1, torch.rand(N, device="cuda") + 1
    storage = torch.empty(2 * N, device="cuda")
    out = storage[:N]
    for _ in range(3):
        mod.vecadd(a, b, out, N)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)
    storage.fill_(-7.0)
    out.as_strided_((N,), (2,))                          # same pointer and shape, every other element
    with pytest.raises(bridge.LayoutError, match="C-contiguous"):
        mod.vecadd(a, b, out, N)
    torch.cuda.synchronize()
    assert bool((storage == -7.0).all())


def test_another_block_is_validated_again_after_accepted_launches(mod, torch):
    a, b = torch.rand(N, device="cuda") + 1, torch.rand(N, device="cuda") + 1
    out = torch.empty(N, device="cuda")
    grid = (N + 255) // 256
    for _ in range(3):
        mod.vecadd[grid, 256](a, b, out, N)
    out.fill_(-7.0)
    with pytest.raises(bridge.BlockSizeError, match="512"):
        mod.vecadd[grid, 1024](a, b, out, N)             # the contract allows at most 512 threads
    torch.cuda.synchronize()
    assert bool((out == -7.0).all())
    mod.vecadd[grid, 256](a, b, out, N)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b)
