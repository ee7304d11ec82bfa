"""The Python dtype table (bridge/dtypes.py) and the C++ one (array_view.hpp, intake.cpp) agree, and every
spelling users may pass is normalised to one contract name."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from bridge import _native, dtypes
from bridge.errors import DTypeError


@pytest.mark.parametrize("name", dtypes.NAMES)
def test_python_and_native_tables_agree(name):
    row = dtypes.TABLE[name]
    assert _native.dtype_to_dlpack(name) == (row.dlpack_code, row.bits)
    assert _native.dtype_from_dlpack(row.dlpack_code, row.bits) == name
    assert dtypes.from_dlpack(row.dlpack_code, row.bits) == name
    assert _native.dtype_itemsize(name) == row.itemsize
    assert _native.dtype_typestr(name) == row.typestr
    if row.typestr:
        assert _native.dtype_from_typestr(row.typestr) == name and dtypes.from_typestr(row.typestr) == name
    assert dtypes.normalize(row.long_name) == name and dtypes.normalize(name) == name


@pytest.mark.parametrize("name", dtypes.NAMES)
def test_numpy_representation(name):
    row = dtypes.TABLE[name]
    npdt = dtypes.to_numpy(name)
    assert npdt.itemsize == row.itemsize
    assert dtypes.normalize(npdt) == name
    if row.typestr:
        assert npdt.str == row.typestr


def test_dlpack_codes_are_the_specs():
    # dlpack.h v1.1: kDLInt=0 kDLUInt=1 kDLFloat=2 kDLBfloat=4 kDLComplex=5 kDLBool=6, kDLFloat8_e4m3fn=10
    assert _native.dtype_to_dlpack("i32") == (0, 32) and _native.dtype_to_dlpack("u8") == (1, 8)
    assert _native.dtype_to_dlpack("f64") == (2, 64) and _native.dtype_to_dlpack("bf16") == (4, 16)
    assert _native.dtype_to_dlpack("c64") == (5, 64) and _native.dtype_to_dlpack("bool") == (6, 8)
    assert _native.dtype_to_dlpack("f8e4m3fn") == (10, 8)
    assert _native.dtype_from_dlpack(2, 32, 4) is None and dtypes.from_dlpack(2, 32, 4) is None
    assert _native.dtype_from_dlpack(9, 8) is None  # float8_e4m3b11fnuz: not supported


@pytest.mark.parametrize("spelling,name", [
    ("float32", "f32"), ("f4", "f32"), (np.float16, "f16"), (np.dtype("int8"), "i8"), (bool, "bool"),
    (float, "f64"), (int, "i64"), (complex, "c128"), (ml_dtypes.bfloat16, "bf16"),
    (np.dtype(ml_dtypes.float8_e5m2), "f8e5m2"), ("torch.bfloat16", "bf16"), ("<c8", "c64"),
    ("half", "f16"), ("uint64", "u64"),
])
def test_normalize_spellings(spelling, name):
    assert dtypes.normalize(spelling) == name


@pytest.mark.parametrize("bad", [">f4", np.dtype(">i4"), "float128", "q9", object(), np.dtype("M8[s]")])
def test_normalize_refuses_by_name(bad):
    with pytest.raises(DTypeError, match=r"dtype: expected one of bool, i8"):
        dtypes.normalize(bad)
