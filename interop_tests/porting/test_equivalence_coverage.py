"""A porting proof cannot be vacuous: assert_equivalent poisons write-only outputs with a sentinel and
counts the elements each side wrote, so two kernels that leave the same rows untouched no longer
"agree"; a kernel whose contract derives no grid gets none guessed for it (issue 27, finding 7).

The kernels are the finding's shapes, on the CPU simulator: a layernorm that gives each row a warp
(8 rows per 256-thread block) and a partial histogram that gives each row of partials a block. Both
write through `unsafe` stores, so their contracts have no grid_from.
"""
from __future__ import annotations

import numpy as np
import pytest

from bridge import testing as T
from bridge.contract import ArgSpec, LaunchContract
from dsl import f32, i32, simt

ROWS = 33                     # not a multiple of 8 rows per block, nor of anything else
COLS = 40
BINS = 16
SHAPES = {"x": (ROWS, COLS), "out": (ROWS, COLS)}
EPS = 1e-5


@simt.kernel(block=256, requires=["x.shape == out.shape", "x.shape[1] > 0"])
def layernorm_warp_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        row = simt.blockIdx.x * 8 + simt.threadIdx.x // 32          # a warp per row, 8 rows per block
        lane = simt.lane_id()
        if row < x.shape[0]:
            cols = x.shape[1]
            s = f32(0)
            c = lane
            while c < cols:
                s += x[row, c]
                c += 32
            mean = simt.warp.sum(s) / f32(cols)
            q = f32(0)
            c = lane
            while c < cols:
                q += (x[row, c] - mean) * (x[row, c] - mean)
                c += 32
            inv = f32(1) / simt.sqrt(simt.warp.sum(q) / f32(cols) + f32(EPS))
            c = lane
            while c < cols:
                out[row, c] = (x[row, c] - mean) * inv
                c += 32


@simt.kernel(block=256, requires=["x.shape == out.shape", "x.shape[1] > 0"])
def layernorm_block_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    """The same job with a block per row: a port that maps threads differently."""
    with simt.unsafe():
        part = simt.shared.array((8,), f32)
        row = simt.blockIdx.x
        t = simt.threadIdx.x
        cols = x.shape[1]
        s = f32(0)
        c = t
        while c < cols:
            s += x[row, c]
            c += 256
        s = simt.warp.sum(s)
        if simt.lane_id() == 0:
            part[t // 32] = s
        simt.sync_threads()
        total = f32(0)
        for w in range(8):
            total += part[w]
        mean = total / f32(cols)
        simt.sync_threads()
        q = f32(0)
        c = t
        while c < cols:
            q += (x[row, c] - mean) * (x[row, c] - mean)
            c += 256
        q = simt.warp.sum(q)
        if simt.lane_id() == 0:
            part[t // 32] = q
        simt.sync_threads()
        var = f32(0)
        for w in range(8):
            var += part[w]
        inv = f32(1) / simt.sqrt(var / f32(cols) + f32(EPS))
        c = t
        while c < cols:
            out[row, c] = (x[row, c] - mean) * inv
            c += 256


def layernorm_ref(x, out):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=1, keepdims=True)
    out[...] = ((x64 - mean) / np.sqrt(((x64 - mean) ** 2).mean(axis=1, keepdims=True) + EPS)).astype(np.float32)


@simt.kernel(block=256, requires=["partials.shape[0] == data.shape[0]", f"partials.shape[1] == {BINS}"])
def partial_histogram(data: simt.Array[i32, 2], partials: simt.DisjointSlice[i32, 2]):
    """Row r of `partials` is the histogram of row r of `data` (the first pass of a two-pass histogram)."""
    with simt.unsafe():
        h = simt.shared.array((BINS,), i32)
        row = simt.blockIdx.x
        t = simt.threadIdx.x
        if t < BINS:
            h[t] = 0
        simt.sync_threads()
        c = t
        while c < data.shape[1]:
            simt.atomic.add(h, data[row, c], 1)
            c += 256
        simt.sync_threads()
        if t < BINS:
            partials[row, t] = h[t]


def partial_histogram_ref(data, partials):
    for r in range(data.shape[0]):
        partials[r] = np.bincount(data[r], minlength=BINS)


BIN_VALUES = {"data": lambda rng, shape, dt: rng.integers(0, BINS, shape).astype(dt)}
HIST_SHAPES = {"data": (ROWS, 300), "partials": (ROWS, BINS)}
ROW_BLOCKS = lambda s: (s["x"][0],)                      # noqa: E731 - a block per row
WARP_ROW_BLOCKS = lambda s: (-(-s["x"][0] // 8),)        # noqa: E731 - 8 rows (warps) per block


def test_a_kernel_whose_contract_derives_no_grid_gets_none_guessed():
    with pytest.raises(T.GridNotDerivableError,
                       match=r"layernorm_warp_rows: cannot derive a launch grid: the contract has no grid_from .* "
                             r"pass grid="):
        T.arguments(layernorm_warp_rows, shapes=SHAPES, seed=1)
    with pytest.raises(T.GridNotDerivableError, match=r"the contract has no grid_from"):
        T.suggested_grid(T.contract_of(partial_histogram), [(ROWS, 300), (ROWS, BINS)])
    args = T.arguments(layernorm_warp_rows, shapes=SHAPES, seed=1, grid=WARP_ROW_BLOCKS)
    assert args.grid == (5,)                                 # the grid asked for, validated
    with pytest.raises(T.GridNotDerivableError,
                       match=r"assert_equivalent: reference layernorm_warp_rows \(@simt.kernel\): cannot derive a "
                             r"launch grid: the contract has no grid_from"):
        T.assert_equivalent(layernorm_warp_rows, layernorm_warp_rows, trials=1, seed=1, shapes=SHAPES)


def test_two_kernels_leaving_the_same_rows_untouched_are_refused_with_their_coverage():
    # 1 block = 8 warps = 8 rows of 33: both kernels leave rows 8..32 untouched, and agree there
    with pytest.raises(T.CoverageError) as info:
        T.assert_equivalent(layernorm_warp_rows, layernorm_warp_rows, trials=1, seed=3, shapes=SHAPES,
                            grid=(1,), edges=False)
    e = info.value
    text = str(e)
    assert (f"the reference layernorm_warp_rows (@simt.kernel) wrote only {8 * COLS} of {ROWS * COLS} element(s) "
            f"of output 'out' (#1) (24.2%): the comparison would test only those") in text
    assert "partial=True" in text and "first at index (8, 0)" in text
    assert f"coverage: reference wrote {8 * COLS} of {ROWS * COLS} (24.2%), candidate wrote {8 * COLS} of" in text
    assert "grids: reference grid (1,) (given)" in text
    assert e.argument == "out" and e.index == (8, 0) and e.coverage["reference"] == (8 * COLS, ROWS * COLS)


def test_a_partial_histogram_over_too_few_blocks_is_refused_with_its_coverage():
    with pytest.raises(T.CoverageError,
                       match=rf"wrote only {6 * BINS} of {ROWS * BINS} element\(s\) of output 'partials' \(#1\) "
                             rf"\(18.2%\)") as info:
        T.assert_equivalent(partial_histogram, partial_histogram, trials=1, seed=4, shapes=HIST_SHAPES,
                            values=BIN_VALUES, grid=(6,), edges=False)
    assert info.value.index == (6, 0)


def test_a_full_coverage_port_passes_and_reports_every_element_written():
    report = T.assert_equivalent(layernorm_warp_rows, T.configured(layernorm_block_rows, grid=ROW_BLOCKS),
                                 trials=2, seed=5, shapes=SHAPES, grid=WARP_ROW_BLOCKS, rtol=1e-5, atol=1e-5)
    cov = report.coverage["out"]
    # 2 trials and the all-ones edge case, which keeps the fixed shapes (the empty one is ruled out by them)
    assert (cov.written, cov.total) == (3 * ROWS * COLS, 3 * ROWS * COLS)
    assert report.full_coverage
    assert f"coverage: out: {cov.total} of {cov.total} element(s) written (100%)" in str(report)
    assert f"written: out {ROWS * COLS} of {ROWS * COLS}" in str(report)
    hist = T.assert_equivalent(partial_histogram_ref, partial_histogram, trials=1, seed=6, shapes=HIST_SHAPES,
                               values=BIN_VALUES, grid=lambda s: (s["data"][0],), edges=False)
    assert hist.full_coverage and "partials: 528 of 528 element(s) written (100%)" in str(hist)


def test_a_candidate_that_under_covers_a_full_reference_names_the_untouched_elements():
    with pytest.raises(T.CoverageError) as info:
        T.assert_equivalent(layernorm_ref, layernorm_warp_rows, trials=1, seed=7, shapes=SHAPES, grid=(2,),
                            edges=False, rtol=1e-5, atol=1e-5)
    text = str(info.value)
    assert (f"candidate layernorm_warp_rows (@simt.kernel) left {(ROWS - 16) * COLS} element(s) of output 'out' (#1) "
            f"untouched that the reference layernorm_ref (Python function) wrote; first at index (16, 0)") in text
    assert f"coverage: reference wrote {ROWS * COLS} of {ROWS * COLS} (100%), candidate wrote {16 * COLS}" in text


def interior_rows_ref(x, out):
    """Writes rows 1..n-2 only, by design (a border-preserving stencil, say)."""
    out[1:-1] = x[1:-1] * np.float32(2)


@simt.kernel(block=(32, 8), domain=2, requires=["x.shape == out.shape"])
def interior_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        r = simt.blockIdx.y * 8 + simt.threadIdx.y
        c = simt.blockIdx.x * 32 + simt.threadIdx.x
        if r > 0 and r < x.shape[0] - 1 and c < x.shape[1]:
            out[r, c] = x[r, c] * f32(2)


@simt.kernel(block=(32, 8), domain=2, requires=["x.shape == out.shape"])
def every_row(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, c = simt.thread.index_2d()
    out[r, c] = x[r, c] * f32(2)


COVER_2D = lambda s: (-(-s["x"][1] // 32), -(-s["x"][0] // 8))      # noqa: E731


def test_partial_allows_a_deliberately_partial_reference_and_still_checks_the_written_set():
    with pytest.raises(T.CoverageError, match=r"wrote only 1240 of 1320 element\(s\) of output 'out' \(#1\) \(93.9%\)"):
        T.assert_equivalent(interior_rows_ref, interior_rows, trials=1, seed=8, shapes=SHAPES, grid=COVER_2D,
                            edges=False)
    report = T.assert_equivalent(interior_rows_ref, interior_rows, trials=1, seed=8, shapes=SHAPES, grid=COVER_2D,
                                 edges=False, partial=True)
    assert not report.full_coverage and "out: 1240 of 1320 element(s) written (93.9%)" in str(report)
    T.assert_equivalent(interior_rows_ref, interior_rows, trials=1, seed=8, shapes=SHAPES, grid=COVER_2D,
                        edges=False, partial=["out"])
    with pytest.raises(T.CoverageError,
                       match=r"candidate every_row \(@simt.kernel\) wrote 80 element\(s\) of output 'out' \(#1\) that the "
                             r"reference interior_rows_ref \(Python function\) left untouched; first at index \(0, 0\)"):
        T.assert_equivalent(interior_rows_ref, every_row, trials=1, seed=8, shapes=SHAPES, edges=False, partial=True)
    with pytest.raises(ValueError, match=r"partial: 'x' is not an output the kernels write; they write out"):
        T.assert_equivalent(interior_rows_ref, every_row, trials=1, partial=["x"])


SENTINEL_BITS = 0x7FDA5A5A           # the first f32 sentinel: a kernel may write exactly these bytes


class _WritesTheSentinel:
    """A duck-typed kernel (contract hook + simulate) that writes every element, element 0 with the
    first sentinel's own bytes: written, though its bytes match the sentinel after the run."""
    __name__ = "writes_the_sentinel"

    def __init__(self, skip_first: bool = False) -> None:
        self.skip_first = skip_first

    def launch_contract(self, dtypes=None):
        return LaunchContract("writes_the_sentinel", [ArgSpec.array("x", "f32"), ArgSpec.array("y", "f32", access="write")],
                              block=64, requires=["len(x) == len(y)"], grid_from="y")

    def simulate(self, x, y, grid=None, block=None):
        y[1:] = x[1:]
        if not self.skip_first:
            y[:1].view(np.uint32)[0] = SENTINEL_BITS


def sentinel_first(x, y):
    y[...] = x
    y[:1].view(np.uint32)[0] = SENTINEL_BITS


def nan_everywhere(x, y):
    y[...] = np.float32("nan")


class _WritesNaN(_WritesTheSentinel):
    def simulate(self, x, y, grid=None, block=None):
        y[...] = np.float32("nan")


def test_written_nans_and_values_equal_to_the_sentinel_count_as_written():
    report = T.assert_equivalent(sentinel_first, _WritesTheSentinel(), trials=1, seed=9, edges=False)
    assert report.full_coverage
    with pytest.raises(T.CoverageError, match=r"left 1 element\(s\) of output 'y' \(#1\) untouched .*first at index \(0,\)"):
        T.assert_equivalent(sentinel_first, _WritesTheSentinel(skip_first=True), trials=1, seed=9, edges=False)
    assert T.assert_equivalent(nan_everywhere, _WritesNaN(), trials=1, seed=9, edges=False).full_coverage


def test_read_write_outputs_are_compared_without_poisoning_and_the_report_says_so():
    def accumulate(x, y):
        y[...] += x

    class _Accumulates(_WritesTheSentinel):
        def launch_contract(self, dtypes=None):
            return LaunchContract("acc", [ArgSpec.array("x", "f32"), ArgSpec.array("y", "f32", access="readwrite")],
                                  block=64, requires=["len(x) == len(y)"], grid_from="y")

        def simulate(self, x, y, grid=None, block=None):
            y[...] = y + x

    report = T.assert_equivalent(accumulate, _Accumulates(), trials=1, seed=10, edges=False,
                                 shapes={"x": (101,), "y": (101,)})
    assert not report.coverage["y"].poisoned
    assert "y: read-write, not poisoned (its initial values are inputs); 101 element(s) compared" in str(report)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32", "f64", "c64", "i8", "i32", "u64", "bool", "f8e4m3fn",
                                   "f8e5m2"])
def test_sentinels_are_two_distinct_patterns_and_nan_for_floats(dtype):
    from bridge.testing import _arrays, _coverage
    first, second = _coverage.sentinels(dtype)
    dt = _arrays.numpy_dtype(dtype)
    assert first != second and len(first) == len(second) == dt.itemsize
    value = np.frombuffer(first, dt)
    if dtype.startswith("f") or dtype == "bf16":
        assert np.isnan(value.astype(np.float32)).all()
    elif dtype.startswith("c"):
        assert np.isnan(value.real).all() and np.isnan(value.imag).all()
    contract = LaunchContract("k", [ArgSpec.array("out", dtype, 2, access="write")], block=(8, 8), domain=2,
                              grid_from="out")
    args = T.arguments(contract, size=40, seed=1)          # strided / reversed / F layouts too
    rec = _coverage.poison(args.records["out"], 0)
    view, base = rec.host_view()
    assert _coverage.untouched(np.ascontiguousarray(view), dtype, 0).all()
    assert not _coverage.untouched(np.ascontiguousarray(view), dtype, 1).any()
    outside = ~rec.mask()
    np.testing.assert_array_equal(base.view(np.uint8).reshape(base.shape + (-1,))[outside],
                                  args.records["out"].base.view(np.uint8).reshape(base.shape + (-1,))[outside])


@simt.kernel(block=256, requires=["len(a) == len(out)"])
def copy_unsafe_256(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        i = simt.blockIdx.x * 256 + simt.threadIdx.x
        if i < len(out):
            out[i] = a[i]


@simt.kernel(block=128, requires=["len(a) == len(out)"])
def copy_unsafe_128(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        i = simt.blockIdx.x * 128 + simt.threadIdx.x
        if i < len(out):
            out[i] = a[i]


@simt.kernel(block=256, requires=["len(a) == len(out)"])
def copy_safe(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


def test_a_kernel_without_grid_from_runs_with_the_other_sides_grid_and_under_coverage_shows():
    shapes = {"a": (1001,), "out": (1001,)}
    report = T.assert_equivalent(copy_safe, copy_unsafe_256, trials=1, seed=11, shapes=shapes, edges=False)
    assert report.full_coverage                          # the reference's derived grid: 4 blocks of 256
    with pytest.raises(T.CoverageError) as info:         # 4 blocks of 128 threads cover 512 of 1001
        T.assert_equivalent(copy_safe, copy_unsafe_128, trials=1, seed=11, shapes=shapes, edges=False)
    text = str(info.value)
    assert ("candidate copy_unsafe_128 (@simt.kernel) left 489 element(s) of output 'out' (#1) untouched that the "
            "reference copy_safe (@simt.kernel) wrote; first at index (512,)") in text
    assert ("grids: reference the grid its contract derives from 'out'; candidate grid (4, 1, 1): the reference's "
            "(the grid its contract derives from 'out'), as its own contract derives none") in text
