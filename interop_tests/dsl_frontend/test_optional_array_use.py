"""An optional SIMT array (`simt.Array[f32] | None`) may be used only where a test proved it is not None
(`if b is not None:`, or after `if b is None: return`); any other use is a compile error with a caret
at the use and a hint. `is None` / `is not None` on it are resolved per specialisation."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import DslCompileError, f32, simt

from interop_tests.dsl_frontend.frontend_helpers import expect_compile_error, f32v


@simt.kernel(block=64, requires=["len(x) == len(out)", "len(b) == len(out)"])
def untested(x: simt.Array[f32], b: simt.Array[f32] | None, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = x[i] + b[i]  # MARK-untested


@simt.kernel(block=64, requires=["len(x) == len(out)"])
def length_untested(x: simt.Array[f32], b: simt.Optional[simt.Array[f32]], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if len(b) > 0:  # MARK-len
        out[i] = x[i]


@simt.kernel(block=64, requires=["len(x) == len(out)", "len(b) == len(out)"])
def wrong_branch(x: simt.Array[f32], b: simt.Array[f32] | None, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if b is None:
        out[i] = b[i]  # MARK-wrong
    else:
        out[i] = x[i]


@simt.kernel(block=64, requires=["len(x) == len(out)", "len(b) == len(out)"])
def after_branch(x: simt.Array[f32], b: simt.Array[f32] | None, out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if b is not None:
        out[i] = b[i]
    out[i] = x[i] + b[i]  # MARK-after


@pytest.mark.parametrize("kernel,marker,token", [
    (untested, "MARK-untested", "b[i]"),
    (length_untested, "MARK-len", "b)"),
    (wrong_branch, "MARK-wrong", "b[i]"),
    (after_branch, "MARK-after", "b[i]"),
])
@pytest.mark.parametrize("given", [True, False])
def test_use_of_an_optional_array_outside_a_test_is_a_compile_error(kernel, marker, token, given):
    x = f32v(64)
    out = np.zeros(64, np.float32)
    e = expect_compile_error(kernel, (x, x if given else None, out), marker, token,
                             "'b' is an optional array (it may be None)", "if b is not None:", file=__file__)
    assert isinstance(e, DslCompileError)


def test_is_not_none_is_a_constant_of_each_specialisation():
    @simt.kernel(block=64, requires=["len(x) == len(out)", "len(b) == len(out)"])
    def pick(x: simt.Array[f32], b: simt.Array[f32] | None, out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        if b is not None:
            out[i] = b[i]
        else:
            out[i] = x[i]
    x, out = f32v(64), np.zeros(64, np.float32)
    assert "if True:bool" in pick.ir(x, x, out)
    assert "if False:bool" in pick.ir(x, None, out)


def test_optional_spellings_are_one_annotation():
    assert simt.Array[f32] | None == simt.Optional[simt.Array[f32]]
    assert (simt.DisjointSlice[f32, 2] | None).optional and not simt.Array[f32].optional
    with pytest.raises(TypeError, match="simt.Optional"):
        simt.Optional[f32]
