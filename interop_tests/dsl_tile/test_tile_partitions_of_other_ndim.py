"""Partitions of different ndim in one tile kernel (issue 27, finding 8): a 2-D output beside 1-D
per-row statistics, as Triton's layer-norm tutorial writes them. A partition of the grid partition's
ndim has the grid's tiles axis by axis; one of another ndim has as many tiles in all, and block b owns
its tile b, both counted in row-major order. Partitions that disagree on the tile count are refused
before anything runs. Sizes are never multiples of the tiles; references are float64 NumPy."""
from __future__ import annotations

import numpy as np
import pytest
import tile_kernels_lib as K

import bridge
from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.errors import DslCompileError
from dsl.types import TypeVar, f32, i32

RUNNERS = ["simulate", "simulate_lowered"]
EPS = 1e-5
E = TypeVar("E")


def layer_norm_ref(x, w, b):
    xd = x.astype(np.float64)
    mean, var = xd.mean(1), xd.var(1)
    rstd = 1.0 / np.sqrt(var + EPS)
    return (xd - mean[:, None]) * rstd[:, None] * w + b, mean, rstd


def layer_norm_case(rng, rows, cols, tile_rows, tile_cols):
    """(x, w, b), the poisoned outputs (out, mean, rstd), and the kernel's arguments."""
    x = (rng.standard_normal((rows, cols)) * 2 + 1).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    out = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    args = (x, tile.partition(out, (tile_rows, tile_cols)), w, b, tile.partition(mean, (tile_rows,)),
            tile.partition(rstd, (tile_rows,)), np.float32(EPS))
    return (x, w, b), (out, mean, rstd), args


def check_layer_norm(inputs, outputs):
    ref, mean, rstd = layer_norm_ref(*inputs)
    np.testing.assert_allclose(outputs[0], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outputs[1], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outputs[2], rstd, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,cols,tile_rows,tile_cols", [(37, 100, 1, 128), (29, 200, 4, 256),
                                                           (7, 1000, 2, 1024)])
def test_layer_norm_stores_row_statistics_in_1d_partitions_beside_the_2d_output(runner, rows, cols,
                                                                              tile_rows, tile_cols, rng):
    inputs, outputs, args = layer_norm_case(rng, rows, cols, tile_rows, tile_cols)
    getattr(K.layer_norm_fwd, runner)(*args)
    check_layer_norm(inputs, outputs)


@pytest.mark.parametrize("blocks", [1, 3])
def test_persistent_layer_norm_blocks_store_the_statistics_of_each_tile_they_visit(blocks, rng):
    ln = tile.kernel(K.layer_norm_fwd.pyfunc, persistent=True)
    inputs, outputs, args = layer_norm_case(rng, 23, 100, 2, 128)
    ln.simulate_lowered(*args, blocks=blocks)
    check_layer_norm(inputs, outputs)


@tile.kernel
def centre_rows(mean: tile.Partition[f32, 1], x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """The 1-D partition comes first, so it defines the grid; the 2-D `out` owns its tile by number."""
    rows, cols = out.tile_shape
    v = tile.load(x, (tile.bid(0), 0), (rows, cols))
    mu = tile.sum(v, axis=1) / x.shape[1]
    mean.store(mu)
    out.store(v - mu[:, None])


@pytest.mark.parametrize("runner", RUNNERS)
def test_a_1d_partition_first_defines_the_grid_and_the_2d_output_follows_it(runner, rng):
    x = rng.standard_normal((21, 50)).astype(np.float32)
    mean, out = np.full(21, np.nan, np.float32), np.full_like(x, np.nan)
    getattr(centre_rows, runner)(tile.partition(mean, (4,)), x, tile.partition(out, (4, 64)))
    xd = x.astype(np.float64)
    np.testing.assert_allclose(mean, xd.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, xd - xd.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)


@tile.kernel
def column_sums(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], colsum: tile.Partition[f32, 1]):
    """Column tiles: out's tile holds every row, so the grid is 1 x tn and block (0, j) is tile j."""
    v = tile.load(x, (0, tile.bid(1)), out.tile_shape)
    s = tile.sum(v, axis=0)
    colsum.store(s)
    out.store(v - s[None, :])


@pytest.mark.parametrize("runner", RUNNERS)
def test_column_statistics_pair_block_0_j_with_tile_j(runner, rng):
    x = rng.standard_normal((13, 300)).astype(np.float32)
    colsum, out = np.full(300, np.nan, np.float32), np.full_like(x, np.nan)
    getattr(column_sums, runner)(x, tile.partition(out, (16, 64)), tile.partition(colsum, (64,)))
    xd = x.astype(np.float64)
    np.testing.assert_allclose(colsum, xd.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, xd - xd.sum(0), rtol=1e-5, atol=1e-5)


@tile.kernel
def tile_numbers(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], row: tile.Partition[i32, 1],
                 col: tile.Partition[i32, 1], seen: tile.Partition[i32, 1]):
    """Each block records its grid coordinates in its tile of 1-D partitions; `seen.load()` reads
    the block's own tile and `seen.num_tiles(0)` counts seen's tiles."""
    out.store(tile.load(x, (tile.bid(0), tile.bid(1)), out.tile_shape) * 2.0)
    row.store(tile.bid(0))
    col.store(tile.bid(1))
    seen.store(seen.load() + seen.num_tiles(0))


@pytest.mark.parametrize("runner", RUNNERS)
def test_block_i_j_owns_tile_i_times_tiles_per_row_plus_j_of_a_1d_partition(runner, rng):
    x = rng.standard_normal((10, 40)).astype(np.float32)       # 3 x 2 tiles of 4 x 32
    out = np.full_like(x, np.nan)
    row, col = np.full(6, -1, np.int32), np.full(6, -1, np.int32)
    seen = np.arange(100, 106, dtype=np.int32)
    getattr(tile_numbers, runner)(x, tile.partition(out, (4, 32)), tile.partition(row, (1,)),
                                  tile.partition(col, (1,)), tile.partition(seen, (1,)))
    np.testing.assert_array_equal(row, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(col, [0, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(seen, np.arange(106, 112))
    np.testing.assert_array_equal(out, x * 2)


@tile.kernel
def gemm_tile_max(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2],
                  cmax: tile.Partition[f32, 1], bk: tile.Constant[int]):
    """A GEMM (its blocks run in the grouped L2 order) that also stores each C tile's maximum in a
    1-D partition with one element per C tile."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)
    cmax.store(tile.max(acc))


@tile.kernel
def gemm_by_tile_number(cmax: tile.Partition[f32, 1], a: tile.Array[E, 2], b: tile.Array[E, 2],
                        c: tile.Partition[f32, 2], bk: tile.Constant[int]):
    """The same with the 1-D partition first: a 1-D grid, and C's tile found by tile number."""
    bm, bn = c.tile_shape
    tiles_n = (c.shape[1] + bn - 1) // bn
    i, j = tile.bid(0) // tiles_n, tile.bid(0) % tiles_n
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)
    cmax.store(tile.max(acc))


def gemm_case(rng, m, k, n, tshape):
    a, b = (rng.standard_normal(s).astype(np.float16) for s in ((m, k), (k, n)))
    tm, tn = -(-m // tshape[0]), -(-n // tshape[1])
    c, cmax = np.full((m, n), np.nan, np.float32), np.full(tm * tn, np.nan, np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    padded = np.zeros((tm * tshape[0], tn * tshape[1]))      # the tile's padding is part of its max
    padded[:m, :n] = ref
    tile_max = padded.reshape(tm, tshape[0], tn, tshape[1]).max(axis=(1, 3)).reshape(-1)
    return a, b, c, cmax, ref, tile_max


@pytest.mark.parametrize("runner,kw", [("simulate", {}), ("simulate_lowered", {}),
                                       ("simulate_lowered", {"tensor_cores": True, "arch": "sm_80"})],
                         ids=["tile", "lowered", "lowered-mma"])
def test_grouped_gemm_blocks_store_their_tile_maximum_at_their_row_major_tile_number(runner, kw, rng):
    tshape = (64, 64) if kw else (32, 16)
    a, b, c, cmax, ref, tile_max = gemm_case(rng, 150 if kw else 70, 40, 136 if kw else 40, tshape)
    getattr(gemm_tile_max, runner)(a, b, tile.partition(c, tshape), tile.partition(cmax, (1,)), 16, **kw)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(cmax, tile_max, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("kw", [{}, {"tensor_cores": True, "arch": "sm_80"}], ids=["lowered", "lowered-mma"])
def test_a_2d_output_found_by_tile_number_stores_its_gemm_tile(kw, rng):
    tshape = (64, 64)
    a, b, c, cmax, ref, tile_max = gemm_case(rng, 150, 40, 136, tshape)
    gemm_by_tile_number.simulate_lowered(tile.partition(cmax, (1,)), a, b, tile.partition(c, tshape), 16, **kw)
    np.testing.assert_allclose(c, ref, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(cmax, tile_max, rtol=1e-3, atol=1e-3)


def assemble_cases():
    z = np.zeros
    ln = (z((4, 100), np.float32), tile.partition(z((4, 100), np.float32), (2, 128)), z(100, np.float32),
          z(100, np.float32), tile.partition(z(4, np.float32), (2,)), tile.partition(z(4, np.float32), (2,)),
          np.float32(EPS))
    a = z((256, 256), np.float16)
    return {"layer_norm_fwd": (K.layer_norm_fwd, ln),
            "gemm_tile_max": (gemm_tile_max, (a, a, tile.partition(z((256, 256), np.float32), (128, 128)),
                                              tile.partition(z(4, np.float32), (1,)), 32)),
            "gemm_by_tile_number": (gemm_by_tile_number, (tile.partition(z(4, np.float32), (1,)), a, a,
                                                          tile.partition(z((256, 256), np.float32), (128, 128)), 32))}


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(assemble_cases()))
def test_kernels_with_partitions_of_other_ndim_assemble(name, arch):
    kernel, args = assemble_cases()[name]
    ck = kernel.compile(args, arch)
    assert f".reqntid {ck.threads}, 1, 1" in ck.ptx
    usage, _ = assemble(ck.ptx, arch + ("a" if ".target sm_90a" in ck.ptx else ""))
    assert usage and usage[0].spill_stores == 0, usage


# ------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("stat_rows,out_tile,got", [
    (13, (4, 64), "mean.shape[0] = 13, out.shape[0] = 10, out.shape[1] = 50"),    # 4 tiles against 3
    (10, (4, 32), "mean.shape[0] = 10, out.shape[0] = 10, out.shape[1] = 50"),    # 3 against 3 x 2
], ids=["longer-statistics", "two-column-tiles"])
def test_partitions_that_disagree_on_the_tile_count_are_refused_and_nothing_is_written(runner, stat_rows,
                                                                                      out_tile, got, rng):
    x = rng.standard_normal((10, 50)).astype(np.float32)
    w, b = np.ones(50, np.float32), np.zeros(50, np.float32)
    out, mean, rstd = np.full_like(x, 7.0), np.full(stat_rows, 7.0, np.float32), np.full(stat_rows, 7.0, np.float32)
    tr, tc = out_tile
    expected = (f"(mean.shape[0] + 3) // 4 == ((out.shape[0] + 3) // 4) * ((out.shape[1] + {tc - 1}) // {tc})")
    with pytest.raises(bridge.ShapeRelationError) as info:
        getattr(K.layer_norm_fwd, runner)(x, tile.partition(out, out_tile), w, b, tile.partition(mean, (tr,)),
                                          tile.partition(rstd, (tr,)), np.float32(EPS))
    msg = str(info.value)
    assert "layer_norm_fwd: argument 'mean' (#4): expected " + expected in msg and got in msg, msg
    assert (out == 7.0).all() and (mean == 7.0).all() and (rstd == 7.0).all()


def test_the_gpu_contract_states_the_tile_count_relation_of_each_other_ndim_partition():
    contract = K.layer_norm_fwd.launch_contract(tile_shapes={"out": (1, 1024), "mean": (1,), "rstd": (1,)})
    assert contract.grid_from == "out" and contract.grid_tile == (1, 1024)
    assert "mean.shape[0] == out.shape[0] * ((out.shape[1] + 1023) // 1024)" in contract.requires
    assert "rstd.shape[0] == out.shape[0] * ((out.shape[1] + 1023) // 1024)" in contract.requires


def test_a_0d_partition_is_refused_naming_the_argument():
    @tile.kernel
    def total(x: tile.Array[f32, 1], parts: tile.Partition[f32, 1], out: tile.Partition[f32]):
        v = tile.load(x, tile.bid(0), parts.tile_shape)
        parts.store(v)
        out.store(tile.sum(v))
    x, parts, out = np.ones(100, np.float32), np.full(100, 7.0, np.float32), np.full((), 7.0, np.float32)
    with pytest.raises(bridge.NdimError, match=r"total: argument 'out' \(#2\): a partition needs at least one "
                                               r"axis, got a 0-d array"):
        total.simulate(x, tile.partition(parts, (128,)), tile.partition(out, ()))
    assert (parts == 7.0).all() and out == 7.0


def test_num_tiles_of_a_partition_of_other_ndim_takes_its_own_axes():
    @tile.kernel
    def k(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], mean: tile.Partition[f32, 1]):
        out.store(tile.load(x, (tile.bid(0), 0), out.tile_shape))
        mean.store(tile.full(mean.tile_shape, mean.num_tiles(1), f32))
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(DslCompileError) as info:
        k.tile_ir(x, tile.partition(x, (4, 8)), tile.partition(np.zeros(8, np.float32), (4,)))
    e = info.value
    assert "mean.num_tiles(axis) needs a constant axis in [0, 1)" in str(e) and "mean.num_tiles(1)" in str(e)
    assert e.line > 0


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("rows,cols,tshape", [(4099, 1000, (1, 1024)), (1001, 700, (4, 1024))])
def test_gpu_layer_norm_with_1d_statistics_matches_numpy(rows, cols, tshape, rng):
    x = (rng.standard_normal((rows, cols)) * 2 + 1).astype(np.float32)
    w, b = (rng.standard_normal(cols).astype(np.float32) for _ in range(2))
    out = bridge.from_host(np.full_like(x, 12345.0))
    mean, rstd = (bridge.from_host(np.full(rows, 12345.0, np.float32)) for _ in range(2))
    K.layer_norm_fwd(bridge.from_host(x), tile.partition(out, tshape), bridge.from_host(w), bridge.from_host(b),
                     tile.partition(mean, tshape[:1]), tile.partition(rstd, tshape[:1]), np.float32(EPS))
    check_layer_norm((x, w, b), (out.to_host(), mean.to_host(), rstd.to_host()))
