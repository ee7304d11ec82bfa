"""On the GPU: a self-overlapping writable torch / CuPy view is refused before launch and nothing is
written; a disjoint interleaved view (only the exact search can prove it) is launched and written
exactly where its strides say. The CPU simulator accepts and writes the same interleaved NumPy view.
"""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from dsl import f32, simt


@simt.kernel(block=128)
def ones(out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = f32(1.0)


@simt.kernel(domain=2, block=(16, 16, 1))
def mark(out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    out[ij] = f32(ij[0] * 10 + ij[1])


def interleaved(buf, as_strided):
    """A 3x3 float32 view with byte strides (12, 16): element (i, j) is buf[3 i + 4 j], all distinct."""
    return as_strided(buf, (3, 3), (12, 16))


def expected_marks(n: int) -> np.ndarray:
    want = np.full(n, -1.0, np.float32)
    for i in range(3):
        for j in range(3):
            want[3 * i + 4 * j] = 10 * i + j
    return want


def test_simulator_writes_an_interleaved_disjoint_numpy_view_exactly():
    buf = np.full(16, -1.0, np.float32)
    mark.simulate(interleaved(buf, np.lib.stride_tricks.as_strided), grid=(1, 1), block=(16, 16))
    np.testing.assert_array_equal(buf, expected_marks(16))


def test_simulator_refuses_a_zero_stride_writable_numpy_view():
    buf = np.full(4, -1.0, np.float32)
    with pytest.raises(bridge.AliasingError, match=r"ones: argument 'out' \(#0\).*byte strides \(0,\).*share bytes"):
        ones.simulate(np.lib.stride_tricks.as_strided(buf, (64,), (0,)))
    np.testing.assert_array_equal(buf, np.full(4, -1.0, np.float32))


@pytest.mark.gpu
def test_torch_expand_as_a_writable_argument_is_refused_and_untouched():
    torch = pytest.importorskip("torch")
    base = torch.full((1,), -1.0, device="cuda")
    with pytest.raises(bridge.AliasingError) as info:
        ones(base.expand(1000))                       # stride 0, and torch does not mark it read-only
    assert info.value.arg_name == "out" and "byte strides (0,)" in str(info.value)
    torch.cuda.synchronize()
    assert base.item() == -1.0
    ones(torch.empty(1000, device="cuda"))            # the same kernel launches with a proper array


@pytest.mark.gpu
def test_cupy_zero_stride_view_is_refused_and_untouched():
    cp = pytest.importorskip("cupy")
    base = cp.full(2, -1.0, cp.float32)
    view = cp.lib.stride_tricks.as_strided(base, (512, 2), (0, 4))
    with pytest.raises(bridge.AliasingError, match=r"mark: argument 'out' \(#0\).*shape \(512, 2\) with byte "
                                                   r"strides \(0, 4\), whose elements \(0, 0\) and \(1, 0\) share"):
        mark(view)
    bridge.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(base), [-1.0, -1.0])


@pytest.mark.gpu
def test_disjoint_interleaved_cupy_view_is_launched_and_written_where_its_strides_say():
    cp = pytest.importorskip("cupy")
    buf = cp.full(16, -1.0, cp.float32)
    mark(interleaved(buf, cp.lib.stride_tricks.as_strided))
    bridge.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(buf), expected_marks(16))
