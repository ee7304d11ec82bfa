"""Launch features in the CPU simulator and the front ends (docs/dsl.md, "Launch features"): grid.sync
lets every block read what every block wrote before it, cluster blocks read each other's shared memory,
results against NumPy float64; a barrier some threads or blocks cannot reach is a SimulationError (a
deadlock on the GPU); a fault before a grid.sync ends the launch with the KernelFault; misuse is a
DslCompileError at the call, bad options one at the decorator."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from dsl import DslCompileError, f32, simt, tile
from dsl.sim import SimulationError
from interop_tests.dsl_sim import launch_kernels as K


@pytest.mark.parametrize("blocks,n", [(1, 300), (5, 5000), (16, 1 << 14)])
def test_grid_sync_lets_every_block_read_every_blocks_partial_sum(blocks, n):
    rng = np.random.default_rng(blocks)
    x = rng.standard_normal(n).astype(np.float32)
    partial, out = np.full(blocks, np.nan, np.float32), np.full(n, np.nan, np.float32)
    K.center.simulate(x, partial, out, grid=blocks)
    np.testing.assert_allclose(out, K.center_reference(x), rtol=0, atol=2e-5)


@simt.kernel(block=32, cooperative=True)
def _early_return(out: simt.DisjointSlice[f32]):
    if simt.blockIdx.x == 1:
        return
    simt.grid.sync()
    out[simt.thread.index_1d()] = 1.0


@simt.kernel(block=32, cooperative=True)
def _divergent_sync(out: simt.DisjointSlice[f32]):
    if simt.threadIdx.x < 16:
        simt.grid.sync()
    out[simt.thread.index_1d()] = 1.0


@simt.kernel(block=32, cooperative=True)
def _some_threads_return(out: simt.DisjointSlice[f32]):
    if simt.threadIdx.x >= 16:
        return
    simt.grid.sync()
    out[simt.thread.index_1d()] = 2.0


def test_a_grid_sync_a_block_or_a_running_thread_cannot_reach_is_a_deadlock():
    with pytest.raises(SimulationError, match=r"grid.sync\(\) reached by no thread of block \(1, 0, 0\)"):
        _early_return.simulate(np.zeros(64, np.float32), grid=2)
    with pytest.raises(SimulationError, match=r"grid.sync\(\) not reached by thread \(16, 0, 0\) of block"):
        _divergent_sync.simulate(np.zeros(64, np.float32), grid=2)
    out = np.zeros(64, np.float32)                  # threads that returned do not hold a block back
    _some_threads_return.simulate(out, grid=2)
    np.testing.assert_array_equal(out, np.tile(np.r_[np.full(16, 2.0), np.zeros(16)], 2))


@simt.kernel(block=32, cooperative=True)
def _fault_then_sync(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    v = x[i + simt.blockIdx.x * 1000]                # block 1 reads past the end and exits
    simt.grid.sync()
    out[i] = v


def test_a_fault_before_a_grid_sync_ends_the_launch_with_the_fault():
    with pytest.raises(bridge.KernelFault, match="'x'"):
        _fault_then_sync.simulate(np.zeros(64, np.float32), np.zeros(64, np.float32), grid=2)


@simt.kernel(block=32, cooperative=True)
def _write_sync_overwrite(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        if simt.blockIdx.x == 1 and simt.threadIdx.x == 0:
            out[0] = 1.0
        simt.grid.sync()
        if simt.blockIdx.x == 0 and simt.threadIdx.x == 0:
            out[0] = out[0] + 6.0


@simt.kernel(block=32, cooperative=True)
def _racing_writes(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        if simt.threadIdx.x == 0:
            out[0] = f32(simt.blockIdx.x)


def test_writes_a_grid_sync_separates_are_ordered_and_others_race():
    out = np.zeros(1, np.float32)
    with pytest.raises(bridge.KernelFault, match="data race on 'out'"):
        _racing_writes.simulate(out, grid=2)
    _write_sync_overwrite.simulate(out, grid=2)     # block 1's write, the barrier, block 0's read and write
    assert out[0] == 7.0


@pytest.mark.parametrize("blocks,n", [(2, 200), (8, 1000)])
def test_cluster_blocks_read_their_neighbours_shared_memory(blocks, n):
    x = np.arange(n, dtype=np.float32) % 17
    out, ranks = np.full(blocks, np.nan, np.float32), np.full(blocks, np.nan, np.float32)
    K.neighbour_sums.simulate(x, out, ranks, grid=blocks)
    want, want_ranks = K.neighbour_reference(x, blocks)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_array_equal(ranks, want_ranks)


@simt.kernel(block=(8, 1, 1), domain=2, cluster=(2, 2, 1))
def _cluster_2d(out: simt.DisjointSlice[f32, 2]):
    """Each block writes (its rank, the rank of the block whose shared memory it reads) per thread."""
    with simt.unsafe():
        s = simt.shared.array(8, f32)
        t = simt.threadIdx.x
        s[t] = f32(simt.blockIdx.x * 10 + simt.blockIdx.y)
        simt.cluster.sync()
        peer = simt.cluster.map_shared(s, simt.cluster.size() - 1 - simt.cluster.rank())
        got = peer[t]
        simt.cluster.sync()
        cx, cy, cz = simt.cluster.block_index()
        out[simt.blockIdx.y, simt.blockIdx.x * 8 + t] = got * 1000 + f32(simt.cluster.rank() * 10 + cx + cy + cz)


def test_a_2d_cluster_maps_ranks_x_fastest():
    out = np.zeros((4, 32), np.float32)
    _cluster_2d.simulate(out, grid=(4, 4))
    for by in range(4):
        for bx in range(4):
            cx, cy = bx % 2, by % 2
            rank = cx + 2 * cy
            peer = 3 - rank
            px, py = bx // 2 * 2 + peer % 2, by // 2 * 2 + peer // 2
            want = (px * 10 + py) * 1000 + rank * 10 + cx + cy
            np.testing.assert_array_equal(out[by, bx * 8:bx * 8 + 8], np.full(8, want, np.float32))


def test_the_launch_validator_refuses_cooperative_and_cluster_grids_it_cannot_run():
    x = np.zeros(128, np.float32)
    with pytest.raises(bridge.CooperativeGridError, match="at most 1024 blocks"):
        K.center.simulate(x, np.zeros(2000, np.float32), x.copy(), grid=2000)
    out = np.full(3, -7.0, np.float32)
    with pytest.raises(bridge.ClusterError):
        K.neighbour_sums.simulate(x, out, out.copy(), grid=3)      # 3 blocks: not whole clusters of 2
    np.testing.assert_array_equal(out, np.full(3, -7.0, np.float32))


def test_pdl_kernels_compute_the_same_in_the_simulator():
    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    y, z = np.zeros_like(x), np.zeros_like(x)
    K.axpb.simulate(x, y, np.float32(1.0001), np.float32(0.5))
    K.axpb_explicit.simulate(y, z, np.float32(1.0001), np.float32(0.5))
    np.testing.assert_allclose(z, K.chain_reference(x, 2), rtol=1e-6, atol=1e-6)


def test_tile_kernels_with_launch_features_simulate_both_ways():
    x = np.arange(1024, dtype=np.float32)
    y = np.zeros_like(x)
    K.tile_axpb.simulate(x, tile.partition(y, (256,)), np.float32(2), np.float32(1))
    np.testing.assert_array_equal(y, x.astype(np.float64) * 2 + 1)
    for run in ("simulate", "simulate_lowered"):
        r, p = np.zeros(512, np.float32), np.zeros(1024, np.float32)
        getattr(K.tile_ranks, run)(tile.partition(r, (64,)))
        np.testing.assert_array_equal(r, np.repeat(np.arange(8) % 2 + 20, 64))
        getattr(K.tile_plus_one, run)(x, tile.partition(p, (128,)))
        np.testing.assert_array_equal(p, x + 1)


# ---------------------------------------------------------------------------- refusals
def _compile_error(kernel, *args, match: str) -> DslCompileError:
    with pytest.raises(DslCompileError, match=match) as info:
        kernel.simulate(*args, grid=1)
    return info.value


@simt.kernel(block=32)
def _sync_not_cooperative(out: simt.DisjointSlice[f32]):
    simt.grid.sync()


@simt.kernel(block=32, pdl=True)
def _wait_after_load(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    v = x[0]
    simt.pdl.wait()
    out[simt.thread.index_1d()] = v


@simt.kernel(block=32, pdl=True)
def _wait_in_branch(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    if simt.blockIdx.x == 0:
        simt.pdl.wait()
    out[simt.thread.index_1d()] = x[0]


@simt.kernel(block=32)
def _rank_without_cluster(out: simt.DisjointSlice[f32]):
    out[simt.thread.index_1d()] = f32(simt.cluster.rank())


@simt.kernel(block=32, cluster=2)
def _map_outside_unsafe(out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        s = simt.shared.array(32, f32)
    peer = simt.cluster.map_shared(s, 1)
    out[simt.thread.index_1d()] = peer[0]


@simt.kernel(block=32, cooperative=True)
def _sync_as_value(out: simt.DisjointSlice[f32]):
    v = simt.grid.sync()
    out[simt.thread.index_1d()] = v


@simt.kernel(block=32, cooperative=True)
def _sync_in_lanes_loop(out: simt.DisjointSlice[f32]):
    for c in simt.block.threads(100):
        simt.grid.sync()


def test_misused_launch_intrinsics_are_compile_errors_at_the_call():
    out, x = np.zeros(32, np.float32), np.zeros(32, np.float32)
    err = _compile_error(_sync_not_cooperative, out, match=r"simt.grid.sync\(\) in a kernel that is not cooperative")
    assert err.line == _sync_not_cooperative.pyfunc.__code__.co_firstlineno + 2 and "cooperative=True" in str(err)
    err = _compile_error(_wait_after_load, x, out, match=r"global memory access before pdl.wait\(\)")
    assert err.line == _wait_after_load.pyfunc.__code__.co_firstlineno + 2        # the load, `v = x[0]`
    _compile_error(_wait_in_branch, x, out, match=r"pdl.wait\(\) inside a loop, a branch")
    _compile_error(_rank_without_cluster, out, match=r"simt.cluster.rank\(\) in a kernel without a thread-block cluster")
    _compile_error(_map_outside_unsafe, out, match=r"map_shared\(buf, rank\) reads and writes another block")
    _compile_error(_sync_as_value, out, match=r"simt.grid.sync\(\) is a statement, not a value")
    _compile_error(_sync_in_lanes_loop, out, match=r"simt.grid.sync\(\) inside a `for .. in simt.block.threads")


def _plain(out: simt.DisjointSlice[f32]):
    out[simt.thread.index_1d()] = 1.0


@pytest.mark.parametrize("options,match", [
    ({"cluster": (4, 4)}, r"cluster= \(4, 4, 1\) has 16 blocks, more than the 8"),
    ({"cluster": 0}, r"every dimension must be >= 1"),
    ({"cluster_nonportable": True}, r"cluster_nonportable=True needs a cluster="),
    ({"pdl": 1}, r"pdl= must be True or False"),
    ({"cooperative": "yes"}, r"cooperative= must be True or False"),
])
def test_bad_launch_options_are_errors_at_the_decorator(options, match):
    with pytest.raises(DslCompileError, match=match):
        simt.kernel(block=32, **options)(_plain)


def _tile_plain(x: tile.Array[f32], out: tile.Partition[f32]):
    out.store(tile.load(x, tile.bid(0), out.tile_shape))


def _tile_wait_late(x: tile.Array[f32], out: tile.Partition[f32]):
    v = tile.load(x, tile.bid(0), out.tile_shape)
    out.store(v)
    tile.pdl.wait()


def _tile_sync(x: tile.Array[f32], out: tile.Partition[f32]):
    tile.grid_sync()
    out.store(tile.load(x, tile.bid(0), out.tile_shape))


def test_tile_launch_options_and_intrinsics_are_checked():
    with pytest.raises(DslCompileError, match=r"a tile kernel's grid is 1-D"):
        tile.kernel(_tile_plain, cluster=(2, 2))
    with pytest.raises(DslCompileError, match=r"cooperative=True with persistent=True"):
        tile.kernel(_tile_plain, cooperative=True, persistent=True)
    x, y = np.zeros(256, np.float32), np.zeros(256, np.float32)
    with pytest.raises(DslCompileError, match=r"tile.pdl.wait\(\) after a global memory access"):
        tile.kernel(_tile_wait_late, pdl=True).simulate(x, tile.partition(y, (128,)))
    with pytest.raises(DslCompileError, match=r"tile.grid_sync\(\) in a kernel that is not cooperative"):
        tile.kernel(_tile_sync).simulate(x, tile.partition(y, (128,)))


@pytest.mark.parametrize("tiles", [(7, 4), (6, 5), (3, 2)])
def test_the_tile_simulators_block_order_is_the_lowerings(tiles):
    """A cluster rank is the block's number in the launch order modulo the cluster size: the tile
    simulator computes it from dsl/tile/launch.linear_block, the lowered kernel from the hardware's
    block number and the lowering's grouped order (dsl/tile/lower/tiles.py). Groups of 3 tile rows,
    the last one short: every tile gets the same rank both ways, and at 7 x 4 tiles the grouped ranks
    are not the row-major ones."""
    a = np.full((8 * tiles[0], 8 * tiles[1]), np.nan, np.float32)
    b = a.copy()
    K.tile_grouped_ranks.simulate(tile.partition(a, (8, 8)))
    K.tile_grouped_ranks.simulate_lowered(tile.partition(b, (8, 8)))
    np.testing.assert_array_equal(a, b)
    rows, cols = np.indices(tiles)
    assert (a[::8, ::8] - 10 * rows - 100 * cols == a[::8, ::8] % 10).all()          # the rank is the ones digit
    if tiles == (7, 4):     # (with an odd column count the parities of both orders happen to agree)
        assert not np.array_equal(a[::8, ::8] % 10, (rows * tiles[1] + cols) % 2)
