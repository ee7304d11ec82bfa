"""The tile lowering switch interior_tiles (dsl/tile/lower/interior.py): a straight-line tile program
whose tiles all lie inside their arrays runs a copy of itself without per-access bounds tests; the edge
blocks run the tested copy. Both copies against NumPy float64 in the simulators on ragged sizes, the
untested accesses in the PTX, and the programs that do not qualify (a loop) left as they were."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import f32, tile
from dsl.tile.switches import switches_key

N, BLOCK = 1000, 256            # three inside blocks and a partial fourth


def axpb_pyfunc(x: tile.Array[f32, 1], y: tile.Array[f32, 1], out: tile.Partition[f32, 1]):
    n = out.tile_shape[0]
    i = tile.bid(0)
    out.store(tile.load(x, i, (n,)) * 2.0 + tile.load(y, i, (n,)))


def shifted_pyfunc(x: tile.Array[f32, 1], out: tile.Partition[f32, 1]):
    """Reads the next tile of x (an index computed from tile.bid): the last blocks' reads leave x."""
    n = out.tile_shape[0]
    j = tile.bid(0) + 1
    out.store(tile.load(x, j, (n,)) + 1.0)


def looped_pyfunc(x: tile.Array[f32, 1], out: tile.Partition[f32, 1]):
    n = out.tile_shape[0]
    acc = tile.zeros((n,), f32)
    for k in range(2):
        acc = acc + tile.load(x, tile.bid(0) + k, (n,))
    out.store(acc)


def kernels(pyfunc):
    return tile.kernel(pyfunc), tile.kernel(pyfunc, lowering={"interior_tiles": True})


def _ptx(kernel, *arrays) -> str:
    return kernel.compile((*arrays[:-1], tile.partition(arrays[-1], (BLOCK,))), "sm_90").ptx


def test_an_inside_block_runs_a_copy_without_bounds_tests():
    """Four vector loads and two stores a copy: twice as many accesses with the switch, and the inside
    copy's predicates are the constant 1 (ptxas drops them)."""
    plain, inside = kernels(axpb_pyfunc)
    x = np.zeros(N, np.float32)
    p, q = _ptx(plain, x, x, x), _ptx(inside, x, x, x)
    assert q.count("ld.global.nc.v4.f32") == 2 * p.count("ld.global.nc.v4.f32") > 0
    assert q.count("st.global.v4.f32") == 2 * p.count("st.global.v4.f32") > 0
    assert len(re.findall(r"mov\.b32\s+%r\d+, 1;", q)) > len(re.findall(r"mov\.b32\s+%r\d+, 1;", p))


def test_a_program_with_a_loop_is_left_as_it_was():
    plain, inside = kernels(looped_pyfunc)
    x = np.zeros(N, np.float32)
    assert _ptx(plain, x, x) == _ptx(inside, x, x)          # the same code


@pytest.mark.parametrize("run", ["simulate", "lowered"])
def test_inside_and_edge_blocks_match_float64(rng, run):
    plain, inside = kernels(axpb_pyfunc)
    x, y = rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)
    want = 2.0 * x.astype(np.float64) + y
    for kern in (plain, inside):
        out = np.full(N, np.nan, np.float32)
        args = (x, y, tile.partition(out, (BLOCK,)))
        kern.simulate(*args) if run == "simulate" else kern.simulate_lowered(*args, arch="sm_90")
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_a_computed_tile_index_past_the_end_reads_padding_in_the_edge_copy(rng):
    """Block b reads tile b + 1 of x: the last two blocks' tiles leave x (padding 0), so they take the
    tested copy, and their results are 0 + 1 where x ends."""
    plain, inside = kernels(shifted_pyfunc)
    x = rng.standard_normal(N).astype(np.float32)
    want = np.ones(N)
    want[:N - BLOCK] += x[BLOCK:N].astype(np.float64)
    out = np.full(N, np.nan, np.float32)
    inside.simulate_lowered(x, tile.partition(out, (BLOCK,)), arch="sm_90")
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_the_switch_is_part_of_the_compile_key():
    assert "interior_tiles" in switches_key((("interior_tiles", True),)) and "interior_tiles" not in switches_key()


def row_softmax_pyfunc(x: tile.Array[f32, 2], y: tile.Partition[f32, 2]):
    """Rows reduced in the tile (loads by element, not by vector runs): the copies of both paths."""
    row = tile.load(x, (tile.bid(0), 0), y.tile_shape, padding=-tile.inf)
    e = tile.exp(row - tile.max(row, axis=1, keepdims=True))
    y.store(e / tile.sum(e, axis=1, keepdims=True))


@pytest.mark.parametrize("rows,cols,tile_rows", [(37, 100, 4), (40, 128, 8), (44, 128, 8)],
                         ids=["every-block-at-the-edge", "every-block-inside", "last-block-partial"])
def test_row_reductions_match_float64_in_the_lowered_simulator(rng, rows, cols, tile_rows):
    _, inside = kernels(row_softmax_pyfunc)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    want = np.exp(x - x.max(1, keepdims=True))
    want /= want.sum(1, keepdims=True)
    out = np.full((rows, cols), np.nan, np.float32)
    width = 1 << (cols - 1).bit_length()
    args = (x, tile.partition(out, (tile_rows, width)))
    assert "ld.global" in inside.compile(args, "sm_90").ptx         # the IR verifier passes both copies
    inside.simulate_lowered(*args, arch="sm_90")
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
