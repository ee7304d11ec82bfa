"""A kernel's contract derives a grid (grid_from) only from what its ThreadIndex ranges over: the
DisjointSlice it stores at its ThreadIndex (or at a chunk loop's owned index), or an explicit
`grid_from=`. Kernels that write only through atomics, `unsafe` writes or shared memory get none."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import f32, i32, simt


def grid_from(kernel, *args):
    """The contract's grid_from entry for these arguments (None when absent)."""
    return kernel.contract(*args).to_dict().get("grid_from")


F = np.zeros(100, np.float32)
F2 = np.zeros((10, 12), np.float32)
I = np.zeros(100, np.int32)


@simt.kernel(block=256)
def atomic_total(a: simt.Array[f32], total: simt.DisjointSlice[f32]):
    g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if g < len(a):
        with simt.unsafe():
            simt.atomic.add(total, 0, a[g])


@simt.kernel(block=128)
def unsafe_write(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
        if g < len(out):
            out[g] = a[g]


@simt.kernel(block=64)
def shared_only(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        buf = simt.shared.array((64,), f32)
        t = simt.threadIdx.x
        buf[t] = f32(1)
        simt.sync_threads()
        g = simt.blockIdx.x * 64 + t
        if g < len(out):
            out[g] = buf[t]


@simt.kernel
def stores_second_param_first(small: simt.DisjointSlice[f32], big: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    big[i] = f32(1)
    small[i] = f32(2)


@simt.kernel(requires=["len(a) <= len(b)"])
def relation_picks_the_bigger(a: simt.DisjointSlice[f32], b: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    a[i] = f32(1)
    b[i] = f32(2)


@simt.kernel(block=128)
def atomics_then_thread_index(hist: simt.DisjointSlice[i32], x: simt.Array[i32],
                              out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    if i < len(x):
        with simt.unsafe():
            simt.atomic.add(hist, 0, 1)
    out[i] = x[i]


@simt.kernel
def through_a_slot(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    if slot is not None:
        slot.set(a[i])


@simt.device
def put(dst: simt.DisjointSlice[f32], v: f32):
    i = simt.thread.index_1d()
    dst[i] = v


@simt.kernel
def through_a_device_function(junk: simt.DisjointSlice[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        junk[0] = f32(0)
    put(out, f32(3))


@simt.kernel(domain=2, block=(16, 16))
def copy2d(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    ij = simt.thread.index_2d()
    out[ij] = a[ij]


@simt.kernel(launch_bounds=256)
def chunked(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(8)
    for k in c:
        out[k] = a[k]


@simt.kernel(block=128, grid_from="data")
def histogram_over_data(data: simt.Array[i32], hist: simt.DisjointSlice[i32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(data):
        with simt.unsafe():
            simt.atomic.add(hist, data[i], 1)


@simt.kernel(grid_from="a")
def chunked_named(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k]


@pytest.mark.parametrize("kernel, args", [
    (atomic_total, (F, np.zeros(1, np.float32))),
    (unsafe_write, (F, F.copy())),
    (shared_only, (F, F.copy())),
], ids=["atomics", "unsafe-write", "shared-memory"])
def test_kernels_whose_threads_range_over_no_written_slice_derive_no_grid(kernel, args):
    assert grid_from(kernel, *args) is None
    assert "grid_from" not in kernel.compile(*args).contract_json


def test_the_slice_stored_at_the_thread_index_derives_the_grid_not_the_first_parameter():
    assert grid_from(atomics_then_thread_index, I, I, I) == {"arg": "out", "per_thread": [1, 1, 1]}
    # several slices and no relation between them: the first one stored (program order) is kept
    assert grid_from(stores_second_param_first, F, F) == {"arg": "big", "per_thread": [1, 1, 1]}


def test_a_requires_relation_picks_the_slice_that_bounds_the_others():
    assert grid_from(relation_picks_the_bigger, F, F) == {"arg": "b", "per_thread": [1, 1, 1]}


def test_slot_writes_device_function_writes_and_2d_stores_derive_the_grid():
    assert grid_from(through_a_slot, F, F)["arg"] == "out"
    assert grid_from(through_a_device_function, F, F)["arg"] == "out"
    assert grid_from(copy2d, F2, F2.copy()) == {"arg": "out", "per_thread": [1, 1, 1]}


def test_chunk_loops_cover_n_elements_per_thread():
    assert grid_from(chunked, F, F.copy()) == {"arg": "out", "per_thread": [8, 1, 1]}


def test_an_explicit_grid_from_names_the_array_the_threads_range_over():
    assert grid_from(histogram_over_data, I, np.zeros(37, np.int32)) == {"arg": "data", "per_thread": [1, 1, 1]}
    assert grid_from(chunked_named, F, F.copy()) == {"arg": "a", "per_thread": [4, 1, 1]}
    assert histogram_over_data.options.grid_from == "data"


def test_the_kernel_zoo_reductions_and_unsafe_kernels_need_a_grid():
    from interop_tests.kernels_zoo import ZOO_BY_NAME
    rng = np.random.default_rng(0)
    expected = {"vecadd": "out", "vecadd_chunked": "out", "stencil5": "out", "sgemm_naive": "c",
                "mandelbrot": "out", "block_sum": None, "histogram": None, "block_scan": None,
                "transpose": None, "sgemm_tiled": None, "softmax_rows": None}
    for name, want in expected.items():
        case = ZOO_BY_NAME[name]
        got = grid_from(case.kernel, *case.make(rng, 1000).args)
        assert (got or {}).get("arg") == want, name
