"""DSL kernels with launch features on the GPU (docs/dsl.md, "Launch features"): a cooperative kernel
whose grid.sync is the DSL's own barrier (reused across launches, graph replays and after a fault), a
cluster kernel reading its neighbour's shared memory, PDL chains plain and graph-captured, and the tile
model's forms — results against NumPy float64; refusals leave the poisoned output untouched. The
kernels are interop_tests/dsl_sim/launch_kernels.py (the simulator runs the same ones)."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from dsl import f32, i32, simt, tile
from interop_tests.dsl_sim import launch_kernels as K

pytestmark = pytest.mark.gpu
POISON = -7.0


@pytest.fixture(scope="module")
def sm90():
    dev = bridge.Device(0)
    if dev.cc < (9, 0):
        pytest.skip(f"clusters and PDL need sm_90; this device is {dev.arch}")
    return dev


def poisoned(n):
    return bridge.full((n,), POISON, "float32")


def test_grid_sync_kernel_gives_the_float64_answer_launch_after_launch(sm90):
    rng = np.random.default_rng(0)
    n = 1 << 20
    x_np = rng.standard_normal(n).astype(np.float32)
    x, out = bridge.from_host(x_np), poisoned(n)
    grid = 2 * sm90.sm_count
    partial = bridge.zeros((grid,), "float32")
    for g in (grid, grid // 2, 3, grid):            # one barrier word, any grid size, launch after launch
        out = poisoned(n)
        K.center(x, partial, out, grid=g)
        bridge.synchronize()
        np.testing.assert_allclose(out.to_host(), K.center_reference(x_np), rtol=0, atol=1e-4)


def test_launches_of_one_cooperative_kernel_on_two_streams_do_not_overlap(sm90):
    """Every launch of a cooperative kernel shares its module's barrier word: the launcher orders a launch
    on another stream after the previous one (memory log), so both answers are right."""
    from bridge import _native
    rng = np.random.default_rng(2)
    n = 1 << 20
    grid = sm90.sm_count
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    streams = [bridge.Stream(), bridge.Stream()]
    outs, keep = [], []
    for x_np, s in zip(xs * 4, streams * 4):         # alternate streams, eight launches back to back
        x, partial, out = bridge.from_host(x_np), bridge.zeros((grid,), "float32"), poisoned(n)
        with bridge.use_stream(s):
            K.center(x, partial, out, grid=grid)
        outs.append((out, x_np))
        keep.append((x, partial))
    # the last launch is recorded as the writer of the kernel's key range, on the second stream
    spans = _native.memory_log_spans()
    assert any(hi - lo == 1 and writer == streams[1].handle for lo, hi, writer, _ in spans), spans
    bridge.synchronize()
    for out, x_np in outs:
        np.testing.assert_allclose(out.to_host(), K.center_reference(x_np), rtol=0, atol=1e-4)


def test_a_cooperative_launch_inside_a_capture_is_refused_and_the_capture_survives(sm90):
    """The driver refuses cooperative launches during stream capture (and would invalidate the whole
    capture): the launcher refuses first with a typed error, the capture goes on, its other launches replay."""
    rng = np.random.default_rng(1)
    n = 1 << 18
    x_np = rng.standard_normal(n).astype(np.float32)
    x, out = bridge.from_host(x_np), poisoned(n)
    grid = sm90.sm_count
    partial = bridge.zeros((grid,), "float32")
    K.center(x, partial, out, grid=grid)            # compiled and loaded before the capture
    bridge.synchronize()
    out, copy = poisoned(n), poisoned(n)
    with bridge.capture() as g:
        with pytest.raises(bridge.CooperativeGridError, match=r"center: a cooperative launch cannot be captured"):
            K.center(x, partial, out, grid=grid)
        K.axpb(x, copy, 2.0, 0.5)                    # a PDL kernel captures (a programmatic edge)
    g.replay()
    g.stream.synchronize()
    np.testing.assert_array_equal(out.to_host(), np.full(n, POISON, np.float32))
    np.testing.assert_allclose(copy.to_host(), K.chain_reference(x_np, 1, a=2.0, b=0.5), rtol=1e-6, atol=1e-6)

def test_an_oversized_cooperative_grid_is_refused_before_launch(sm90):
    n = 1 << 16
    x, out = bridge.zeros((n,), "float32"), poisoned(n)
    grid = 64 * sm90.sm_count
    with pytest.raises(bridge.CooperativeGridError, match=rf"center: cooperative grid \({grid}, 1, 1\)"):
        K.center(x, bridge.zeros((grid,), "float32"), out, grid=grid)
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), np.full(n, POISON, np.float32))


@simt.kernel(block=128, cooperative=True)
def fault_then_sync(x: simt.Array[f32], out: simt.DisjointSlice[f32], reach: simt.Array[f32]):
    i = simt.thread.index_1d()
    v = x[i + simt.blockIdx.x * i32(reach[0])]       # reach > 0: blocks past the first read out of range
    simt.grid.sync()
    out[i] = v


def test_a_fault_before_grid_sync_is_reported_and_the_next_launch_works(sm90):
    n = 128 * 8
    x_np = np.arange(n, dtype=np.float32)
    x, out = bridge.from_host(x_np), poisoned(n)
    far, near = bridge.from_host(np.array([1e6], np.float32)), bridge.from_host(np.array([0.0], np.float32))
    fault_then_sync(x, out, far, grid=8)
    with pytest.raises(bridge.KernelFault, match="'x'"):
        bridge.synchronize()
    fault_then_sync(x, out, near, grid=8)           # the barrier word was left as it was
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), x_np)


def test_cluster_blocks_read_their_neighbours_shared_memory(sm90):
    blocks = 64
    x_np = (np.arange(blocks * K.BLOCK - 77, dtype=np.float32) % 23) - 5
    x, out, ranks = bridge.from_host(x_np), poisoned(blocks), poisoned(blocks)
    K.neighbour_sums(x, out, ranks, grid=blocks)
    bridge.synchronize()
    want, want_ranks = K.neighbour_reference(x_np, blocks)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-6)
    np.testing.assert_array_equal(ranks.to_host(), want_ranks)


def test_a_grid_that_is_not_whole_clusters_is_refused(sm90):
    x, out, ranks = bridge.zeros((1000,), "float32"), poisoned(7), poisoned(7)
    with pytest.raises(bridge.ClusterError):
        K.neighbour_sums(x, out, ranks, grid=7)
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), np.full(7, POISON, np.float32))


@pytest.mark.parametrize("step", [K.axpb, K.axpb_explicit])
def test_a_pdl_chain_gives_the_float64_answer_plain_and_captured(sm90, step):
    rng = np.random.default_rng(2)
    n = 1 << 20
    x_np = rng.standard_normal(n).astype(np.float32)
    a, b = np.float32(1.0001), np.float32(0.5)
    bufs = [bridge.from_host(x_np), bridge.zeros((n,), "float32")]
    for k in range(10):
        step(bufs[k % 2], bufs[1 - k % 2], a, b)
    bridge.synchronize()
    np.testing.assert_allclose(bufs[0].to_host(), K.chain_reference(x_np, 10), rtol=1e-5, atol=1e-5)
    bufs = [bridge.from_host(x_np), bridge.zeros((n,), "float32")]
    with bridge.capture() as g:
        for k in range(10):
            step(bufs[k % 2], bufs[1 - k % 2], a, b)
    g.replay()
    g.stream.synchronize()
    np.testing.assert_allclose(bufs[0].to_host(), K.chain_reference(x_np, 10), rtol=1e-5, atol=1e-5)


def test_tile_kernels_with_launch_features_run(sm90):
    n = 1 << 16
    x_np = np.arange(n, dtype=np.float32) % 101
    x, y, z = bridge.from_host(x_np), bridge.zeros((n,), "float32"), bridge.zeros((n,), "float32")
    for k in range(4):                             # a tile PDL chain: y = 2x + 1, then z = 2y + 1, ...
        K.tile_axpb(*((x, tile.partition(y, (256,))) if k % 2 == 0 else (y, tile.partition(z, (256,)))),
                    np.float32(2), np.float32(1))
    r = bridge.zeros((n // 64,), "float32")
    K.tile_ranks(tile.partition(r, (64,)))
    p = bridge.zeros((4 * 1024,), "float32")
    K.tile_plus_one(x, tile.partition(p, (1024,)))
    bridge.synchronize()
    np.testing.assert_array_equal(z.to_host(), (x_np.astype(np.float64) * 2 + 1) * 2 + 1)
    np.testing.assert_array_equal(r.to_host(), np.repeat(np.arange(n // 64 // 64) % 2 + 20, 64))
    np.testing.assert_array_equal(p.to_host(), x_np[:4 * 1024] + 1)
