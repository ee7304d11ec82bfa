"""Nothing internal escapes the front end: constant overflows, type-rule failures outside the places
that used to catch them, and expressions nested past Python's recursion limit are DslCompileErrors at
the statement's line (they used to escape as TypeRuleError, OverflowError or RecursionError)."""
from __future__ import annotations

import importlib.util
import linecache

import numpy as np
import pytest

from dsl import DslCompileError, f32, i64, simt

HERE = __file__
X = np.zeros(8, np.float32)


@simt.kernel
def k_aug_bigint(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    j = 9223372036854775808  # L-AUG (j is assigned twice: a variable, so an i64)
    j += 1
    out[i] = f32(j)


@simt.kernel
def k_index_bigint(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[9223372036854775808]  # L-INDEX


@simt.kernel
def k_atomic_bigint(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        simt.atomic.add(out, 9223372036854775808, 1.0)  # L-ATOMIC


@simt.kernel
def k_pow_overflow(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    j = 10 ** 400   # a named constant: converted where it is used
    out[i] = f32(j)  # L-POW


@simt.kernel
def k_inf_to_int(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    j = i64(1e400)  # L-INF
    out[i] = f32(j)


@simt.kernel
def k_static_shared_too_big(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        s = simt.shared.array((1 << 40, 1 << 40), f32)  # L-SHARED
        out[0] = s[0, 0]


@simt.kernel
def k_static_shared_sum_too_big(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        s = simt.shared.array((8192,), f32)
        t = simt.shared.array((8192,), f32)  # L-SHARED2
        out[0] = s[0] + t[0]


def line_of(marker: str) -> int:
    return next(k for k in range(1, 5000) if marker in linecache.getline(HERE, k))


@pytest.mark.parametrize("kernel, marker, text", [
    (k_aug_bigint, "# L-AUG", "literal 9223372036854775808 does not fit in i64"),
    (k_index_bigint, "# L-INDEX", "literal 9223372036854775808 does not fit in i64"),
    (k_atomic_bigint, "# L-ATOMIC", "literal 9223372036854775808 does not fit in i64"),
    (k_pow_overflow, "# L-POW", "cannot evaluate a constant expression here (OverflowError"),
    (k_inf_to_int, "# L-INF", "cannot evaluate a constant expression here (OverflowError"),
    (k_static_shared_too_big, "# L-SHARED", "exceeds the 49152 bytes (48 KiB) a block may declare statically"),
    (k_static_shared_sum_too_big, "# L-SHARED2", "static shared memory of 65536 bytes exceeds the 49152 bytes"),
], ids=lambda v: getattr(v, "__name__", None) if callable(v) else None)
def test_internal_failures_are_compile_errors_at_the_statement(kernel, marker, text):
    with pytest.raises(DslCompileError) as info:
        kernel.build(X, X.copy())
    e = info.value
    assert text in e.message, e.message
    assert (e.file, e.line) == (HERE, line_of(marker))
    assert "hint: " in str(e)


def test_ptx_of_an_over_large_static_shared_array_never_reaches_llvm():
    with pytest.raises(DslCompileError, match="48 KiB"):
        k_static_shared_too_big.ptx(X, X.copy())


def test_an_expression_nested_past_the_recursion_limit_is_a_compile_error(tmp_path):
    src = tmp_path / "deep_kernel.py"
    src.write_text("from dsl import f32, simt\n\n\n@simt.kernel\n"
                   "def deep(a: simt.Array[f32], out: simt.DisjointSlice[f32]):\n"
                   "    i = simt.thread.index_1d()\n"
                   "    x = a[i]" + " + a[i]" * 800 + "\n"
                   "    out[i] = x\n")
    spec = importlib.util.spec_from_file_location("deep_kernel_for_recursion_test", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(DslCompileError) as info:
        mod.deep.build(X, X.copy())
    e = info.value
    assert "nested too deeply" in e.message and (e.file, e.line) == (str(src), 7)
    assert "intermediate locals" in e.hint
