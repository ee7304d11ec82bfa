"""Mistakes in tile kernels are compile errors (dsl.DslCompileError) that point at the source line."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import tile
from dsl.errors import DslCompileError
from dsl.types import f32

x = np.zeros((8, 8), np.float32)
v = np.zeros(8, np.float32)


def part2():
    return tile.partition(np.zeros((8, 8), np.float32), (4, 4))


def compile_error(kernel, *args) -> DslCompileError:
    with pytest.raises(DslCompileError) as info:
        kernel.tile_ir(*args)
    return info.value


def test_non_power_of_two_tile_shape():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (3, 4)))
    e = compile_error(k, x, part2())
    assert "powers of two" in str(e) and "tile.load(a, (0, 0), (3, 4))" in str(e) and e.line > 0


def test_shape_mismatch_in_binary_op():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (4, 4)) + tile.load(a, (0, 0), (4, 2)))
    assert "do not broadcast" in str(compile_error(k, x, part2()))


def test_store_of_wrong_shape():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (8, 8)))
    assert "does not fit the partition's tile shape" in str(compile_error(k, x, part2()))


def test_store_at_another_index_is_refused():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (4, 4)), (1, 1))
    assert "its own tile" in str(compile_error(k, x, part2()))


def test_reading_other_tiles_of_a_partition_is_refused():
    @tile.kernel
    def k(out: tile.Partition[f32, 2]):
        out.store(tile.load(out, (1, 0), (4, 4)))
    assert "not readable" in str(compile_error(k, part2()))


def test_subscript_assignment_is_refused():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        t = tile.load(a, (0, 0), (4, 4))
        t[0] = 1.0
        out.store(t)
    assert "only local names can be assigned" in str(compile_error(k, x, part2()))


def test_variable_changing_shape():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        t = tile.load(a, (0, 0), (4, 4))
        t = tile.sum(t, axis=0)
        out.store(t)
    assert "keeps its shape" in str(compile_error(k, x, part2()))


def test_matmul_dtype_and_shape_checks():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        t = tile.load(a, (0, 0), (4, 4))
        out.store(tile.matmul(t.astype(tile.f16), t))
    assert "two f16" in str(compile_error(k, x, part2()))

    @tile.kernel
    def k2(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (4, 8)) @ tile.load(a, (0, 0), (4, 4)))
    assert "inner dimensions" in str(compile_error(k2, x, part2()))


def test_unsupported_statements():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        while True:
            pass
    assert "while loops" in str(compile_error(k, x, part2()))

    @tile.kernel
    def k2(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        return tile.load(a, (0, 0), (4, 4))
    assert "returns nothing" in str(compile_error(k2, x, part2()))


def test_lambda_and_unknown_name():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        f = lambda q: q  # noqa: E731
        out.store(f(tile.load(a, (0, 0), (4, 4))))
    assert "lambda" in str(compile_error(k, x, part2()))

    @tile.kernel
    def k2(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(nope)  # noqa: F821
    assert "unknown name `nope`" in str(compile_error(k2, x, part2()))


def test_non_scalar_if_condition_suggests_where():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        t = tile.load(a, (0, 0), (4, 4))
        if t > 0:
            t = t * 2.0
        out.store(t)
    assert "tile.where" in str(compile_error(k, x, part2()))


def test_bad_reduction_axis_and_bid_axis():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.sum(tile.load(a, (0, 0), (4, 4)), axis=2, keepdims=True))
    assert "reduction axis" in str(compile_error(k, x, part2()))

    @tile.kernel
    def k2(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (tile.bid(2), 0), (4, 4)))
    assert "tile.bid(axis)" in str(compile_error(k2, x, part2()))


def test_kernel_without_partition():
    @tile.kernel
    def k(a: tile.Array[f32, 2]):
        tile.load(a, (0, 0), (4, 4))
    assert "needs a tile.Partition" in str(compile_error(k, x))


def test_bitwise_op_on_floats_and_calling_python_functions():
    @tile.kernel
    def k(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (4, 4)) & 1)
    assert "bitwise" in str(compile_error(k, x, part2()))

    @tile.kernel
    def k2(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(print(a))
    assert "cannot call" in str(compile_error(k2, x, part2()))


def test_tile_functions_outside_kernels_raise():
    with pytest.raises(TypeError, match="inside a @tile.kernel"):
        tile.load(v, 0, (8,))
