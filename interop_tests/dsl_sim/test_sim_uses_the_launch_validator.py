"""simulate() validates through the same native contract validator as a GPU launch: the same typed
errors for bad calls (and nothing written), and the grid/block a GPU launch would pick."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.errors import (AliasingError, BlockSizeError, DeviceMismatchError, DTypeError, ReadOnlyError,
                           ShapeRelationError)
from dsl import f32, simt


@simt.kernel(block=128, requires=["len(a) == len(out)"])
def scale(a: simt.Array[f32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = a[i] * s


@simt.kernel(domain=2)
def copy2d(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    if ij[0] < a.shape[0] and ij[1] < a.shape[1]:
        out[ij] = a[ij]


def poisoned(n: int) -> np.ndarray:
    return np.full(n, -7.0, np.float32)


def test_a_requires_relation_is_checked_before_anything_runs(rng):
    a, out = rng.standard_normal(1001).astype(np.float32), poisoned(1000)
    with pytest.raises(ShapeRelationError, match=r"scale: argument 'out' \(#1\).*len\(a\) == len\(out\)"):
        scale.simulate(a, out, np.float32(2.0))
    assert (out == -7.0).all()


def test_dtype_readonly_and_aliasing_errors_match_the_gpu_validator(rng):
    a, out = rng.standard_normal(1000).astype(np.float32), poisoned(1000)
    with pytest.raises(DTypeError, match=r"argument 'a'"):
        scale.simulate(a.astype(np.float64), out, np.float32(2.0))
    ro = poisoned(1000)
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError, match=r"argument 'out'"):
        scale.simulate(a, ro, np.float32(2.0))
    with pytest.raises(AliasingError, match=r"argument 'out'"):
        scale.simulate(out, out, np.float32(2.0))
    with pytest.raises(BlockSizeError, match=r"exactly \(128, 1, 1\)"):
        scale.simulate(a, out, np.float32(2.0), block=64)
    assert (out == -7.0).all() and (ro == -7.0).all()


def test_non_host_memory_is_refused_by_the_simulator(rng):
    import bridge
    # a device array described by hand (its pointer is never dereferenced: the validator refuses it)
    dev = bridge.Array(ptr=1 << 20, shape=[1000], strides=[4], dtype="float32", device_type=2, device_id=0,
                       readonly=False, owner=None)
    out = poisoned(1000)
    with pytest.raises(DeviceMismatchError, match=r"argument 'a'.*host memory"):
        scale.simulate(dev, out, np.float32(2.0))
    assert (out == -7.0).all()


def test_the_default_block_and_derived_grid_are_the_gpu_ones(rng):
    a = rng.standard_normal((37, 300)).astype(np.float32)
    out = np.full_like(a, np.nan)
    copy2d.simulate(a, out)            # grid derived from `out` with the validator's default block
    np.testing.assert_array_equal(out, a)
    x = rng.standard_normal(1000).astype(np.float32)
    y = poisoned(1000)
    scale.simulate(x, y, np.float32(3.0))
    np.testing.assert_allclose(y, x * np.float32(3.0), rtol=1e-6)
    empty = np.empty(0, np.float32)
    scale.simulate(empty, empty.copy(), np.float32(3.0))     # an empty grid launches nothing
