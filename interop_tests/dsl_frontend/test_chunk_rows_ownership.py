"""n-D chunk loops own a run of the last axis of the thread's row (`r, ch = simt.thread.chunk_2d(4)`,
`out[r, c]` for c in ch): the front end refuses what would break one owner per element — a chunk of
another dimensionality than the launch, a row other than the thread's own (arithmetic on it, swapped
axes), a second ownership form on the slice — with a caret at the write and a hint, and nothing runs
(the poisoned output is unchanged)."""
from __future__ import annotations

import numpy as np
import pytest
from frontend_helpers import expect_compile_error

from dsl import f32, simt
from dsl.errors import DslCompileError

FILE = __file__


@simt.kernel
def chunk3_in_1d(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    b, t, ch = simt.thread.chunk_3d(4)  # m-chunk3-in-1d
    for c in ch:
        out[c] = a[c]


@simt.kernel(domain=2)
def index_and_chunk(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    i = simt.thread.index_2d()
    out[i] = a[i]
    r, ch = simt.thread.chunk_2d(4)
    for c in ch:
        out[r, c] = a[r, c] + 1.0  # m-two-forms


@simt.kernel(domain=2)
def shifted_row(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, ch = simt.thread.chunk_2d(4)
    for c in ch:
        out[r + 1, c] = a[r, c]  # m-shifted-row


@simt.kernel(domain=2)
def swapped_axes(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, ch = simt.thread.chunk_2d(4)
    for c in ch:
        out[c, r] = a[r, c]  # m-swapped


@simt.kernel(domain=2)
def chunk_of_zero(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, ch = simt.thread.chunk_2d(0)  # m-zero
    for c in ch:
        out[r, c] = a[r, c]


def _args(shape=(4, 8)):
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return a, np.full(shape, -123.0, np.float32)


def _nothing_runs(kernel, args) -> None:
    """The refused kernel writes nothing: simulating it raises the same error, the output stays poisoned."""
    before = args[-1].copy()
    with pytest.raises(DslCompileError):
        kernel.simulate(*args, grid=(1, 1, 1), block=(2, 2, 1))
    np.testing.assert_array_equal(args[-1], before)


def test_a_3d_chunk_in_a_1d_kernel_is_refused():
    args = (np.ones(8, np.float32), np.full(8, -1.0, np.float32))
    expect_compile_error(chunk3_in_1d, args, "m-chunk3-in-1d", "simt.thread.chunk_3d(4)",
                         "simt.thread.chunk_3d() in a kernel declared with domain=1", "domain=3", file=FILE)
    _nothing_runs(chunk3_in_1d, args)


def test_the_thread_index_and_a_2d_chunk_on_one_slice_are_a_compile_error():
    args = _args()
    expect_compile_error(index_and_chunk, args, "m-two-forms", "out[r, c]", "two ownership forms",
                         "at its 2-D ThreadIndex", "in a chunk_2d(4) loop",
                         "thread (r, x) owns out[r, 4*x : 4*x + 4]",
                         "thread 1 and thread 0 would both write out[0, 1]", file=FILE)
    _nothing_runs(index_and_chunk, args)


@pytest.mark.parametrize("kernel, marker, token", [(shifted_row, "m-shifted-row", "out[r + 1, c]"),
                                                   (swapped_axes, "m-swapped", "out[c, r]")])
def test_a_write_outside_the_threads_own_row_is_refused(kernel, marker, token):
    args = _args()
    expect_compile_error(kernel, args, marker, token, "write to DisjointSlice 'out' at an index that is not "
                         "this thread's ThreadIndex", "simt.unsafe()", file=FILE)
    _nothing_runs(kernel, args)


def test_a_chunk_of_zero_elements_is_refused():
    args = _args()
    expect_compile_error(chunk_of_zero, args, "m-zero", "0", "chunk size 0 must be between 1 and 64", file=FILE)
