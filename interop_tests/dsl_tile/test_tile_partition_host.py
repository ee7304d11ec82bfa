"""Host side: partitions define the grid, arguments are checked against the annotations with errors
naming the argument, and KB_SIMULATE=1 routes a normal call to the simulator."""
from __future__ import annotations

import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile


def test_partition_grid_is_ceil_divided_per_axis():
    p = tile.partition(np.zeros((100, 33), np.float32), (32, 16))
    assert p.grid == (4, 3) and p.num_tiles == 12 and isinstance(p, tile.Partition)


@pytest.mark.parametrize("bad", [(3,), (4, 4), 0, (2.0,)])
def test_partition_rejects_bad_tile_shapes(bad):
    with pytest.raises(ValueError, match="tile_shape"):
        tile.partition(np.zeros(10, np.float32), bad)


def test_argument_dtype_and_kind_errors_name_the_argument(rng):
    a = rng.standard_normal(10).astype(np.float32)
    out = tile.partition(np.zeros(10, np.float32), (16,))
    with pytest.raises(TypeError, match=r"argument 'b' \(#1\): expected f32 array, got float64"):
        K.add.simulate(a, a.astype(np.float64), out)
    with pytest.raises(TypeError, match=r"argument 'out' \(#2\): expected tile.partition"):
        K.add.simulate(a, a, np.zeros(10, np.float32))
    with pytest.raises(TypeError, match="expected 3 arguments"):
        K.add.simulate(a, a)
    with pytest.raises(ValueError, match=r"argument 'x' \(#0\): expected a 2-d array"):
        K.softmax.simulate(a, tile.partition(np.zeros((2, 2), np.float32), (1, 2)))


def test_partitions_must_share_one_grid():
    @tile.kernel
    def two(a: tile.Array[tile.f32], o1: tile.Partition[tile.f32], o2: tile.Partition[tile.f32]):
        v = tile.load(a, tile.bid(0), o1.tile_shape)
        o1.store(v)
        o2.store(v * 2.0)
    a = np.ones(100, np.float32)
    import bridge
    # every tile block owns one tile of each partition: the one validator says so, as on the GPU
    with pytest.raises(bridge.ShapeRelationError,
                       match=r"two: argument 'o2' \(#2\): expected \(o2.shape\[0\] \+ 15\) // 16 == "
                             r"\(o1.shape\[0\] \+ 15\) // 16, got o2.shape\[0\] = 50, o1.shape\[0\] = 100"):
        two.simulate(a, tile.partition(np.zeros(100, np.float32), (16,)),
                     tile.partition(np.zeros(50, np.float32), (16,)))


def test_edge_tiles_write_only_inside_the_array(rng):
    base = np.full(40, -7.0, np.float32)
    view = base[:37]
    a = rng.standard_normal(37).astype(np.float32)
    K.add.simulate(a, a, tile.partition(view, (16,)))
    np.testing.assert_array_equal(base[:37], a + a)
    np.testing.assert_array_equal(base[37:], -7.0)


def test_constants_specialise_the_kernel(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    for block in (64, 256):
        out = np.zeros(-(-1000 // block), np.float32)
        K.block_sum.simulate(x, tile.partition(out, (1,)), block)
        np.testing.assert_allclose(out.sum(), x.sum(), rtol=1e-4)
    assert len(K.block_sum._ir_cache) >= 2


def test_kb_simulate_routes_calls_to_the_simulator(monkeypatch, rng):
    monkeypatch.setenv("KB_SIMULATE", "1")
    a = rng.standard_normal(50).astype(np.float32)
    out = np.zeros(50, np.float32)
    K.add(a, a, tile.partition(out, (32,)))
    np.testing.assert_array_equal(out, 2 * a)


def test_generic_dtype_annotation_binds_from_the_arguments(rng):
    a = rng.standard_normal((8, 8)).astype(np.float16)
    c = np.zeros((8, 8), np.float32)
    K.gemm.simulate(a, a, tile.partition(c, (8, 8)), 8)
    np.testing.assert_allclose(c, a.astype(np.float64) @ a.astype(np.float64), rtol=1e-3, atol=1e-3)
    with pytest.raises(TypeError, match="argument 'b'"):
        K.gemm.simulate(a, a.astype(np.float32), tile.partition(c, (8, 8)), 8)


@tile.kernel(persistent=True)
def persistent_softmax(x: tile.Array[tile.f32, 2], out: tile.Partition[tile.f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-float("inf"))
    e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
    out.store(e / tile.sum(e, axis=1, keepdims=True))


@pytest.mark.parametrize("blocks", [1, 3, 100])
def test_persistent_kernel_visits_every_tile_once_with_fewer_blocks(blocks, rng):
    x = rng.standard_normal((23, 100)).astype(np.float32)
    out = np.full_like(x, np.nan)
    persistent_softmax.simulate_lowered(x, tile.partition(out, (2, 128)), blocks=blocks)
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_persistent_gemm_lowering_loops_over_tiles(rng):
    gemm_p = tile.kernel(K.gemm.pyfunc, persistent=True)
    a = rng.standard_normal((70, 50)).astype(np.float16)
    b = rng.standard_normal((50, 40)).astype(np.float16)
    c = np.full((70, 40), np.nan, np.float32)
    gemm_p.simulate_lowered(a, b, tile.partition(c, (32, 16)), 16, blocks=4)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-3)
    ptx = gemm_p.ptx(a, b, tile.partition(c, (32, 16)), 16, arch="sm_90")
    assert "%nctaid.x" in ptx
