"""The fast intake paths on the GPU: torch CUDA tensors through the C shim, CuPy arrays through their C
fields, the current torch and CuPy streams through their C entry points; arrays changed in place are
validated against their new metadata at the next launch, and the fallback attribute paths give the same
results (errors included)."""
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


def cupy_layouts(cp):
    base = cp.arange(6 * 10 * 14, dtype=cp.float32).reshape(6, 10, 14)
    return {
        "contiguous": base,
        "transposed": base.transpose(2, 0, 1),
        "sliced_with_offset": base[1:, 2:7, ::3],
        "reversed": base[::-1],
        "broadcast_zero_stride": cp.broadcast_to(cp.ones(5, cp.float32), (7, 5)),
        "zero_dim": cp.asarray(3.0, dtype=cp.float32),
        "empty": cp.empty((0, 4), cp.float32),
        "fortran_order": cp.asfortranarray(base),
        "eight_dims": cp.ones((2,) * 8, cp.float32),
    }


def cupy_says(a):
    """What CuPy's own attributes say about `a` (not the code under test)."""
    return tuple(a.shape), tuple(a.strides), a.data.ptr, a.data.device_id


def intake_outcome(x):
    try:
        a = bridge.asarray(x)
    except Exception as e:                      # noqa: BLE001 - the outcome itself is compared
        return type(e).__name__, str(e)
    return (tuple(a.shape), tuple(a.strides), a.ptr, a.device, a.dtype_name)


LAYOUT_NAMES = ["contiguous", "transposed", "sliced_with_offset", "reversed", "broadcast_zero_stride",
                "zero_dim", "empty", "fortran_order", "eight_dims"]


@pytest.mark.parametrize("name", LAYOUT_NAMES)
def test_every_cupy_layout_reads_as_cupy_describes_it(fast, name):
    cp = pytest.importorskip("cupy")
    x = cupy_layouts(cp)[name]
    outcome = intake_outcome(x)
    if isinstance(outcome[0], str):             # refused (e.g. negative strides): the same on both paths
        _native.set_fast_intake(cupy=not fast)
        assert intake_outcome(x) == outcome
        return
    shape, strides, ptr, dev = cupy_says(x)
    assert outcome == (shape, strides, ptr, dev, "float32")
    st = _native.fast_intake_status()["cupy"]
    assert st[0] == ("on" if fast else "disabled") and (not fast or "self-checked" in st[1]), st


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "uint64", "float16", "float64",
                                   "complex64", "complex128"])
def test_cupy_dtypes_map_like_the_attribute_path(fast, dtype):
    cp = pytest.importorskip("cupy")
    x = cp.zeros((3, 5), dtype=dtype)[:, 1:]
    a = bridge.asarray(x)
    assert a.dtype_name == np.dtype(dtype).name
    assert (tuple(a.shape), tuple(a.strides), a.ptr, a.device) == cupy_says(x)


def test_a_cupy_array_reshaped_in_place_is_read_again_at_every_launch(fast):
    cp = pytest.importorskip("cupy")
    x = cp.random.rand(1200, dtype=cp.float32) + 1
    out = cp.full(1200, -7.0, dtype=cp.float32)
    twice(x, out)
    out.shape = (2, 600)
    poisoned = cp.asnumpy(out).copy()
    with pytest.raises(bridge.NdimError):
        twice(x, out)
    cp.cuda.runtime.deviceSynchronize()
    np.testing.assert_array_equal(cp.asnumpy(out), poisoned)          # nothing was launched
    out.shape = (1200,)
    out.fill(-7.0)
    twice(x, out)
    np.testing.assert_allclose(cp.asnumpy(out), 2 * cp.asnumpy(x), rtol=1e-6)
    assert bridge.asarray(out).shape == (1200,)


def test_cupy_subclasses_take_the_attribute_path_with_the_same_result(fast):
    cp = pytest.importorskip("cupy")

    class Tagged(cp.ndarray):
        pass
    x = cp.arange(24, dtype=cp.float32).reshape(4, 6)[:, ::2]
    sub = x.view(Tagged)
    assert type(sub) is Tagged
    assert intake_outcome(sub) == intake_outcome(x) == (*cupy_says(x)[:3], 0, "float32")


def test_kb_fast_intake_0_turns_the_cupy_field_path_off():
    pytest.importorskip("cupy")
    import os
    import subprocess
    import sys
    code = ("import cupy, bridge; from bridge import _native; bridge.asarray(cupy.ones(2)); "
            "print(_native.fast_intake_status()['cupy'])")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "KB_FAST_INTAKE": "0"},
                         capture_output=True, text=True, check=True).stdout
    assert "'off'" in out and "KB_FAST_INTAKE" in out
