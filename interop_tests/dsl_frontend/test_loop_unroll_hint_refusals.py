"""The `unroll=N` loop hint (dsl/frontend/unroll.py): N is a compile-time integer from 1 to 64, given
to simt.range or a stride / rows loop; anything else is a compile error with a caret at the value that
names `unroll` and what it expects. An accepted hint reaches the IR (`ForRange.unroll`) and changes
nothing else: the loop lowers as it does without it."""
from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import expect_compile_error, nodes_of

from dsl import DslCompileError, f32, i32, simt
from dsl.ir import nodes as ir
from dsl.ir.printer import format_function

FILE = __file__
X = np.ones(37, np.float32)
FACTOR = 4


@simt.kernel
def unroll_zero(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(len(x), unroll=0):      # m-zero
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_65(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(len(x), unroll=65):     # m-65
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_runtime(x: simt.Array[f32], out: simt.DisjointSlice[f32], factor: i32):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(len(x), unroll=factor):     # m-runtime
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_float(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(len(x), unroll=2.0):     # m-float
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_bool(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(len(x), unroll=True):     # m-bool
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_on_builtin_range(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in range(len(x), unroll=4):     # m-builtin
        acc += x[c]
    out[i] = acc


@simt.kernel
def unroll_on_chunk(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    for k in simt.thread.chunk_1d(4, unroll=2):     # m-chunk
        out[k] = x[k]


@simt.kernel
def range_outside_a_loop(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    r = simt.range(len(x))     # m-outside
    out[i] = x[i]


@pytest.mark.parametrize("kernel, marker, token, got", [
    (unroll_zero, "m-zero", "0)", "got 0"),
    (unroll_65, "m-65", "65", "got 65"),
    (unroll_float, "m-float", "2.0", "f32"),
    (unroll_bool, "m-bool", "True", "bool"),
])
def test_an_unroll_factor_that_is_not_a_constant_from_1_to_64_is_refused(kernel, marker, token, got):
    expect_compile_error(kernel, (X, X.copy()), marker, token, "unroll", "1 to 64", got, file=FILE)


def test_a_run_time_unroll_factor_is_refused():
    expect_compile_error(unroll_runtime, (X, X.copy(), np.int32(4)), "m-runtime", "factor)", "unroll",
                         "constant integer", file=FILE)


def test_unroll_on_builtin_range_names_simt_range():
    expect_compile_error(unroll_on_builtin_range, (X, X.copy()), "m-builtin", "4)", "unroll=",
                         "simt.range", file=FILE)


def test_unroll_on_a_call_that_is_no_range_or_stride_loop_is_refused():
    expect_compile_error(unroll_on_chunk, (X, X.copy()), "m-chunk", "2)", "unroll=", "simt.range",
                         file=FILE)


def test_simt_range_outside_a_for_loop_is_refused():
    expect_compile_error(range_outside_a_loop, (X, X.copy()), "m-outside", "simt.range(len(x))",
                         "iterable of a `for` loop", file=FILE)


def test_simt_range_outside_a_kernel_says_where_it_belongs():
    with pytest.raises(RuntimeError, match=r"simt\.range\(\) can only be used inside"):
        simt.range(4)


@simt.kernel(block=64)
def every_loop_kind(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], s: simt.DisjointSlice[f32]):
    w = simt.warp.index_1d()
    acc = f32(0.0)
    for c in simt.warp.lanes(x.shape[1], unroll=2):
        out[w, c] = x[w, c]
    for c in simt.range(simt.lane_id(), x.shape[1], 32, unroll=FACTOR):
        acc += x[w, c]
    total = simt.warp.sum(acc)
    s[w] = total


@simt.kernel(block=64)
def group_and_rows_loops(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    g = simt.warp.group(8)
    for r in g.rows(x.shape[0], unroll=3):
        for c in g.lanes(x.shape[1], unroll=64):
            out[r, c] = x[r, c]


@simt.kernel(block=64)
def block_loops(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    for r in simt.block.rows(x.shape[0], unroll=2):
        for c in simt.block.threads(x.shape[1], unroll=1):
            out[r, c] = x[r, c]


def test_accepted_hints_reach_the_ir_and_the_printer():
    M = np.ones((5, 40), np.float32)
    fn = every_loop_kind.build(M, M.copy(), np.ones(5, np.float32))
    assert [f.unroll for f in nodes_of(fn, ir.ForRange)] == [2, FACTOR]
    assert "unroll=2" in format_function(fn) and f"unroll={FACTOR}" in format_function(fn)
    fn = group_and_rows_loops.build(M, M.copy())
    assert [f.unroll for f in nodes_of(fn, ir.ForRange)] == [3, 64]
    fn = block_loops.build(M, M.copy())
    assert [f.unroll for f in nodes_of(fn, ir.ForRange)] == [2, 1]
    assert "unroll=1" not in format_function(fn)


@simt.kernel
def sum_hinted(x: simt.Array[f32], out: simt.DisjointSlice[f32], n: i32):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in simt.range(1, n, 2, unroll=1):
        acc += x[c]
    out[i] = acc


@simt.kernel
def sum_plain(x: simt.Array[f32], out: simt.DisjointSlice[f32], n: i32):
    i = simt.thread.index_1d()
    acc = f32(0.0)
    for c in range(1, n, 2):
        acc += x[c]
    out[i] = acc


def test_simt_range_with_unroll_1_lowers_as_range():
    args = (X, X.copy(), np.int32(37))
    def text(kernel) -> list[str]:      # the IR without its name and its fault sites' source lines
        lines = format_function(kernel.build(*args)).replace(kernel.__name__, "K").splitlines()
        return [t for t in lines if "fault_site" not in t]
    assert text(sum_hinted) == text(sum_plain)
    assert any("range(" in t for t in text(sum_plain))


def test_refusals_are_compile_errors():
    with pytest.raises(DslCompileError):
        unroll_65.ir(X, X.copy())
