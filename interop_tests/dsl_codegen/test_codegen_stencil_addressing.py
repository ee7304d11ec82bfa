"""What the 2-D stencil's code costs, so the DSL keeps pace with the CUDA C++ a user would write
(benchmarks/simt_parity.py): the interior write that the enclosing `if` already proves carries no second
test, arrays that `requires=` makes one shape share one row-major offset, and neighbours `u[r - 1, c]`,
`u[r, c + 1]` are that offset plus a constant, not a multiply each."""
from __future__ import annotations

import re

import numpy as np

from dsl import f32, simt
from dsl.backend.ptxas import assemble
from dsl.ir import nodes as N
from dsl.ir.types import F32, INDEX
from interop_tests.dsl_codegen.codegen_kit import (C, R, arr, entry_body, gid, kernel, load, params,
                                                   require_ptxas, store, to_stage)
from interop_tests.kernels_zoo import stencil5


def stencil_ptx(arch: str = "sm_90") -> str:
    u = np.ones((9, 7), np.float32)
    return stencil5.compile(u, np.zeros_like(u), arch=arch).ptx


def test_the_stencil_reads_one_shape_makes_one_multiply_and_no_second_guard(monkeypatch, tmp_path):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    ptx = stencil_ptx()
    body = entry_body(ptx, "stencil5")
    # u: params 0-4 (pointer, shape, strides), out: 5-9. u.shape == out.shape, both C layout: out's
    # extents are never read (its pointer is), so no compare or offset can use them.
    loaded = set(re.findall(r"ld\.param\.\w+\s+%\w+, \[stencil5_param_(\d+)\]", body))
    assert loaded == {"0", "1", "2", "5"}, loaded
    # one 64-bit row offset r * cols + c per path (interior, border), shared by the loads and the store
    assert len(re.findall(r"\b(mul|mad)\.lo\.s64\b", body)) == 2
    assert len(re.findall(r"ld\.global\.nc\.", body)) == 6 and len(re.findall(r"st\.global\.", body)) == 2
    # the interior path tests the stencil condition only: 4 compares (r, c against 0 and extent - 1),
    # the border path adds the guard of out[r, c] (2 compares)
    assert len(re.findall(r"\bsetp\.", body)) == 6
    require_ptxas()
    (usage,), _ = assemble(ptx, "sm_90")
    assert usage.registers <= 18


def neighbours_1d() -> N.Function:
    """out[r, c] = a[r - 1, c] + a[r, 1 + c] on C-layout arrays (hand-built IR, no relation)."""
    a, out = params(("a", arr(F32, ndim=2, layout="C")), ("out", arr(F32, ndim=2, writable=True, layout="C")))
    r, c = N.Var("r", INDEX), N.Var("c", INDEX)
    up = load(a, [N.BinOp("sub", R(r), C(1), INDEX), R(c)])
    right = load(a, [R(r), N.BinOp("add", C(1), R(c), INDEX)])
    return kernel("neighbours", [a, out], [
        N.Assign(r, gid(0, 2)), N.Assign(c, gid(1, 2)),
        store(out, [R(r), R(c)], N.BinOp("add", up, right, F32))])


def test_constant_offsets_are_added_to_one_shared_row_offset():
    ll = str(to_stage(neighbours_1d(), "optimize"))
    # a[r - 1, c] and a[r, c + 1]: one r * a.shape1 multiply; the neighbours are that offset - shape1, + 1
    assert len(re.findall(r"= mul [a-z ]*i64 %a\.shape1\b|= mul [a-z ]*i64 %[.\w]+, %a\.shape1\b", ll)) == 1, ll
    assert re.search(r"= sub [a-z ]*i64 %[.\w]+, %a\.shape1\b", ll), ll
    assert re.search(r"getelementptr i8, ptr %\w+, i64 4\b", ll), ll


@simt.kernel(block=(128, 1, 1), requires=["len(a) == len(out)"])
def shifted_copy(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]


@simt.kernel(block=(128, 1, 1))
def shifted_copy_unrelated(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if i < len(a):
        out[i] = a[i]


def test_an_extent_equal_by_requires_is_read_from_the_first_array(monkeypatch, tmp_path):
    monkeypatch.setenv("KB_CACHE_DIR", str(tmp_path))
    x = np.ones(100, np.float32)
    ptx = shifted_copy.compile(x, np.zeros_like(x), arch="sm_90").ptx
    loaded = set(re.findall(r"\[shifted_copy_param_(\d+)\]", entry_body(ptx, "shifted_copy")))
    assert loaded == {"0", "1", "3"}                        # a.ptr, a.shape0 (the guard's extent), out.ptr
    # without the relation the guard reads out's own extent (param 4)
    ptx = shifted_copy_unrelated.compile(x, np.zeros_like(x), arch="sm_90").ptx
    loaded = set(re.findall(r"\[shifted_copy_unrelated_param_(\d+)\]", entry_body(ptx, "shifted_copy_unrelated")))
    assert {"1", "4"} <= loaded
