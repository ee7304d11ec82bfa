"""simt.extern_device in kernels: declared (not defined) in the PTX, argument checks with clear
compile errors, and a clear refusal in the CPU simulator."""
from __future__ import annotations

import re

import numpy as np
import pytest

from dsl import DslCompileError, f32, i32, simt

ext = simt.extern_device("cpp_mix", "f32(f32, i32)", link=[])


@simt.kernel
def uses_ext(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = ext(x[i], i32(3))


def test_extern_is_declared_not_defined_in_ptx():
    x = np.ones(10, np.float32)
    ptx = uses_ext.ptx(x, x, arch="sm_90")
    assert re.search(r"^\.extern \.func\s+\(\.param \.b32 func_retval0\) cpp_mix$", ptx, re.M)
    assert re.search(r"call\.uni \(retval0\), cpp_mix, \(param0, param1\);", ptx)
    assert not re.search(r"\.visible \.func.*cpp_mix", ptx)

def test_extern_call_with_wrong_arity_is_a_compile_error():
    @simt.kernel
    def bad(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = ext(x[i])

    x = np.ones(10, np.float32)
    with pytest.raises(DslCompileError, match="takes 2 arguments, got 1"):
        bad.ptx(x, x)


def test_extern_call_with_an_array_is_a_compile_error():
    @simt.kernel
    def bad(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = ext(x, i32(1))

    x = np.ones(10, np.float32)
    with pytest.raises(DslCompileError, match="must be a number"):
        bad.ptx(x, x)


def test_extern_cannot_be_simulated():
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    out = np.zeros_like(x)
    with pytest.raises(Exception, match="cpp_mix"):
        uses_ext.simulate(x, out)


def test_extern_called_from_python_is_refused():
    with pytest.raises(RuntimeError, match="only be called from a"):
        ext(1.0, 2)
