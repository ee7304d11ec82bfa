"""The SIMT simulator runs only validated launches: `TileKernel.simulate_lowered` validates the lowered
kernel's launch against its own contract (the one builder, the one native validator) before
`dsl.sim.run`, as `SimtKernel.simulate` does; refusals are the GPU's error classes and nothing is
written."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge.errors import AliasingError, ArgumentKindError, GridSizeTypeError, ReadOnlyError, ShapeRelationError
from dsl import f32, simt, tile

POISON = -7.25


@tile.kernel
def copy(a: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(a, tile.bid(0), out.tile_shape))


@tile.kernel
def two(a: tile.Array[f32], p: tile.Partition[f32], q: tile.Partition[f32]):
    v = tile.load(a, tile.bid(0), p.tile_shape)
    p.store(v)
    q.store(v * 2.0)


@tile.kernel(persistent=True)
def pcopy(a: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(a, tile.bid(0), out.tile_shape))


def poisoned(n: int) -> np.ndarray:
    return np.full(n, POISON, np.float32)


def test_simulate_lowered_refuses_what_the_gpu_refuses_and_writes_nothing(rng):
    a = rng.standard_normal(300).astype(np.float32)
    out = poisoned(300)
    with pytest.raises(AliasingError, match=r"copy: argument 'out' \(#1\): expected memory disjoint from argument 'a'"):
        copy.simulate_lowered(out, tile.partition(out, (128,)))
    ro = poisoned(300)
    ro.flags.writeable = False
    with pytest.raises(ReadOnlyError, match=r"copy: argument 'out' \(#1\)"):
        copy.simulate_lowered(a, tile.partition(ro, (128,)))
    p, q = poisoned(300), poisoned(600)
    with pytest.raises(ShapeRelationError, match=r"two: .*\(q.shape\[0\] \+ 127\) // 128 == \(p.shape\[0\] \+ 127\) // 128"):
        two.simulate_lowered(a, tile.partition(p, (128,)), tile.partition(q, (128,)))
    assert (out == POISON).all() and (ro == POISON).all() and (p == POISON).all() and (q == POISON).all()
    copy.simulate_lowered(a, tile.partition(out, (128,)))
    np.testing.assert_array_equal(out, a)


def test_simulate_lowered_grid_is_the_validated_one(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    out = poisoned(1000)
    pcopy.simulate_lowered(a, tile.partition(out, (128,)), blocks=3)     # 3 blocks loop over 8 tiles
    np.testing.assert_array_equal(out, a)
    with pytest.raises(GridSizeTypeError, match="pcopy"):
        pcopy.simulate_lowered(a, tile.partition(poisoned(1000), (128,)), blocks="3")
    empty = np.empty(0, np.float32)
    copy.simulate_lowered(empty, tile.partition(empty.copy(), (128,)))   # no tiles: nothing runs


@simt.kernel(block=64)
def double(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0


def test_a_host_array_the_simulator_cannot_run_on_is_a_typed_refusal():
    """The validator takes any host-memory producer; the simulator runs on NumPy memory only, so a
    bridge.Array over host memory passes validation and is refused by the conversion, by name."""
    a = np.ones(10, np.float32)
    host = bridge.Array(ptr=a.ctypes.data, shape=[10], strides=[4], dtype="float32", device_type=1, device_id=0,
                        readonly=False, owner=a)
    out = poisoned(10)
    with pytest.raises(ArgumentKindError, match=r"double: argument 'a' \(#0\): the simulator needs a NumPy array, "
                                                r"got Array"):
        double.simulate(host, out)
    assert (out == POISON).all()
