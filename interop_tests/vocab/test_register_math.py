"""Adding a math function is one row: a fixture registers `cbrt` (libdevice __nv_cbrtf / __nv_cbrt) and
nothing else, and it works from a SIMT kernel and a tile kernel, on both simulators (checked against
NumPy and known values), in PTX (assembled by ptxas) and on the GPU; removing the row removes it
everywhere again. Malformed rows are refused with VocabularyError and register nothing."""
from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np
import pytest

import dsl
from dsl import DslCompileError, simt, tile
from dsl.cache import cache_key
from dsl.compiler import build_options
from dsl.options import KernelOptions
from dsl.tile.api import PY_MATH as TILE_PY_MATH
from dsl.vocab import (FLOAT, PREDICATE, MathIntrinsic, VocabularyError, fcmp, libdevice, llvm,
                       register_math, unregister_math)
from dsl.vocab import docs
from dsl.vocab import math as vocab
from interop_tests.dsl_codegen.codegen_kit import require_ptxas

T = dsl.TypeVar("T")
CBRT = MathIntrinsic("cbrt", 1, FLOAT, libdevice("cbrt"), np.cbrt, "cube root", ("cbrt",))
HAS_MATH_CBRT = hasattr(math, "cbrt")          # Python 3.11+


@pytest.fixture
def cbrt_row():
    row = register_math(CBRT)
    try:
        yield row
    finally:
        unregister_math("cbrt")


@simt.kernel(block=(128, 1, 1))
def simt_cbrt(x: simt.Array[T], out: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    out[i] = simt.cbrt(x[i])


@simt.kernel(block=(128, 1, 1))
def simt_math_cbrt(x: simt.Array[T], out: simt.DisjointSlice[T]):
    i = simt.thread.index_1d()
    out[i] = math.cbrt(x[i])             # the row's Python alias (math.cbrt: Python 3.11+)


@tile.kernel
def tile_cbrt(x: tile.Array[T], out: tile.Partition[T]):
    out.store(tile.cbrt(tile.load(x, tile.bid(0), out.tile_shape)))


@tile.kernel
def tile_math_cbrt(x: tile.Array[T], out: tile.Partition[T]):
    out.store(math.cbrt(tile.load(x, tile.bid(0), out.tile_shape)))


def values(dtype, n: int = 1000) -> np.ndarray:
    rng = np.random.default_rng(11)
    known = [27.0, -8.0, 0.0, -0.0, 1.0, 0.125, np.inf, -np.inf, np.nan]
    return np.concatenate([known, rng.standard_normal(n - len(known)) * 50]).astype(dtype)


def expected(x: np.ndarray) -> np.ndarray:
    """NumPy's cube root in f64, rounded to x's dtype (16-bit floats through f32, like the GPU)."""
    r = np.cbrt(x.astype(np.float64))
    if x.dtype == np.float64:
        return r
    return r.astype(np.float32).astype(x.dtype)


def assert_same(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Same dtype and values (NaN where NaN; compared as f64, which bf16 arrays need)."""
    assert got.dtype == want.dtype, what
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=what)


def kernels(*pairs):
    """The kernels to run: those using math.cbrt only where Python has it."""
    return [k for k, needs_alias in pairs if HAS_MATH_CBRT or not needs_alias]


FLOATS = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16]


def test_registered_row_is_a_name_everywhere_but_not_in_the_shipped_docs(cbrt_row):
    assert simt.cbrt.key == "math.cbrt" and simt.cbrt is simt.cbrt
    assert tile.cbrt.name == "cbrt"
    assert vocab.get("cbrt") is cbrt_row and "cbrt" in vocab.names()
    if HAS_MATH_CBRT:
        assert vocab.python_functions()[math.cbrt] == "cbrt" and TILE_PY_MATH[math.cbrt] == "cbrt"
    assert "cbrt" not in docs.math_table() and "cbrt" not in docs.name_list("simt")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_simt_kernel_simulates_the_registered_row(cbrt_row, dtype):
    x = values(dtype)
    for kernel in kernels((simt_cbrt, False), (simt_math_cbrt, True)):
        out = np.zeros_like(x)
        kernel.simulate(x, out, grid=(8,), block=(128,))
        assert_same(out, expected(x))
        np.testing.assert_allclose(out[:4].astype(np.float64), [3.0, -2.0, 0.0, 0.0], rtol=1e-15, atol=0)  # NumPy 2.4's cbrt(27.0) is 1 ulp over 3
        assert np.signbit(out[3])


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
def test_tile_kernel_simulates_the_registered_row_in_both_simulators(cbrt_row, dtype):
    x = values(dtype)
    for kernel in kernels((tile_cbrt, False), (tile_math_cbrt, True)):
        for method in ("simulate", "simulate_lowered"):
            out = np.zeros_like(x)
            getattr(kernel, method)(x, tile.partition(out, (256,)))
            assert_same(out, expected(x), method)
            np.testing.assert_allclose(out[:4].astype(np.float64), [3.0, -2.0, 0.0, 0.0], rtol=1e-15, atol=0)  # NumPy 2.4's cbrt(27.0) is 1 ulp over 3
            assert np.signbit(out[3])


def _simt_llvm_ir(kernel, dtype) -> str:
    from dsl.backend.codegen import to_llvm_ir
    x = np.zeros(10, dtype)
    return str(to_llvm_ir(kernel.build(x, x), build_options(kernel.options, "sm_90")))


def _tile_llvm_ir(dtype) -> str:
    from dsl.backend.codegen import to_llvm_ir
    from dsl.tile.lower import lower, pick_threads
    args = (np.zeros(10, dtype), tile.partition(np.zeros(10, dtype), (256,)))
    fn = tile_cbrt.tile_ir(*args)
    simt_fn = lower(fn, pick_threads(fn, tile_cbrt.num_warps), tile_cbrt.name, tile_cbrt.facts(args))
    return str(to_llvm_ir(simt_fn, build_options(KernelOptions(boundscheck=False), "sm_90")))


@pytest.mark.parametrize("dtype,symbol", [(np.float32, "__nv_cbrtf"), (np.float64, "__nv_cbrt"),
                                          (np.float16, "__nv_cbrtf")])
def test_registered_row_lowers_to_its_libdevice_function(cbrt_row, dtype, symbol):
    for text in (_simt_llvm_ir(simt_cbrt, dtype), _tile_llvm_ir(dtype)):
        assert re.search(rf'declare\s+\w+\s+@"?{symbol}"?\(', text), text[-2000:]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.slow
def test_registered_row_assembles_with_ptxas(cbrt_row, arch):
    from dsl.backend.ptxas import assemble
    require_ptxas()
    for dtype in (np.float32, np.float64, np.float16):
        x = np.zeros(10, dtype)
        ck = simt_cbrt.compile(x, x, arch=arch)
        assert "__nv_cbrt" not in ck.ptx                # libdevice linked and inlined, nothing extern
        assert [u.kernel for u in assemble(ck.ptx, arch)[0]] == [ck.name]
        ptx = tile_cbrt.ptx(x, tile.partition(np.zeros(10, dtype), (256,)), arch=arch)
        assert ".extern" not in ptx and assemble(ptx, arch)[0]


def test_a_registered_row_changes_the_compile_cache_key():
    before = cache_key(simt_cbrt.pyfunc, [], KernelOptions(), "sm_90")
    register_math(CBRT)
    try:
        during = cache_key(simt_cbrt.pyfunc, [], KernelOptions(), "sm_90")
    finally:
        unregister_math("cbrt")
    assert during != before == cache_key(simt_cbrt.pyfunc, [], KernelOptions(), "sm_90")


def test_removing_the_row_removes_it_everywhere():
    register_math(CBRT)
    held = simt.cbrt                                    # an object taken while the row existed
    unregister_math("cbrt")
    assert vocab.get("cbrt") is None
    with pytest.raises(AttributeError, match="has no attribute 'cbrt'"):
        simt.cbrt  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'cbrt'"):
        tile.cbrt  # noqa: B018

    @simt.kernel(block=(128, 1, 1))
    def uses_removed(x: simt.Array[T], out: simt.DisjointSlice[T]):
        i = simt.thread.index_1d()
        out[i] = held(x[i])

    with pytest.raises(DslCompileError, match=r"simt\.cbrt is no longer a math function"):
        uses_removed.ptx(np.zeros(4, np.float32), np.zeros(4, np.float32))

    @simt.kernel(block=(128, 1, 1))
    def names_removed(x: simt.Array[T], out: simt.DisjointSlice[T]):
        i = simt.thread.index_1d()
        out[i] = simt.cbrt(x[i])

    with pytest.raises(DslCompileError, match=r"has no attribute 'cbrt'"):
        names_removed.ptx(np.zeros(4, np.float32), np.zeros(4, np.float32))

    @tile.kernel
    def tile_names_removed(x: tile.Array[T], out: tile.Partition[T]):
        out.store(tile.cbrt(tile.load(x, tile.bid(0), out.tile_shape)))

    with pytest.raises(dsl.DslCompileError, match=r"has no attribute `cbrt`"):
        tile_names_removed.simulate(np.zeros(4, np.float32), tile.partition(np.zeros(4, np.float32), (4,)))


# ------------------------------------------------------------------------------ refused rows
def _row(**kw) -> MathIntrinsic:
    base = dict(name="cube", arity=1, typing=FLOAT, lowering=libdevice("cbrt"), reference=np.cbrt,
                doc="cube root", python=())
    base.update(kw)
    return MathIntrinsic(**base)


@pytest.mark.parametrize("row,message", [
    (_row(name="sqrt"), r"'sqrt' is already in the table"),
    (_row(name="thread"), r"dsl\.simt\.thread already exists"),
    (_row(name="load"), r"dsl\.tile\.load already exists"),
    (_row(name="not a name"), r"name must be a public Python identifier"),
    (_row(name="_hidden"), r"name must be a public Python identifier"),
    (_row(arity=0), r"arity must be 1, 2 or 3, got 0"),
    (_row(arity=True), r"arity must be 1, 2 or 3, got True"),
    (_row(typing="complex"), r"typing must be one of float, predicate, rounding"),
    (_row(lowering=("libdevice", "cbrt")), r"lowering must be llvm\(name\), libdevice\(name\)"),
    (_row(lowering=llvm("bad-name")), r"lowering must be"),
    (_row(lowering=fcmp("isnan")), r"predicates \(and only predicates\) lower to comparisons"),
    (_row(typing=PREDICATE), r"predicates \(and only predicates\) lower to comparisons"),
    (_row(typing=PREDICATE, lowering=fcmp("issubnormal")), r"fcmp lowerings are isnan and isinf"),
    (_row(reference=None), r"reference must be callable"),
    (_row(python=("sqrt",)), r"math\.sqrt already means 'sqrt'"),
    (_row(python=(3,)), r"Python alias 3 is not a name of the math module"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_malformed_rows_are_refused_and_nothing_is_registered(row, message):
    before = vocab.names()
    with pytest.raises(VocabularyError, match=message):
        register_math(row)
    assert vocab.names() == before and vocab.get("cube") is None


def test_register_takes_only_rows_and_builtin_rows_cannot_be_removed():
    with pytest.raises(VocabularyError, match="expected a MathIntrinsic, got dict"):
        register_math({"name": "cube"})  # type: ignore[arg-type]
    with pytest.raises(VocabularyError, match="'sqrt' is built in and cannot be removed"):
        unregister_math("sqrt")
    with pytest.raises(VocabularyError, match="'cube' is not registered"):
        unregister_math("cube")
    assert vocab.get("sqrt") is not None


# ------------------------------------------------------------------------------ GPU
@pytest.mark.gpu
@pytest.mark.parametrize("dtype,ulps", [(np.float32, 2), (np.float64, 2)])   # libdevice: <= 1 ulp
def test_registered_row_runs_on_the_gpu(cbrt_row, dtype, ulps):
    import bridge
    x = values(dtype, 100_003)
    x[~np.isfinite(x)] = 2.0
    want = np.cbrt(x.astype(np.float64))
    out = bridge.from_host(np.full_like(x, 123.0))
    simt_cbrt(bridge.from_host(x), out)
    tout = bridge.from_host(np.full_like(x, 123.0))
    tile_cbrt(bridge.from_host(x), tile.partition(tout, (256,)))
    for got in (out.to_host(), tout.to_host()):
        err = np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
        assert err.max() <= ulps, err.max()
