"""Ownership beyond one thread (dsl/frontend/ownership.py): a warp or a block owns a row of a 2-D
DisjointSlice through its typed index (`simt.warp.index_1d()`, `simt.block.index_1d()`), its lanes
(threads) write the columns of a `simt.warp.lanes(n)` (`simt.block.threads(n)`) loop, and a write at
the group's own index of a 1-D slice is done once by its first lane. Anything that could give one
element two owners is a compile error with a caret: arithmetic on the index, a column that is not the
loop's, two forms on one slice, warp operations where lanes diverge, a block that is not whole warps.
The contract derives a tile grid of one row per warp (block) and keeps the launch 1-D."""
from __future__ import annotations

import numpy as np
from frontend_helpers import expect_compile_error

from dsl import f32, simt
from dsl.ir import nodes as ir

FILE = __file__
X = np.ones((5, 40), np.float32)
V = np.ones(5, np.float32)


@simt.kernel(block=64)
def warp_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], s: simt.DisjointSlice[f32]):
    w = simt.warp.index_1d()
    acc = f32(0.0)
    for c in simt.warp.lanes(x.shape[1]):
        out[w, c] = x[w, c] * 2.0
        acc += x[w, c]
    total = simt.warp.sum(acc)
    s[w] = total


def test_a_warp_per_row_kernel_compiles_without_unsafe_and_derives_one_row_per_warp():
    fn = warp_rows.build(X, X.copy(), V.copy())
    leader = [n for st in fn.body for n in _walk(st) if isinstance(n, ir.If)]
    assert leader, "the write at the warp's index must be wrapped in a first-lane test"
    d = warp_rows.contract(X, X.copy(), V.copy()).to_dict()
    assert d["grid_from"]["arg"] in ("out", "s")
    assert d["grid_from"]["tile"][0] == 2          # block=64: two warps, two rows per block
    assert d["strict_domain"] is True
    assert d["block"] == {"exact": [64, 1, 1]}


def _walk(st):
    from dsl.ir.verify import walk
    return walk(st)


@simt.kernel(launch_bounds=256)
def block_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    b = simt.block.index_1d()
    for c in simt.block.threads(x.shape[1]):
        out[b, c] = x[b, c] + 1.0


def test_a_block_per_row_kernel_derives_one_block_per_row_with_any_block_size():
    d = block_rows.contract(X, X.copy()).to_dict()
    assert d["grid_from"]["arg"] == "out" and d["grid_from"]["tile"][0] == 1
    assert d["block"] == {"max_threads": 256}


@simt.kernel(block=64)
def shifted_row(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    w = simt.warp.index_1d()
    for c in simt.warp.lanes(x.shape[1]):
        out[w + 1, c] = x[w, c]              # m-shifted


def test_arithmetic_on_the_warp_index_is_not_owned():
    expect_compile_error(shifted_row, (X, X.copy()), "m-shifted", "out[w + 1, c]",
                         "not this thread's ThreadIndex", "with simt.unsafe()", file=FILE)


@simt.kernel(block=64)
def every_lane_every_column(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    w = simt.warp.index_1d()
    for c in range(x.shape[1]):
        out[w, c] = x[w, c]                  # m-all-lanes


def test_a_plain_range_column_would_have_all_lanes_write_it_and_is_refused():
    expect_compile_error(every_lane_every_column, (X, X.copy()), "m-all-lanes", "out[w, c]",
                         "not this thread's ThreadIndex", file=FILE)


@simt.kernel(block=64)
def warp_row_block_column(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    w = simt.warp.index_1d()
    for c in simt.block.threads(x.shape[1]):
        out[w, c] = x[w, c]                  # m-mixed-scope


def test_a_block_stride_column_under_a_warp_row_is_refused():
    expect_compile_error(warp_row_block_column, (X, X.copy()), "m-mixed-scope", "out[w, c]",
                         "not this thread's ThreadIndex", file=FILE)


@simt.kernel(block=64)
def thread_and_warp(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = x[i]
    w = simt.warp.index_1d()
    out[w] = x[w]                            # m-two-forms


def test_thread_and_warp_forms_on_one_slice_are_a_race_and_a_compile_error():
    a = np.ones(70, np.float32)
    expect_compile_error(thread_and_warp, (a, a.copy()), "m-two-forms", "out[w]",
                         "two ownership forms", "at its 1-D ThreadIndex", "at its warp's index",
                         "lane 0 writes out[w]", file=FILE)


@simt.kernel(block=48)
def ragged_warps(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    w = simt.warp.index_1d()                 # m-ragged
    out[w] = x[w]


def test_a_block_that_is_not_whole_warps_cannot_own_by_warp():
    a = np.ones(70, np.float32)
    expect_compile_error(ragged_warps, (a, a.copy()), "m-ragged", "simt.warp.index_1d()",
                         "whole warps", "block=(48, 1, 1)", file=FILE)


@simt.kernel(launch_bounds=128)
def bounds_only(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    w = simt.warp.index_1d()                 # m-bounds
    out[w] = x[w]


def test_warp_ownership_needs_an_exact_block():
    a = np.ones(70, np.float32)
    expect_compile_error(bounds_only, (a, a.copy()), "m-bounds", "simt.warp.index_1d()",
                         "no exact block", "block=256", file=FILE)


@simt.kernel(block=64)
def shuffle_in_lanes(x: simt.Array[f32, 2], s: simt.DisjointSlice[f32]):
    w = simt.warp.index_1d()
    acc = f32(0.0)
    for c in simt.warp.lanes(x.shape[1]):
        acc += simt.warp.sum(x[w, c])        # m-diverged
    s[w] = acc


def test_a_warp_operation_inside_a_lanes_loop_is_refused():
    expect_compile_error(shuffle_in_lanes, (X, V.copy()), "m-diverged", "simt.warp.sum(x[w, c])",
                         "lanes run different numbers of", "after the loop", file=FILE)


@simt.kernel(block=64)
def barrier_in_threads(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    b = simt.block.index_1d()
    for c in simt.block.threads(x.shape[1]):
        simt.sync_threads()                  # m-barrier
        out[b, c] = x[b, c]


def test_a_barrier_inside_a_block_threads_loop_is_refused():
    expect_compile_error(barrier_in_threads, (X, X.copy()), "m-barrier", "simt.sync_threads()",
                         "not every thread would reach the barrier", file=FILE)


@simt.kernel(block=64, domain=2)
def warp_in_2d(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    w = simt.warp.index_1d()                 # m-2d
    for c in simt.warp.lanes(x.shape[1]):
        out[w, c] = x[w, c]


def test_group_ownership_needs_a_1d_launch():
    expect_compile_error(warp_in_2d, (X, X.copy()), "m-2d", "simt.warp.index_1d()",
                         "domain=2", "domain=1", file=FILE)


@simt.kernel(block=64)
def i64_shuffle_offset(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    v = x[i] if i < len(x) else f32(0.0)
    off = 16
    while off > 0:
        v += simt.warp.shfl_down(v, off)     # `off` is an i64 variable: accepted (5 bits are read)
        off //= 2
    out[i] = v


def test_a_shuffle_offset_held_in_an_i64_variable_compiles():
    a = np.ones(64, np.float32)
    fn = i64_shuffle_offset.build(a, a.copy())
    assert any(isinstance(n, ir.Warp) for st in fn.body for n in _walk(st))


@simt.kernel(block=64)
def index_and_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    w = simt.warp.index_1d()
    for c in simt.warp.lanes(x.shape[1]):
        out[w, c] = x[w, c]
    for r in simt.warp.rows(x.shape[0]):
        for c in simt.warp.lanes(x.shape[1]):
            out[r, c] = x[r, c] * 2.0        # m-rows-and-index


def test_the_index_form_and_the_rows_form_on_one_slice_are_two_owners():
    expect_compile_error(index_and_rows, (X, X.copy()), "m-rows-and-index", "out[r, c]",
                         "two ownership forms", "rows(n) loop", file=FILE)


def test_rows_loops_assemble_with_ptxas():
    from dsl.backend.ptxas import assemble
    from interop_tests.dsl_sim.test_warp_block_ownership_sim import center_warp_rows, negate_group_rows
    for arch in ("sm_80", "sm_90"):
        assemble(center_warp_rows.ptx(X, X.copy(), V.copy(), arch=arch), arch)
        assemble(negate_group_rows.ptx(X, X.copy(), arch=arch), arch)
