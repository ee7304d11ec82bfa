"""TMA tensor maps in launch contracts ("tensor_maps"): parsed strictly, written back only when
present, and checked by the one validator before a launch, so a view TMA cannot describe is a typed
refusal naming the argument (never a failed cuTensorMapEncodeTiled or a device fault)."""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest

import bridge
from bridge import _native
from dsl.sim.validator import host_launcher

MAPS = [{"arg": "a", "box": [16, 64], "swizzle": 128}]


def contract(ndim: int = 2, dtype: str = "bf16", maps=MAPS) -> str:
    return json.dumps({"kernel": "k", "block": {"exact": [128, 1, 1]}, "args": [
        {"name": "a", "kind": "array", "dtype": dtype, "ndim": ndim, "abi": "view" if ndim >= 0 else "pointer"},
        {"name": "out", "kind": "array", "dtype": "f32", "ndim": 1, "access": "write", "abi": "view"}],
        "tensor_maps": maps})


def validate(a, text: str | None = None):
    return host_launcher(text or contract(), "k").validate_only((a, np.ones(4, np.float32)), grid=1)


def bf16(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((rows, cols)).astype(ml_dtypes.bfloat16)


def test_tensor_maps_round_trip_and_are_omitted_when_absent():
    c = _native.Contract(contract())
    assert json.loads(c.to_json())["tensor_maps"] == MAPS
    plain = json.loads(contract())
    del plain["tensor_maps"]
    assert "tensor_maps" not in json.loads(_native.Contract(json.dumps(plain)).to_json())


def test_a_contiguous_aligned_view_is_accepted():
    grid, block, smem, skip = validate(bf16(40, 72))
    assert grid == (1, 1, 1) and block == (128, 1, 1) and not skip


def test_an_empty_array_needs_no_tensor_map():
    validate(bf16(0, 72))


def test_a_strided_innermost_axis_is_refused_naming_the_argument():
    with pytest.raises(bridge.LayoutError) as info:
        validate(bf16(72, 40).T)
    e = info.value
    assert (e.kernel, e.arg, e.arg_name) == ("k", 0, "a")
    assert "contiguous innermost axis (its TMA tensor map, box (16, 64))" in str(e), str(e)


def test_a_row_pitch_that_is_not_a_multiple_of_16_bytes_is_refused():
    with pytest.raises(bridge.LayoutError, match="multiples of 16"):
        validate(bf16(5, 12))                     # rows of 24 bytes


def test_a_base_address_off_16_bytes_is_refused():
    with pytest.raises(bridge.AlignmentError, match=r"aligned to 16 bytes \(its TMA tensor map"):
        validate(bf16(8, 80)[:, 1:])             # row pitch 160 bytes, base 2 bytes in


def test_rank_and_dtype_are_checked_when_the_contract_leaves_them_open():
    with pytest.raises(bridge.NdimError, match="2-d array"):
        validate(np.ones((2, 4, 8), ml_dtypes.bfloat16), contract(ndim=-1))
    with pytest.raises(bridge.DTypeError, match="element type TMA copies"):
        validate(np.ones((8, 64), np.int8), contract(dtype="any", maps=[{"arg": "a", "box": [4, 64]}]))
