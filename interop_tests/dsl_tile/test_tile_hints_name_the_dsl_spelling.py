"""Tile kernels get the same corrected hints as SIMT ones (issue 31): a NumPy function is told its
`tile.` spelling, and a float (tile) added to a variable an int literal started is told to start it as
a float (it was "cast explicitly with .astype(i32)", which truncates). The advice, followed, compiles."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import tile
from dsl.errors import DslCompileError
from dsl.tile import TileCompileError
from dsl.types import f32

V = np.arange(1, 9, dtype=np.float32)


def part() -> tile.Partition:
    return tile.partition(np.zeros(8, np.float32), (8,))


def compile_error(kernel) -> TileCompileError:
    with pytest.raises(TileCompileError) as info:
        kernel.tile_ir(V, part())
    return info.value


def test_numpy_function_is_told_its_tile_spelling():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(np.sqrt(tile.load(a, tile.bid(0), out.tile_shape)))
    e = compile_error(k)
    assert "'sqrt' is a NumPy function: NumPy functions do not run in kernels" in str(e)
    assert e.hint == "write tile.sqrt(x)"
    assert "np.sqrt(" in e.source_line and e.line > 0


def test_numpy_function_without_a_math_row_is_told_the_functions_that_exist():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(np.cumsum(tile.load(a, tile.bid(0), out.tile_shape)))
    e = compile_error(k)
    assert "'cumsum' is a NumPy function" in str(e)
    assert "tile.<name>" in e.hint and " exp " in e.hint


def test_float_tile_into_an_int_literal_variable_is_told_to_start_with_zeros():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        acc = 0
        for _ in range(2):
            acc += tile.load(a, tile.bid(0), out.tile_shape)
        out.store(acc)
    e = compile_error(k)
    assert e.hint.endswith("start it as a float: `acc = tile.zeros((8,), f32)`")
    assert "use a new name" not in str(e)


def test_float_scalar_into_an_int_literal_variable_is_told_to_start_it_as_a_float():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        acc = 0
        for _ in range(2):
            acc += tile.sum(tile.load(a, tile.bid(0), out.tile_shape))
        out.store(tile.load(a, tile.bid(0), out.tile_shape) * acc)
    e = compile_error(k)
    assert e.hint.endswith("start it as a float: `acc = f32(0)` or `acc = 0.0`")
    assert ".astype(i32)" not in str(e)
    assert isinstance(e, DslCompileError)


def test_the_advised_starts_compile_and_compute():
    @tile.kernel
    def k_zeros(a: tile.Array[f32], out: tile.Partition[f32]):
        acc = tile.zeros((8,), f32)
        for _ in range(2):
            acc += tile.load(a, tile.bid(0), out.tile_shape)
        out.store(acc)

    @tile.kernel
    def k_f32(a: tile.Array[f32], out: tile.Partition[f32]):
        acc = f32(0)
        for _ in range(2):
            acc += tile.sum(tile.load(a, tile.bid(0), out.tile_shape))
        out.store(tile.load(a, tile.bid(0), out.tile_shape) * 0.0 + acc)

    @tile.kernel
    def k_float(a: tile.Array[f32], out: tile.Partition[f32]):
        acc = 0.0
        for _ in range(2):
            acc += tile.sum(tile.load(a, tile.bid(0), out.tile_shape))
        out.store(tile.load(a, tile.bid(0), out.tile_shape) * 0.0 + acc)

    out = np.zeros(8, np.float32)
    k_zeros.simulate(V, tile.partition(out, (8,)))
    assert out.tolist() == [2.0 * x for x in range(1, 9)]
    for kernel in (k_f32, k_float):
        out[:] = 0
        kernel.simulate(V, tile.partition(out, (8,)))
        assert out.tolist() == [72.0] * 8          # 2 * (1 + ... + 8)


def test_an_int_variable_assigned_an_int_tile_still_compiles():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        n = 0
        for j in range(3):
            n = n + j
        out.store(tile.load(a, tile.bid(0), out.tile_shape) * n)
    out = np.zeros(8, np.float32)
    k.simulate(V, tile.partition(out, (8,)))
    assert out.tolist() == [3.0 * x for x in range(1, 9)]
