"""`unroll=N` loops in the back end (dsl/backend/unroll.py): over a run-time bound, the PTX runs N copies
of the body and issues the N copies' loads before the first of them is used (issue 28: the
crossentropy port ran at 0.65x its C++ with one load in flight a thread, where nvcc's 4-way unrolling
keeps four). The hint changes no result: the simulator (which ignores it) agrees with NumPy float64
for trip counts that are not a multiple of N, and on the GPU (`-m gpu`) the unrolled code agrees too,
with `break` and `continue` in the body and a run-time step of either sign."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import f32, f64, i64, simt

NEG_INF = float("-inf")
_LOAD = re.compile(r"^\s*ld\.global(?:\.nc)?\.[bfu]32\s+(%r\d+), \[(%rd\d+)(?:\+(-?\d+))?\];")


def online_rows(unroll: int):
    """A thread per row: the online (max, sum of exp) of x[r, 0:n:32], as crossentropy's loop."""
    @simt.kernel(block=128, requires=["len(out) == x.shape[0]", "n <= x.shape[1]"])
    def online(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32], n: i64):
        r = simt.thread.index_1d()
        m = f32(NEG_INF)
        s = f32(0.0)
        if r < x.shape[0]:
            for c in simt.range(0, n, 32, unroll=unroll):
                v = x[r, c]
                if v > m:
                    s = s * simt.exp(m - v) + f32(1.0)
                    m = v
                else:
                    s += simt.exp(v - m)
        out[r] = m + s
    return online


@simt.kernel(block=256, requires=["x.shape == out.shape", "n <= x.shape[1]"])
def scaled_rows(x: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2], n: i64):
    """A block per row, its threads striding over the columns: loads first, then the test."""
    row = simt.block.index_1d()
    if row < x.shape[0]:
        for c in simt.block.threads(x.shape[1], unroll=4):
            v = x[row, c]
            d = f32(0.0)
            if c < n:
                d = simt.exp(v)
            out[row, c] = d


def _blocks(ptx: str) -> list[list[str]]:
    """The PTX's basic blocks (split at labels and after branches), as lists of lines."""
    out: list[list[str]] = [[]]
    for line in ptx.splitlines():
        if re.match(r"^\$L\w+:", line):
            out.append([])
        out[-1].append(line)
        if re.search(r"\bbra(\.uni)?\b", line):
            out.append([])
    return out


def loads_before_first_use(ptx: str, n: int, stride: int) -> bool:
    """Is there a basic block with n loads from one address register at offsets k, k + stride, ...,
    k + (n-1) stride, all issued before any instruction reads one of the loaded registers?"""
    for block in _blocks(ptx):
        loads = [(i, m.group(1), m.group(2), int(m.group(3) or 0))
                 for i, line in enumerate(block) if (m := _LOAD.match(line))]
        for base in {b for _, _, b, _ in loads}:
            mine = [ld for ld in loads if ld[2] == base]
            offs = {off for _, _, _, off in mine}
            for k in offs:
                if {k + j * stride for j in range(n)} <= offs:
                    group = [ld for ld in mine if (ld[3] - k) % stride == 0 and 0 <= ld[3] - k < n * stride]
                    last = max(i for i, *_ in group)
                    regs = {reg for _, reg, _, _ in group}
                    used = [i for i, line in enumerate(block) if i <= last and not _LOAD.match(line)
                            and any(re.search(rf"{re.escape(r)}\b", line) for r in regs)]
                    if not used:
                        return True
    return False


@pytest.mark.parametrize("n", [2, 4, 8])
def test_unrolled_loop_issues_n_loads_before_the_first_use(n):
    x = np.zeros((6, 1000), np.float32)
    ptx = online_rows(n).ptx(x, np.zeros(6, np.float32), 1000, arch="sm_90")
    assert loads_before_first_use(ptx, n, 32 * 4), ptx
    assert "ex2.approx" in ptx


def test_without_the_hint_one_load_waits_for_the_last():
    x = np.zeros((6, 1000), np.float32)
    ptx = online_rows(1).ptx(x, np.zeros(6, np.float32), 1000, arch="sm_90")
    assert not loads_before_first_use(ptx, 2, 32 * 4)


def test_block_threads_loop_with_a_test_after_the_load_issues_its_loads_first():
    """The first copy's load, used only under `if c < n:`, may move into that branch (LLVM sinks it);
    the other three are issued before it, from the same address register (blockDim.x is the exact
    block, 256, so the copies are 1 KiB apart)."""
    x = np.zeros((3, 5000), np.float32)
    ptx = scaled_rows.ptx(x, np.zeros_like(x), 4990, arch="sm_90")
    stride = 256 * 4
    assert loads_before_first_use(ptx, 3, stride), ptx
    offsets: dict[str, set[int]] = {}
    for line in ptx.splitlines():
        if m := _LOAD.match(line):
            offsets.setdefault(m.group(2), set()).add(int(m.group(3) or 0))
    assert any({k + j * stride for j in range(4)} <= offs for offs in offsets.values() for k in offs)


# ---------------------------------------------------------------------------- results
@simt.kernel(requires=["len(out) == x.shape[0]", "len(count) == x.shape[0]"])
def weighted_sums(x: simt.Array[f64, 2], out: simt.DisjointSlice[f64], count: simt.DisjointSlice[i64],
                  start: i64, stop: i64, step: i64):
    r = simt.thread.index_1d()
    acc = f64(0.0)
    k = i64(0)
    if r < x.shape[0]:
        for c in simt.range(start, stop, step, unroll=4):
            acc += x[r, c] * f64(c + 1)
            k += 1
    out[r] = acc
    count[r] = k


@simt.kernel(requires=["len(out) == x.shape[0]"])
def skip_and_stop(x: simt.Array[f64, 2], out: simt.DisjointSlice[f64], stop: i64, limit: i64):
    r = simt.thread.index_1d()
    acc = f64(0.0)
    if r < x.shape[0]:
        for c in simt.range(0, stop, 1, unroll=4):
            if c % 5 == 3:
                continue
            if c >= limit:
                break
            acc += x[r, c]
    out[r] = acc


@simt.kernel(block=64, requires=["len(out) == x.shape[0]"])
def lane_sums(x: simt.Array[f64, 2], out: simt.DisjointSlice[f64], n: i64):
    w = simt.warp.index_1d()
    acc = f64(0.0)
    if w < x.shape[0]:
        for c in simt.warp.lanes(n, unroll=4):
            acc += x[w, c] * f64(c + 1)
    total = simt.warp.sum(acc)
    out[w] = total


WIDTH = 120
# (start, stop, step): trip counts 0, 1, N-1, N+1, 37 and more, both directions, N = 4
RANGES = [(0, 0, 1), (5, 6, 1), (2, 5, 1), (0, 5, 1), (3, 40, 1), (1, 112, 3), (7, 112, 3), (119, -1, -3),
          (100, 63, -1), (50, 50, -2), (10, 20, -1), (0, 120, 120), (0, 120, 119)]


def _data(rng, rows: int = 5) -> np.ndarray:
    return rng.integers(-8, 9, (rows, WIDTH)).astype(np.float64)     # integers: sums are exact


def _expected_weighted(x: np.ndarray, start: int, stop: int, step: int):
    cs = np.arange(start, stop, step, dtype=np.int64)
    return x[:, cs] @ (cs + 1).astype(np.float64), len(cs)


def _expected_skip(x: np.ndarray, stop: int, limit: int) -> np.ndarray:
    cs = [c for c in range(stop) if c % 5 != 3]
    cs = [c for c in cs if c < limit] if limit < stop else cs
    return x[:, cs].sum(axis=1) if cs else np.zeros(x.shape[0])


def _weighted_args(x, start, stop, step):
    rows = x.shape[0]
    return [x, np.full(rows, 7.0), np.full(rows, -1, np.int64), np.int64(start), np.int64(stop), np.int64(step)]


@pytest.mark.parametrize("start, stop, step", RANGES)
def test_simulated_unrolled_range_matches_numpy(rng, start, stop, step):
    x = _data(rng)
    args = _weighted_args(x, start, stop, step)
    weighted_sums.simulate(*args)
    sums, trips = _expected_weighted(x, start, stop, step)
    np.testing.assert_array_equal(args[1], sums)
    np.testing.assert_array_equal(args[2], np.full(x.shape[0], trips))


@pytest.mark.parametrize("stop, limit", [(0, 0), (3, 100), (37, 100), (37, 21), (41, 8)])
def test_simulated_unrolled_range_with_break_and_continue_matches_python(rng, stop, limit):
    x = _data(rng)
    out = np.full(x.shape[0], 7.0)
    skip_and_stop.simulate(x, out, np.int64(stop), np.int64(limit))
    np.testing.assert_array_equal(out, _expected_skip(x, stop, limit))


# ---------------------------------------------------------------------------- GPU
def _gpu_run(kernel, args):
    import bridge
    dev = [bridge.from_host(a) if isinstance(a, np.ndarray) else a for a in args]
    kernel(*dev)
    bridge.synchronize()
    return [d.to_host() if isinstance(d, bridge.Array) else d for d in dev]


@pytest.mark.gpu
@pytest.mark.parametrize("start, stop, step", RANGES)
def test_gpu_unrolled_range_matches_numpy(rng, start, stop, step):
    x = _data(rng, rows=300)
    got = _gpu_run(weighted_sums, _weighted_args(x, start, stop, step))
    sums, trips = _expected_weighted(x, start, stop, step)
    np.testing.assert_array_equal(got[1], sums)
    np.testing.assert_array_equal(got[2], np.full(x.shape[0], trips))


@pytest.mark.gpu
@pytest.mark.parametrize("stop, limit", [(0, 0), (3, 100), (37, 100), (37, 21), (41, 8)])
def test_gpu_unrolled_range_with_break_and_continue_matches_python(rng, stop, limit):
    x = _data(rng, rows=300)
    got = _gpu_run(skip_and_stop, [x, np.full(x.shape[0], 7.0), np.int64(stop), np.int64(limit)])
    np.testing.assert_array_equal(got[1], _expected_skip(x, stop, limit))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 31, 32 * 3 + 1, WIDTH - 1, WIDTH])   # n <= WIDTH: x has WIDTH columns
def test_gpu_unrolled_lanes_loop_matches_numpy(rng, n):
    x = _data(rng, rows=9)
    got = _gpu_run(lane_sums, [x, np.full(x.shape[0], 7.0), np.int64(n)])
    cs = np.arange(n, dtype=np.int64)
    np.testing.assert_array_equal(got[1], x[:, cs] @ (cs + 1).astype(np.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 3, 4, 5, 37])
def test_gpu_online_rows_agree_with_and_without_the_hint(rng, n):
    x = rng.standard_normal((300, 32 * n)).astype(np.float32)
    outs = [_gpu_run(online_rows(u), [x, np.zeros(300, np.float32), np.int64(32 * n)])[1] for u in (1, 4)]
    np.testing.assert_array_equal(outs[0], outs[1])
    cols = x[:, ::32].astype(np.float64)
    m = cols.max(axis=1)
    np.testing.assert_allclose(outs[1], m + np.exp(cols - m[:, None]).sum(axis=1), rtol=1e-5)
