"""A named one-element load (a row's mean or 1/std, `s = tile.load(stat, row, (1,))`) is held once
in every thread: one scalar load a thread, no shared-memory broadcast (barriers), whether it is
used once (not forwarded into its use, where the broadcast would load it once per element the thread
holds) or several times; the values stay NumPy's on both simulators."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import f32, tile


@tile.kernel(num_warps=4)
def scale_rows_once(x: tile.Array[f32, 2], s: tile.Array[f32, 1], out: tile.Partition[f32, 2]):
    rows, width = out.tile_shape
    for i in range(rows):
        row = tile.bid(0) * rows + i
        k = tile.load(s, row, (1,))                     # used once
        out.store(tile.load(x, (row, 0), (1, width)) * k, chunk=(i, 0))


@tile.kernel(num_warps=4)
def scale_rows_twice(x: tile.Array[f32, 2], s: tile.Array[f32, 1], out: tile.Partition[f32, 2]):
    rows, width = out.tile_shape
    for i in range(rows):
        row = tile.bid(0) * rows + i
        k = tile.load(s, row, (1,))                     # used twice
        out.store((tile.load(x, (row, 0), (1, width)) - k) * k, chunk=(i, 0))


def args(x, s, out, rows=4):
    return x, s, tile.partition(out, (rows, x.shape[1]))


def scalar_loads(ptx: str) -> int:
    return len(re.findall(r"ld\.global(?:\.nc)?\.(?:b32|f32)\s", ptx))


@pytest.mark.parametrize("kernel", [scale_rows_once, scale_rows_twice])
def test_a_named_one_element_load_is_one_load_a_thread_without_barriers(kernel):
    z = np.zeros((8, 1024), np.float32)                 # 1024 columns on 128 threads: 8 elements a thread
    ptx = kernel.ptx(*args(z, np.zeros(8, np.float32), z.copy()), arch="sm_90")
    assert scalar_loads(ptx) == 4, scalar_loads(ptx)    # one a row: the 4-row loop is unrolled
    assert "bar.sync" not in ptx and "st.shared" not in ptx


@pytest.mark.parametrize("runner", ["simulate", "simulate_lowered"])
@pytest.mark.parametrize("kernel", [scale_rows_once, scale_rows_twice])
def test_one_element_loads_give_numpys_values(kernel, runner, rng):
    x = rng.standard_normal((10, 256)).astype(np.float32)     # 10 rows in blocks of 4: the last has 2
    s = rng.standard_normal(10).astype(np.float32)
    out = np.full_like(x, np.nan)
    getattr(kernel, runner)(*args(x, s, out))
    want = x * s[:, None] if kernel is scale_rows_once else (x - s[:, None]) * s[:, None]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
