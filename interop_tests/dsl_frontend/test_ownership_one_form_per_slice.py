"""Ownership (dsl/frontend/ownership.py): safe code gives every DisjointSlice element exactly one owning
thread for the whole launch. Two ownership forms on one slice (the ThreadIndex and a chunk loop, or
chunk loops of different sizes, device functions included) are compile errors naming both writes; a
ThreadIndex that does not span the kernel's domain is one too; a launch wider than the domain is
refused by the contract (`strict_domain`). What the author vouches for (`with simt.unsafe():`) claims
nothing and compiles, and the simulator reports the race it then runs (dsl_sim/test_sim_write_races.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from frontend_helpers import expect_compile_error

import bridge
from dsl import f32, simt

FILE = __file__


@simt.kernel(block=64, requires=["len(a) == len(out)"])
def mix(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]                       # m-mix-first
    for q in simt.thread.chunk_1d(4):
        out[q] = a[q] + 1.0             # m-mix-second


def test_the_issue_race_thread_index_and_chunk_loop_is_a_compile_error():
    a = np.arange(256, dtype=np.float32)
    e = expect_compile_error(mix, (a, a.copy()), "m-mix-second", "out[q]",
                             "DisjointSlice 'out' is written in two ownership forms",
                             "a data race", "out[i] = a[i]", "at its 1-D ThreadIndex",
                             "in a chunk_1d(4) loop", "thread 1 and thread 0 would both write out[1]",
                             "with simt.unsafe()", file=FILE)
    assert f"line {e.line - 2} (`out[i] = a[i]" in str(e)


@simt.kernel(block=64)
def two_chunk_sizes(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    for q in simt.thread.chunk_1d(4):
        out[q] = a[q]
    for r in simt.thread.chunk_1d(8):
        out[r] = a[r] * 2.0             # m-two-sizes


def test_chunk_loops_of_two_sizes_on_one_slice_are_a_compile_error():
    a = np.arange(100, dtype=np.float32)
    expect_compile_error(two_chunk_sizes, (a, a.copy()), "m-two-sizes", "out[r]",
                         "two ownership forms", "in a chunk_1d(4) loop", "in a chunk_1d(8) loop",
                         "thread 1 and thread 0 would both write out[4]", file=FILE)


@simt.kernel(block=64)
def slot_then_chunk(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    s = out.get_mut(i)
    if s is not None:
        s.set(a[i])
    for q in simt.thread.chunk_1d(2):
        out[q] = a[q]                   # m-slot-chunk


def test_a_get_mut_slot_and_a_chunk_loop_on_one_slice_are_a_compile_error():
    a = np.arange(100, dtype=np.float32)
    expect_compile_error(slot_then_chunk, (a, a.copy()), "m-slot-chunk", "out[q]",
                         "two ownership forms", "s.set(a[i])", "in a chunk_1d(2) loop", file=FILE)


@simt.device
def put_at_index(o: simt.DisjointSlice[f32], v: f32):
    j = simt.thread.index_1d()
    o[j] = v                            # m-device-write


@simt.kernel(block=64)
def chunk_then_device(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    for q in simt.thread.chunk_1d(4):
        out[q] = a[q]
    put_at_index(out, 1.0)              # m-device-call


def test_a_device_functions_write_counts_for_the_slice_the_kernel_passed():
    a = np.arange(100, dtype=np.float32)
    e = expect_compile_error(chunk_then_device, (a, a.copy()), "m-device-write", "o[j]",
                             "DisjointSlice 'out' is written in two ownership forms", "in a chunk_1d(4) loop",
                             "in device function 'put_at_index' called at line", file=FILE)
    call_line = next(k for k in range(1, 500) if "m-device-call" in open(FILE).read().splitlines()[k - 1])
    assert f"called at line {call_line}" in str(e)


@simt.kernel(domain=2, block=(8, 8))
def one_d_index_in_2d_kernel(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32]):
    put_at_index(out, 1.0)


def test_a_thread_index_narrower_than_the_domain_is_a_compile_error():
    """index_1d() in a device function called from a 2-D kernel: threads (x, y) and (x, y + 1) would
    own the same element."""
    a = np.ones((16, 16), np.float32)
    expect_compile_error(one_d_index_in_2d_kernel, (a, np.zeros(16, np.float32)), "m-device-write", "o[j]",
                         "'out' is written at a 1-D ThreadIndex in a kernel of domain=2",
                         "threads that differ only along the other axes", "simt.thread.index_2d()", file=FILE)


@simt.kernel(block=32)
def same_chunk_twice(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    for q in simt.thread.chunk_1d(4):
        out[q] = a[q]
    for r in simt.thread.chunk_1d(4):
        out[r] = out[r] * 2.0 + 1.0


@simt.kernel(block=32)
def index_and_device(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
    put_at_index(out, 3.0)


@pytest.mark.parametrize("kernel,per,expect", [
    (same_chunk_twice, 4, lambda a: a * 2.0 + 1.0),
    (index_and_device, 1, lambda a: np.full_like(a, 3.0)),
])
def test_one_form_written_many_times_compiles_and_simulates(kernel, per, expect):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(203).astype(np.float32)          # not a multiple of the block
    out = np.full_like(a, np.nan)
    kernel.simulate(a, out, grid=-(-203 // (32 * per)), block=32)
    np.testing.assert_allclose(out.astype(np.float64), expect(a.astype(np.float64)), rtol=1e-6)
    assert f".entry {kernel.__name__}" in kernel.ptx(a, out, arch="sm_90")


@simt.kernel(block=64, requires=["len(a) == len(out)"])
def vouched(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
    with simt.unsafe():
        for q in simt.thread.chunk_1d(4):
            out[q] = a[q] + 1.0
        put_at_index(out, 2.0)


def test_writes_inside_unsafe_claim_nothing_and_compile():
    a = np.arange(64, dtype=np.float32)
    assert ".entry vouched" in vouched.ptx(a, a.copy(), arch="sm_90")


# ---------------------------------------------------------------------------------- strict domain
@simt.kernel(launch_bounds=256)
def copy1d(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


@simt.kernel(launch_bounds=256)
def unsafe_rows(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        k = simt.blockIdx.x * simt.blockDim.x * simt.blockDim.y + simt.threadIdx.y * simt.blockDim.x + \
            simt.threadIdx.x
        if k < len(out):
            out[k] = a[k]


def test_a_kernel_that_owns_elements_by_its_thread_index_has_a_strict_domain_contract():
    a = np.arange(10, dtype=np.float32)
    assert json.loads(copy1d.compile(a, a.copy()).contract_json)["strict_domain"] is True
    assert "strict_domain" not in json.loads(unsafe_rows.compile(a, a.copy()).contract_json)


@pytest.mark.parametrize("grid,block,cls,text", [
    ((4, 2), 64, bridge.GridSizeError,
     "copy1d: grid (4, 2, 1): expected extent 1 along y (a 1-D kernel whose threads own elements by their 1-D "
     "ThreadIndex: threads that differ only along y would write the same elements), got 2 along y"),
    (4, (64, 2), bridge.BlockSizeError,
     "copy1d: block (64, 2, 1): expected extent 1 along y (a 1-D kernel whose threads own elements by their "
     "1-D ThreadIndex: threads that differ only along y would write the same elements), got 2 along y"),
    ((2, 1, 3), 64, bridge.GridSizeError, "expected extent 1 along z"),
])
def test_a_launch_wider_than_the_domain_is_refused_and_writes_nothing(grid, block, cls, text):
    a = np.arange(256, dtype=np.float32) + 1.0
    out = np.full(256, -7.0, np.float32)
    with pytest.raises(cls) as info:
        copy1d.simulate(a, out, grid=grid, block=block)
    assert text in str(info.value)
    assert (out == -7.0).all()


def test_a_kernel_without_owned_writes_may_use_every_axis():
    a = np.arange(300, dtype=np.float32) + 0.5
    out = np.full(300, np.nan, np.float32)
    unsafe_rows.simulate(a, out, grid=3, block=(64, 2))
    np.testing.assert_array_equal(out, a)          # 3 blocks of 64 x 2 threads cover 300
