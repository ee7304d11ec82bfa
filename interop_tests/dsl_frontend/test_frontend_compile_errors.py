"""Each misuse of the SIMT language is a DslCompileError pinned to file:line:col, with the source line,
a caret under the offending construct and a hint saying what to write instead."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

from dsl import DslCompileError, f32, i32, i64, simt, u8
from interop_tests.dsl_frontend.frontend_helpers import expect_compile_error, f32v

HERE = __file__
CAPTURED = np.ones(4, np.float32)


def helper(x):
    return x + 1


@simt.kernel
def k_try(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    try:  # E01
        out[i] = a[i]
    except IndexError:
        pass


@simt.kernel
def k_with(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with open("x"):  # E02
        pass


@simt.kernel
def k_lambda(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    f = lambda v: v * 2  # E03
    out[i] = a[i]


@simt.kernel
def k_generator(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    g = (a[j] for j in range(3))  # E04


@simt.kernel
def k_class(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    class Local:  # E05
        pass


@simt.kernel
def k_fstring(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    msg = f"value {i}"  # E06


@simt.kernel
def k_unknown(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * undefined_thing  # E07  # noqa: F821


@simt.kernel
def k_mismatch(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    acc = 0
    for j in range(len(a)):
        acc += a[j]  # E08
    out[i] = acc


@simt.kernel
def k_float_index(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[a[i]]  # E09


@simt.kernel
def k_write_array(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    a[i] = 1.0  # E10


@simt.kernel
def k_write_other(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i + 1] = a[i]  # E11


@simt.kernel(domain=2)
def k_rank(a: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, c = simt.thread.index_2d()
    x = a[r]  # E12


@simt.kernel
def k_shared_outside(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    buf = simt.shared.array(64, f32)  # E13


@simt.kernel
def k_returns(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    return a[i]  # E14


@simt.kernel
def k_plain_call(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = helper(a[i])  # E15


@simt.kernel
def k_untested_slot(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i)
    slot.set(a[i])  # E16


@simt.kernel
def k_domain(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    r, c = simt.thread.index_2d()  # E17


@simt.kernel
def k_no_annotation(a: simt.Array[f32], out: simt.DisjointSlice[f32], n):  # E18
    pass


@simt.kernel
def k_python_int(a: simt.Array[f32], out: simt.DisjointSlice[f32], n: int):  # E19
    pass


@simt.kernel
def k_float_builtin(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = float(a[i])  # E20


@simt.kernel
def k_range_value(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    r = range(4)  # E21


@simt.kernel
def k_atomic_safe(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    simt.atomic.add(out, 0, 1.0)  # E22


@simt.kernel
def k_literal_fit(a: simt.Array[u8], out: simt.DisjointSlice[u8]):
    i = simt.thread.index_1d()
    out[i] = a[i] + 300  # E23


@simt.kernel
def k_loop_var(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    for j in range(4):
        j = j + 1  # E24


@simt.kernel
def k_reassign_index(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()  # E25
    i = 3


@simt.kernel
def k_print(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    print(a[0])  # E26


@simt.kernel
def k_negative(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[-1]  # E27


@simt.kernel
def k_list(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    xs = [1, 2, 3]  # E28


@simt.kernel
def k_get_mut_int(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    slot = out.get_mut(i + 0)  # E29


@simt.device
def d_no_return(x: f32) -> f32:  # E30
    if x > 0:
        return x


@simt.kernel
def k_calls_no_return(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = d_no_return(a[i])


@simt.kernel
def k_assert(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    assert len(a) > 0  # E31


@simt.kernel
def k_slice(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    x = a[1:3]  # E32


@simt.kernel
def k_captured_array(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = CAPTURED[0]  # E33


@simt.kernel
def k_calls_kernel(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    k_try(a, out)  # E34


@simt.kernel
def k_string(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    s = "text"  # E35


@simt.kernel
def k_bitwise_float(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] & 1  # E36


@simt.kernel
def k_chunk_break(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    c = simt.thread.chunk_1d(4)
    for k in c:
        out[k] = a[k]
        break  # E37


@simt.kernel
def k_global(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    global CAPTURED  # E38


@simt.kernel
def k_wrong_ndim_index(a: simt.Array[f32], out: simt.DisjointSlice[f32, 2]):
    i = simt.thread.index_1d()
    out[i, i] = a[i]  # E39


@simt.kernel
def k_builtin_sum(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = sum(a)  # E41


@simt.kernel
def k_assign_param(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    a = out  # E40


A, O = f32v(), f32v()
A2 = np.ones((3, 5), np.float32) * 2
U = np.arange(1, 38, dtype=np.uint8)
CASES = [
    # kernel, args, marker, token, words
    (k_try, (A, O), "E01", "try", ["try/except is not supported", "KernelFault"]),
    (k_with, (A, O), "E02", "open", ["only `with simt.unsafe():`"]),
    (k_lambda, (A, O), "E03", "lambda", ["lambda functions are not supported", "@simt.device"]),
    (k_generator, (A, O), "E04", "(a[j]", ["generator expressions", "for i in range"]),
    (k_class, (A, O), "E05", "class", ["classes cannot be defined"]),
    (k_fstring, (A, O), "E06", 'f"', ["f-strings are not supported"]),
    (k_unknown, (A, O), "E07", "undefined_thing", ["unknown name 'undefined_thing'"]),
    (k_mismatch, (A, O), "E08", "acc +=", ["variable 'acc' has type i64", "type f32",
                                          "`acc = f32(0)` or `acc = 0.0`"]),
    (k_float_index, (A, O), "E09", "a[i]]", ["array index must be an integer, got f32", "i64("]),
    (k_write_array, (A, O), "E10", "a[i]", ["write to Array parameter 'a'",
                                           "simt.DisjointSlice[f32]"]),
    (k_write_other, (A, O), "E11", "out[", ["not this thread's ThreadIndex",
                                           "with simt.unsafe():"]),
    (k_rank, (A2, A2.copy()), "E12", "a[r]", ["'a' is 2-D but 1 index was given"]),
    (k_shared_outside, (A, O), "E13", "simt.shared", ["outside `with simt.unsafe():`"]),
    (k_returns, (A, O), "E14", "a[i]", ["a kernel cannot return a value", "DisjointSlice"]),
    (k_plain_call, (A, O), "E15", "helper", ["plain Python function 'helper'",
                                            "decorate 'helper' with @simt.device"]),
    (k_untested_slot, (A, O), "E16", "slot.set", ["may be None", "if slot is not None"]),
    (k_domain, (A, O), "E17", "simt.thread", ["index_2d() in a kernel declared with domain=1",
                                             "domain=2"]),
    (k_no_annotation, (A, O, 3), "E18", "n)", ["parameter 'n' has no type annotation"]),
    (k_python_int, (A, O, 3), "E19", "int)", ["Python type 'int' has no fixed width", "i32"]),
    (k_float_builtin, (A, O), "E20", "float", ["float() has no fixed width", "f32(x)"]),
    (k_range_value, (A, O), "E21", "range", ["range() can only be used as the iterable"]),
    (k_atomic_safe, (A, O), "E22", "simt.atomic", ["other threads may write",
                                                  "with simt.unsafe():"]),
    (k_literal_fit, (U, U.copy()), "E23", "a[i] + 300", ["literal 300 does not fit in u8"]),
    (k_loop_var, (A, O), "E24", "j =", ["loop variable 'j' is assigned inside the loop"]),
    (k_reassign_index, (A, O), "E25", "i =", ["'i' is assigned more than once",
                                             "ThreadIndex"]),
    (k_print, (A, O), "E26", "print", ["print() is not supported"]),
    (k_negative, (A, O), "E27", "-1", ["negative index -1", "len(a) - 1"]),
    (k_list, (A, O), "E28", "[1", ["lists are not supported"]),
    (k_get_mut_int, (A, O), "E29", "i + 0", ["get_mut() needs this thread's 1-D ThreadIndex"]),
    (k_calls_no_return, (A, O), "E30", "def", ["can reach its end without returning",
                                               "return value"]),
    (k_assert, (A, O), "E31", "assert", ["assert is not supported"]),
    (k_slice, (A, O), "E32", "1:3", ["slicing is not supported"]),
    (k_captured_array, (A, O), "E33", "CAPTURED", ["NumPy array captured",
                                                   "pass arrays as kernel arguments"]),
    (k_calls_kernel, (A, O), "E34", "k_try", ["kernel 'k_try' cannot be called from a kernel",
                                             "@simt.device"]),
    (k_string, (A, O), "E35", '"text"', ["strings are not supported"]),
    (k_builtin_sum, (A, O), "E41", "sum", ["the Python builtin 'sum' is not supported",
                                           "write a loop"]),
    (k_bitwise_float, (A, O), "E36", "a[i] & 1", ["bitwise operator on a float"]),
    (k_chunk_break, (A, O), "E37", "break", ["break inside a chunk loop"]),
    (k_global, (A, O), "E38", "global", ["cannot rebind module variables"]),
    (k_wrong_ndim_index, (A, A2.copy()), "E39", "out[", ["2-D but it is written at a 1-D",
                                                        "index_2d"]),
    (k_assign_param, (A, O), "E40", "a =", ["cannot assign to array parameter 'a'"]),
]


@pytest.mark.parametrize("kernel,args,marker,token,words", CASES,
                         ids=[c[2] + "-" + c[0].__name__ for c in CASES])
def test_compile_error_points_at_the_mistake(kernel, args, marker, token, words):
    expect_compile_error(kernel, args, marker, token, *words, file=HERE)


def test_at_least_twenty_distinct_mistakes_are_pinned():
    assert len({c[0].__name__ for c in CASES}) >= 20
    assert len({c[4][0] for c in CASES}) == len(CASES)


def test_compile_error_is_raised_by_ptx_too_without_a_gpu():
    from dsl import DslCompileError
    with pytest.raises(DslCompileError, match="write to Array parameter 'a'"):
        k_write_array.ptx(A, O, arch="sm_80")


def test_requires_naming_an_unknown_parameter_is_reported_at_the_def():
    from dsl import DslCompileError
    with pytest.raises(DslCompileError) as info:
        @simt.kernel(requires=["len(a) == len(zz)"])   # REQ-LINE
        def k_requires(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = a[i]
    e = info.value
    assert "names 'zz', which is not a parameter" in str(e)
    assert "parameters are: a, out" in str(e)
    line = next(k for k in range(1, 5000) if "# REQ-LINE" in linecache.getline(HERE, k))
    assert (e.file, e.line) == (HERE, line)
    assert e.col == linecache.getline(HERE, line).index('"len(a) == len(zz)"') + 1


def test_recursive_device_function_is_an_error():
    from dsl import DslCompileError
    with pytest.raises(DslCompileError, match="recursive call of device function 'd_rec'"):
        k_recursive.ir(A, O)


@simt.device
def d_rec(x: f32) -> f32:
    return d_rec(x - 1.0) if x > 0 else x


@simt.kernel
def k_recursive(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = d_rec(a[i])


def test_intrinsics_outside_kernels_raise_a_clear_error():
    with pytest.raises(RuntimeError, match="only be used inside a @simt.kernel"):
        simt.thread.index_1d()
    with pytest.raises(RuntimeError, match="only be used inside"):
        simt.sqrt(2.0)
    with pytest.raises(TypeError, match="annotation"):
        simt.Array()


def test_kernel_typed_scalar_parameters_check_their_annotation():
    with pytest.raises(TypeError, match="ndim must be 1, 2 or 3"):
        simt.Array[f32, 4]
    assert repr(simt.DisjointSlice[i32, 2]) == "simt.DisjointSlice[dsl.i32, 2]"
    assert i64(3) == np.int64(3)


def test_warp_op_inside_a_guarded_write_is_refused_with_a_hint():
    import numpy as np

    @simt.kernel(block=256)
    def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = simt.warp.sum(a[i])

    x = np.ones(100, np.float32)
    with pytest.raises(DslCompileError) as info:
        k.build(x, x.copy())
    msg = str(info.value)
    assert "simt.warp.sum() inside a guarded DisjointSlice write" in msg
    assert "compute it into a local first" in msg
    assert "out[i] = simt.warp.sum(a[i])" in msg          # the source line is quoted


def test_warp_op_computed_before_the_guarded_write_compiles():
    import numpy as np

    @simt.kernel(block=256)
    def k(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        j = i if i < len(a) else 0
        v = simt.warp.sum(a[j])
        out[i] = v

    x = np.ones(100, np.float32)
    assert k.build(x, x.copy()) is not None
