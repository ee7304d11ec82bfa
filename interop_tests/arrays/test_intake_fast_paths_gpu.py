"""The fast intake paths on the GPU: torch CUDA tensors through the C shim, the current torch and CuPy
streams through their C entry points; arrays changed in place are validated against their new metadata
at the next launch, and the fallback attribute paths give the same results."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _native
from dsl import f32, simt

pytestmark = pytest.mark.gpu


@simt.kernel(block=256, requires=["len(a) == len(out)"])
def twice(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0


@pytest.fixture(params=[True, False], ids=["fast", "attributes"])
def fast(request):
    _native.set_fast_intake(torch=request.param, cupy=request.param)
    yield request.param
    _native.set_fast_intake(torch=True, cupy=True)


def test_torch_cuda_tensors_and_their_current_stream_take_the_fast_paths(fast):
    torch = pytest.importorskip("torch")
    x = torch.rand(1001, device="cuda") + 1
    out = torch.full((1001,), -7.0, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        twice(x, out)
    side.synchronize()
    torch.testing.assert_close(out, 2 * x)
    st = _native.fast_intake_status()
    if fast:
        assert st["torch"][0] == "on" and st["torch_stream"][0] == "on", st
    else:
        assert st["torch"][0] == "disabled", st


def test_a_torch_tensor_resized_in_place_is_validated_against_its_new_shape(fast):
    torch = pytest.importorskip("torch")
    x = torch.rand(1000, device="cuda")
    out = torch.full((1000,), -7.0, device="cuda")
    twice(x, out)
    out.resize_(500)
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(a\) = 1000, len\(out\) = 500"):
        twice(x, out)
    x.resize_(500)
    twice(x, out)
    torch.cuda.synchronize()
    torch.testing.assert_close(out, 2 * x)


def test_cupy_arrays_reshaped_in_place_and_the_cupy_stream(fast):
    cp = pytest.importorskip("cupy")
    x = cp.random.rand(1200, dtype=cp.float32) + 1
    out = cp.full(1200, -7.0, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        twice(x, out)
    s.synchronize()
    np.testing.assert_allclose(cp.asnumpy(out), 2 * cp.asnumpy(x), rtol=1e-6)
    out.shape = (2, 600)                         # CuPy's shape is assignable: metadata changed in place
    with pytest.raises(bridge.NdimError):
        twice(x, out)
    st = _native.fast_intake_status()
    assert st["cupy_stream"][0] == ("on" if fast else "disabled"), st
