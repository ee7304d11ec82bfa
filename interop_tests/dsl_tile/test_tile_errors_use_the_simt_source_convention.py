"""SIMT and tile kernels share one source/location/caret convention (dsl/source.py): the same
`file:line:col: error:` header with the column in the user's file (indentation of a nested kernel
included), the real source line, and a `^~~~` caret under the whole construct — whether the error is
raised at the AST node or later from the IR location."""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from dsl import f32, simt, tile
from dsl.errors import DslCompileError

HERE = Path(__file__).resolve()
LINES = HERE.read_text().splitlines()


def expected(marker: str, construct: str) -> tuple[int, int, str, str]:
    """(line, col, source line, caret line) computed from this file's text, not by the code under test."""
    line = next(k for k, t in enumerate(LINES, 1) if marker in t)
    text = LINES[line - 1]
    col = text.index(construct) + 1
    caret = " " * (col - 1) + "^" + "~" * (len(construct) - 1)
    return line, col, text, caret


def assert_rendered(err: DslCompileError, message: str, marker: str, construct: str) -> None:
    line, col, text, caret = expected(marker, construct)
    lines = str(err).splitlines()
    assert lines[0] == f"{HERE}:{line}:{col}: error: {message}"
    assert lines[1] == "    " + text and lines[2] == "    " + caret
    assert (err.file, err.line, err.col) == (str(HERE), line, col)


def nested_kernels():
    @simt.kernel
    def simt_bad(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = a[i] + undefined_name      # marker-simt-1  # noqa: F821 (the compile error under test)

    @tile.kernel
    def tile_bad_name(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(tile.load(a, tile.bid(0), out.tile_shape) + undefined_name)   # marker-tile-1  # noqa: F821

    @tile.kernel
    def tile_bad_shapes(a: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(a, (0, 0), (4, 4)) + tile.load(a, (0, 0), (4, 2)))   # marker-tile-2
    return simt_bad, tile_bad_name, tile_bad_shapes


def test_a_nested_simt_and_tile_kernel_render_the_same_header_line_and_caret():
    simt_bad, tile_bad_name, _ = nested_kernels()
    v = np.zeros(8, np.float32)
    with pytest.raises(DslCompileError) as s_err:
        simt_bad.build(v, v.copy())
    with pytest.raises(DslCompileError) as t_err:
        tile_bad_name.tile_ir(v, tile.partition(v.copy(), (8,)))
    assert_rendered(s_err.value, s_err.value.message, "marker-simt-1", "undefined_name")
    assert_rendered(t_err.value, t_err.value.message, "marker-tile-1", "undefined_name")
    assert "undefined_name" in t_err.value.message


def test_an_error_raised_from_the_tile_ir_location_keeps_the_construct_extent():
    _, _, tile_bad_shapes = nested_kernels()
    x = np.zeros((8, 8), np.float32)
    with pytest.raises(DslCompileError) as info:
        tile_bad_shapes.tile_ir(x, tile.partition(x.copy(), (4, 4)))
    assert_rendered(info.value, "shapes (4, 4) and (4, 2) do not broadcast", "marker-tile-2",
                    "tile.load(a, (0, 0), (4, 4)) + tile.load(a, (0, 0), (4, 2))")


def test_a_tile_kernel_without_readable_source_is_a_compile_error_like_simt():
    ns: dict = {"tile": tile, "simt": simt, "f32": f32}
    exec(textwrap.dedent("""
        @tile.kernel
        def t(a: tile.Array[f32], out: tile.Partition[f32]):
            out.store(tile.load(a, tile.bid(0), out.tile_shape))

        @simt.kernel
        def s(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            out[simt.thread.index_1d()] = a[0]
    """), ns)
    v = np.zeros(8, np.float32)
    with pytest.raises(DslCompileError, match=r"cannot read the source of 't'") as t_err:
        ns["t"].tile_ir(v, tile.partition(v.copy(), (8,)))
    with pytest.raises(DslCompileError, match=r"cannot read the source of 's'") as s_err:
        ns["s"].build(v, v.copy())
    assert t_err.value.hint == s_err.value.hint and "defined in a .py file" in t_err.value.hint
