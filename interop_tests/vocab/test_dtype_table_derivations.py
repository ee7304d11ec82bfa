"""The DSL's element types are derived from the one dtype table (bridge/dtypes.py): the typed IR's
scalar types, the public `dsl` types, NumPy maps of both simulators, the AOT header's C types and
kb::DType enumerators, unsafe_launch's scalar maps, and the other name maps agree with its rows."""
from __future__ import annotations

import ctypes
import pickle
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dsl
from bridge import dtypes
from bridge.kernel import _loose_arg
from dsl import types as dt
from dsl.ir import types as irt

ROOT = Path(__file__).resolve().parents[2]
KERNEL = dtypes.kernel_rows()
EXPECTED_KERNEL_NAMES = ("bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16",
                         "f32", "f64", "f8e4m3fn", "f8e5m2")


def test_the_kernel_rows_are_the_dsl_element_types():
    assert dtypes.KERNEL_NAMES == EXPECTED_KERNEL_NAMES
    assert not any(dtypes.TABLE[n].kernel for n in ("c64", "c128", "f8e4m3fnuz", "f8e4m3", "f4e2m1fn"))


@pytest.mark.parametrize("row", KERNEL, ids=lambda r: r.name)
def test_ir_scalar_types_come_from_the_table(row):
    t = irt.SCALARS[row.name]
    assert (t.name, t.kind, t.bits) == (row.name, row.kind, 1 if row.name == "bool" else row.bits)
    assert t.itemsize == row.itemsize
    assert list(irt.SCALARS) == list(dtypes.KERNEL_NAMES)
    assert (irt.F32, irt.BF16, irt.BOOL, irt.U64) == tuple(irt.SCALARS[n] for n in ("f32", "bf16", "bool", "u64"))


@pytest.mark.parametrize("row", KERNEL, ids=lambda r: r.name)
def test_public_dsl_types_come_from_the_table(row):
    public = "boolean" if row.name == "bool" else row.name
    obj = getattr(dsl, public)
    assert obj is dt.BY_NAME[public] and obj.ir is irt.SCALARS[row.name] and public in dsl.__all__
    assert obj.numpy_dtype == dtypes.to_numpy(row.name)
    assert dt.ir_scalar_from_dtype(dtypes.to_numpy(row.name)) is irt.SCALARS[row.name]
    assert dt.ir_scalar_from_dtype(row.long_name) is irt.SCALARS[row.name]
    assert pickle.loads(pickle.dumps(obj)) is obj            # `boolean` pickled as "bool" before
    assert {t.name for t in dt.ALL} == set(dtypes.KERNEL_NAMES)


@pytest.mark.parametrize("row", KERNEL, ids=lambda r: r.name)
def test_host_numpy_maps_come_from_the_table(row):
    from dsl.sim import arith
    from dsl.tile import types as tt
    t = irt.SCALARS[row.name]
    npdt = dtypes.to_numpy(row.name)
    assert arith.np_dtype(t) == npdt and arith.ir_name_of(npdt) == row.name
    assert tt.np_dtype(t) == npdt and tt.scalar_of_numpy(npdt) is t
    assert tt.as_scalar_type(row.long_name) is t and tt.as_scalar_type(row.name) is t
    assert npdt.kind == {"bool": "b", "int": "i", "uint": "u", "float": "f"}[row.kind] or row.extended


def test_tile_dtype_helpers_keep_their_edge_cases():
    from dsl.tile import types as tt
    assert tt.scalar_of_numpy(np.dtype(">f4")) is irt.F32          # byte order is the intake's business
    assert tt.scalar_of_numpy(np.complex64) is None and tt.scalar_of_numpy(ml_dtypes.float8_e5m2fnuz) is None
    assert tt.scalar_of_numpy(ml_dtypes.float8_e4m3fn) is irt.F8E4M3 and tt.as_scalar_type("float8_e5m2") is irt.F8E5M2
    assert tt.as_scalar_type(float) is irt.F32 and tt.as_scalar_type(int) is irt.I32
    assert tt.as_scalar_type("half") is irt.F16 and tt.as_scalar_type("nonsense") is None


def test_aot_header_c_types_and_enumerators_come_from_the_table():
    from dsl import aot_header
    assert aot_header.C_TYPES == {"bool": "bool", "i8": "int8_t", "i16": "int16_t", "i32": "int32_t",
                                  "i64": "int64_t", "u8": "uint8_t", "u16": "uint16_t", "u32": "uint32_t",
                                  "u64": "uint64_t", "f16": "uint16_t", "bf16": "uint16_t", "f32": "float",
                                  "f64": "double", "f8e4m3fn": "uint8_t", "f8e5m2": "uint8_t"}
    header = (ROOT / "cpp/include/kernelbridge/array_view.hpp").read_text()
    enum = re.search(r"enum class DType : uint8_t \{(.*?)\};", header, re.S).group(1)
    enumerators = set(re.findall(r"\b(\w+)\b", re.sub(r"//[^\n]*", "", enum)))
    for name, kb in aot_header.KB_DTYPES.items():
        assert kb == dtypes.TABLE[name].cpp_enum and kb in enumerators, name


@pytest.mark.parametrize("row", [r for r in KERNEL if r.name not in ("f16", "bf16", "f8e4m3fn", "f8e5m2")],
                         ids=lambda r: r.name)
def test_unsafe_launch_scalars_come_from_the_table(row):
    ctype = np.ctypeslib.as_ctypes_type(dtypes.to_numpy(row.name))
    spec, value = _loose_arg(0, ctype(1))
    assert spec == {"name": "arg0", "kind": "scalar", "dtype": row.name} and value == 1
    spec, _ = _loose_arg(0, dtypes.to_numpy(row.name).type(1))
    assert spec["dtype"] == row.name
    assert {"i32": ctypes.c_int32, "f64": ctypes.c_double}.get(row.name, ctype) is ctype


def test_unsafe_launch_takes_16_and_8_bit_floats_as_numpy_scalars_only_and_refuses_complex():
    assert _loose_arg(1, np.float16(1))[0]["dtype"] == "f16"
    assert _loose_arg(1, ml_dtypes.bfloat16(1))[0]["dtype"] == "bf16"
    assert _loose_arg(1, ml_dtypes.float8_e4m3fn(1))[0]["dtype"] == "f8e4m3fn"
    assert _loose_arg(1, ml_dtypes.float8_e5m2(1))[0]["dtype"] == "f8e5m2"
    with pytest.raises(TypeError, match=r"argument #2: NumPy scalars of dtype complex64 cannot be passed"):
        _loose_arg(1, np.complex64(1))


def test_other_name_maps_come_from_the_table():
    from bridge.testing import _solve
    from dsl import port
    from dsl.integrations import _plan
    from dsl.simt import signature
    assert _plan.LONG == {r.name: r.long_name for r in KERNEL} and signature._LONG == _plan.LONG
    assert port.DSL_TYPES == {r.name: "boolean" if r.name == "bool" else r.name for r in KERNEL}
    for name, (lo, hi) in _solve._INT_RANGE.items():
        info = np.iinfo(dtypes.to_numpy(name)) if name != "bool" else None
        assert (lo, hi) == ((info.min, info.max) if info else (0, 1)), name
    assert set(_solve._INT_RANGE) == {r.name for r in KERNEL if r.kind != "float"}
