"""Two SIMT compile-error hints that used to give wrong advice (issue 31) now name what to write:
a NumPy function is told its `simt.`/`math.` spelling (it was "decorate 'sqrt' with @simt.device"), and
a float added to a variable an int literal started is told to start it as a float (it was "convert
explicitly, e.g. i64(...)", which truncates). The advice given is checked to compile and compute."""
from __future__ import annotations

import math

import numpy
import numpy as np
import pytest

from dsl import DslCompileError, f32, f64, i32, simt
from interop_tests.dsl_frontend.frontend_helpers import expect_compile_error, f32v

HERE = __file__
A, O = f32v(), np.zeros(37, np.float32)


@simt.kernel
def k_np_sqrt(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = np.sqrt(a[i])  # N01


@simt.kernel
def k_numpy_exp(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = numpy.exp(a[i])  # N02


@simt.kernel
def k_np_power(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = np.power(a[i], 2.0)  # N03


@simt.kernel
def k_np_sum(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = np.cumsum(a[i])  # N04


@simt.kernel
def k_np_type(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = np.float32(a[i])  # N05


@simt.kernel
def k_int_start(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = 0
    for j in range(len(a)):
        acc += a[j]  # N06
    out[i] = acc


@simt.kernel
def k_int_start_f64(a: simt.Array[f64], out: simt.DisjointSlice[f64]):
    i = simt.thread.index_1d()
    acc = 1
    for j in range(len(a)):
        acc = acc * a[j]  # N07
    out[i] = acc


@simt.kernel
def k_typed_int(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    n = i32(0)
    n += a[i]  # N08
    out[i] = a[i]


OLD_DEVICE_ADVICE = "@simt.device"
OLD_CAST_ADVICE = "convert explicitly"


@pytest.mark.parametrize("kernel, marker, token, spelling", [
    (k_np_sqrt, "N01", "np.sqrt", "simt.sqrt(x) or math.sqrt(x)"),
    (k_numpy_exp, "N02", "numpy.exp", "simt.exp(x) or math.exp(x)"),
    (k_np_power, "N03", "np.power", "simt.pow(x, y) or math.pow(x, y)"),
])
def test_numpy_function_is_told_its_simt_and_math_spelling(kernel, marker, token, spelling):
    e = expect_compile_error(kernel, (A, O), marker, token, "is a NumPy function",
                             "NumPy functions do not run in kernels", file=HERE)
    assert e.hint == f"write {spelling}"
    assert OLD_DEVICE_ADVICE not in str(e)


def test_numpy_function_without_a_math_row_is_told_the_functions_that_exist():
    e = expect_compile_error(k_np_sum, (A, O), "N04", "np.cumsum", "'cumsum' is a NumPy function",
                             file=HERE)
    assert "simt.<name>" in e.hint and " sqrt " in e.hint and " fmax " in e.hint
    assert "docs/dsl.md" in e.hint
    assert OLD_DEVICE_ADVICE not in str(e)


def test_numpy_scalar_type_is_told_the_dsl_cast():
    e = expect_compile_error(k_np_type, (A, O), "N05", "np.float32", "'float32' is a NumPy type",
                             file=HERE)
    assert "f32(x)" in e.hint
    assert "builtin" not in str(e)


def test_float_into_an_int_literal_variable_is_told_to_start_it_as_a_float():
    e = expect_compile_error(k_int_start, (A, O), "N06", "acc +=", "variable 'acc' has type i64",
                             file=HERE)
    assert e.hint.endswith("start it as a float: `acc = f32(0)` or `acc = 0.0`")
    assert OLD_CAST_ADVICE not in str(e) and "i64(" not in str(e)


def test_f64_value_is_told_to_start_with_f64_of_the_same_literal():
    a = np.full(5, 2.0)
    e = expect_compile_error(k_int_start_f64, (a, np.zeros(5)), "N07", "acc =", "has type i64",
                             file=HERE)
    assert e.hint.endswith("start it as a float: `acc = f64(1)`")
    assert OLD_CAST_ADVICE not in str(e)


def test_a_variable_typed_int_on_purpose_keeps_the_explicit_conversion_hint():
    e = expect_compile_error(k_typed_int, (A, O), "N08", "n +=", "variable 'n' has type i32", file=HERE)
    assert e.hint == "convert explicitly, e.g. i32(...)"


# ---------------------------------------------------------------- the advice, followed, compiles
@simt.kernel
def k_followed_sqrt(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = simt.sqrt(a[i]) + math.sqrt(a[i])


@simt.kernel
def k_followed_f32(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = f32(0)
    for j in range(len(a)):
        acc += a[j]
    out[i] = acc


@simt.kernel
def k_followed_float_literal(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = 0.0
    for j in range(len(a)):
        acc += a[j]
    out[i] = acc


def test_the_advised_spellings_compile_and_compute():
    a = np.array([0.25, 1.5, 2.25, 4.0], np.float32)
    out = np.zeros(4, np.float32)
    k_followed_sqrt.simulate(a, out)
    np.testing.assert_allclose(out, [1.0, 2 * 1.5 ** 0.5, 3.0, 4.0], rtol=1e-6)
    for kernel in (k_followed_f32, k_followed_float_literal):
        out[:] = 0
        kernel.simulate(a, out)
        assert out.tolist() == [8.0] * 4          # 0.25 + 1.5 + 2.25 + 4.0, exact in f32


def test_the_hints_keep_the_compile_error_type():
    with pytest.raises(DslCompileError):
        k_np_sqrt.simulate(A, O)
    with pytest.raises(DslCompileError):
        k_int_start.simulate(A, O)
