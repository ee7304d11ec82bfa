"""ONE type-variable binder (dsl/typevars.py `bind_dtype`) for SIMT launch signatures, tile launch
signatures and the SIMT front end's parameter typing: a TypeVar is bound by its first use and then
required of every later one, and each caller reports a mismatch as its own typed error."""
from __future__ import annotations

import typing

import numpy as np
import pytest

import dsl
from bridge.errors import DTypeError
from dsl import f32, simt, tile
from dsl.errors import DslCompileError
from dsl.ir.types import F16, F32, F64, I64, ArrayType
from dsl.typevars import TypeVarMismatch, bind_dtype, typevar_name

T = dsl.TypeVar("T")
U = typing.TypeVar("U")


def test_a_typevar_binds_on_first_use_and_is_required_afterwards():
    b: dict = {}
    assert bind_dtype(b, T, F32) is F32 and b == {T: F32}
    assert bind_dtype(b, T, F32) is F32
    with pytest.raises(TypeVarMismatch) as info:
        bind_dtype(b, T, F16)
    m = info.value
    assert (m.typevar, m.expected, m.given) == (T, F32, F16)
    assert str(m) == "type variable T is bound to f32, given f16" and b == {T: F32}


def test_a_concrete_dtype_must_match_and_none_takes_anything():
    assert bind_dtype({}, F32, F32) is F32
    with pytest.raises(TypeVarMismatch) as info:
        bind_dtype({}, F32, F64)
    assert (info.value.typevar, info.value.expected, info.value.given) == (None, F32, F64)
    assert str(info.value) == "declared f32, given f64"
    assert bind_dtype({}, None, F16) is F16


def test_inexact_binding_lets_a_scalar_value_convert():
    b = {T: F32}
    assert bind_dtype(b, T, I64, exact=False) is F32            # an int value for a bound f32 scalar
    assert bind_dtype(b, F64, I64, exact=False) is F64
    fresh: dict = {}
    assert bind_dtype(fresh, U, I64, exact=False) is I64 and fresh == {U: I64}   # typing.TypeVar too
    assert typevar_name(U) == "U" and typevar_name(T) == "T"


@simt.kernel
def s_pair(a: simt.Array[T], b: simt.Array[T], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = f32(a[i]) + f32(b[i])


@tile.kernel
def t_pair(a: tile.Array[T], b: tile.Array[T], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape).astype(f32) + tile.load(b, t, out.tile_shape).astype(f32))


def test_both_models_refuse_a_second_array_that_disagrees_with_the_binding():
    a32, a16, out = np.zeros(8, np.float32), np.zeros(8, np.float16), np.zeros(8, np.float32)
    with pytest.raises(DTypeError) as s_err:
        s_pair.signature(a32, a16, out)
    assert str(s_err.value) == ("s_pair: argument 'b' (#1): expected float32 array (bound by an earlier argument), "
                                "got float16 array of shape (8,)")
    with pytest.raises(DTypeError) as t_err:
        t_pair.signature((a32, a16, tile.partition(out, (8,))))
    assert str(t_err.value) == "t_pair: argument 'b' (#1): expected f32 array, got float16 array of shape (8,)"
    assert s_pair.signature(a16, a16, out)[0].dtype == F16 and t_pair.signature(
        (a16, a16, tile.partition(out, (8,))))[0].dtype == F16


def test_the_front_end_reports_a_signature_that_breaks_a_binding_at_the_parameter():
    bad = [ArrayType(F32, 1, False), ArrayType(F16, 1, False), ArrayType(F32, 1, True)]
    from dsl.frontend import build_ir
    with pytest.raises(DslCompileError) as info:
        build_ir(s_pair.pyfunc, bad, s_pair.options)
    assert info.value.message == "type variable T is f32 from an earlier parameter but 'b' gives f16"
    assert info.value.source_line.strip().startswith("def s_pair(") and info.value.col == \
        info.value.source_line.index("b: simt.Array[T]") + 1
    concrete = [ArrayType(F32, 1, False), ArrayType(F32, 1, False), ArrayType(F64, 1, True)]
    with pytest.raises(DslCompileError, match=r"parameter 'out' is declared with dtype f32 but the signature "
                                              r"gives f64"):
        build_ir(s_pair.pyfunc, concrete, s_pair.options)
