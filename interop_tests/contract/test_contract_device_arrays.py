"""On a GPU: the validator sees real CuPy / PyTorch arrays (through the one intake) and live device limits."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge import _native
from contract_support import arr, attrs, contract, sca

pytestmark = pytest.mark.gpu

SCALE = contract([arr("a", ndim=2), arr("out", ndim=2, access="write", layout="C", align=16), sca("s", "f32")],
                 kernel="scale", domain=2, block={"max_threads": 1024}, requires=["a.shape == out.shape"],
                 grid_from={"arg": "out", "per_thread": [2, 1, 1]})


def live_limits():
    return bridge.Device(0).limits


def test_live_limits_of_device_zero_are_sane():
    lim = live_limits()
    assert lim.device_id == 0 and lim.cc >= 70
    assert lim.max_threads_per_block == 1024 and lim.max_block[2] == 64
    assert lim.smem_per_block_optin >= lim.smem_per_block >= 48 * 1024


def test_cupy_arrays_validate_and_derive_the_grid(rng):
    cp = pytest.importorskip("cupy")
    host = rng.standard_normal((37, 1001)).astype(np.float32)
    a, out = cp.asarray(host), cp.empty((37, 1001), dtype=cp.float32)
    grid, block = _native.validate(SCALE, [a, out, np.float32(1.5)], block=(32, 8), limits=live_limits(),
                                   attrs=attrs())
    assert block == (32, 8, 1) and grid == (-(-1001 // 64), -(-37 // 8), 1)


def test_cupy_views_that_overlap_are_refused(rng):
    cp = pytest.importorskip("cupy")
    base = cp.asarray(rng.standard_normal((40, 1003)).astype(np.float32))
    before = base.copy()
    with pytest.raises(bridge.AliasingError) as info:
        _native.validate(SCALE, [base[1:], base[:-1], 2.0], block=(32, 8), limits=live_limits(), attrs=attrs())
    assert info.value.arg_name == "out" and "argument 'a' (#0)" in str(info.value)
    assert bool((base == before).all())          # validation never touches memory


def test_misaligned_and_strided_cupy_outputs_are_refused(rng):
    cp = pytest.importorskip("cupy")
    a = cp.asarray(rng.standard_normal((9, 33)).astype(np.float32))
    big = cp.empty((10, 36), dtype=cp.float32)
    with pytest.raises(bridge.LayoutError):
        _native.validate(SCALE, [a, big[:9, :33], 1.0], block=(32, 4), limits=live_limits(), attrs=attrs())
    flat = cp.empty(9 * 33 + 1, dtype=cp.float32)
    with pytest.raises(bridge.AlignmentError) as info:
        _native.validate(SCALE, [a, flat[1:].reshape(9, 33), 1.0], block=(32, 4), limits=live_limits(),
                         attrs=attrs())
    assert "aligned to 16 bytes" in str(info.value)


def test_torch_tensors_dtype_and_layout_errors_name_the_argument(rng):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rng.standard_normal((33, 65)).astype(np.float32)).cuda()
    with pytest.raises(bridge.DTypeError) as info:
        _native.validate(SCALE, [a.double(), torch.empty_like(a), 1.0], block=(32, 4), limits=live_limits(),
                         attrs=attrs())
    assert str(info.value) == "scale: argument 'a' (#0): expected 2-D float32 array, got float64 array of shape (33, 65)"
    with pytest.raises(bridge.LayoutError):
        t = torch.empty((65, 33), device="cuda", dtype=torch.float32).t()
        _native.validate(SCALE, [a, t, 1.0], block=(32, 4), limits=live_limits(), attrs=attrs())


def test_host_numpy_array_is_refused_on_the_device(rng):
    cp = pytest.importorskip("cupy")
    out = cp.empty((5, 7), dtype=cp.float32)
    with pytest.raises(bridge.DeviceMismatchError) as info:
        _native.validate(SCALE, [rng.standard_normal((5, 7)).astype(np.float32), out, 1.0], block=(32, 4),
                         limits=live_limits(), attrs=attrs())
    assert info.value.arg == 0 and "host memory (cpu)" in str(info.value)
