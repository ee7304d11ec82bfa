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
from dsl import f32, i32, simt
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


@pytest.mark.parametrize("dtype,name", [(ml_dtypes.float8_e4m3fn, "f8e4m3fn"), (ml_dtypes.float8_e5m2, "f8e5m2")])
def test_f8_views_are_tma_tensor_maps_of_bytes_and_their_row_pitch_is_checked(dtype, name):
    rows = np.random.default_rng(2).standard_normal((40, 80)).astype(dtype)
    validate(rows, contract(dtype=name, maps=[{"arg": "a", "box": [16, 64], "swizzle": 64}]))
    with pytest.raises(bridge.LayoutError, match=r"multiples of 16 .* byte strides \(72, 1\)"):   # 72-byte rows
        validate(rows[:, :72].copy()[:, :68], contract(dtype=name, maps=[{"arg": "a", "box": [16, 64]}]))


@simt.kernel(block=128)
def _gather_scaled(x: simt.Array[f32], idx: simt.Array[i32], out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    out[i] = x[idx[i]] * s            # a run-time bounds check: the kernel takes a fault record too


def _entry_params(ptx: str) -> int:
    head = ptx[ptx.index(".entry"):]
    return head[:head.index(")")].count(".param")


@pytest.mark.parametrize("case", ["tma_gemm", "cp_async_gemm", "simt_with_fault_record"])
@pytest.mark.slow
def test_param_count_matches_the_compiled_entry(case):
    """The launchers ask the driver for the offsets of exactly Contract.param_count parameters (never
    past the last one): it must be the PTX entry's parameter count, tensor maps and fault record included."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "dsl_tile"))
    import tile_kernels_lib as K
    from dsl import tile
    if case == "simt_with_fault_record":
        args = (np.ones(10, np.float32), np.zeros(10, np.int32), np.zeros(10, np.float32), 2.0)
        ck = _gather_scaled.compile(*args, arch="sm_90")
        c = _native.Contract(ck.contract_json)
        assert c.has_fault_buffer
    else:
        a = np.zeros((256, 256), ml_dtypes.bfloat16)
        ck = K.gemm.compile((a, a, tile.partition(np.zeros((256, 256), np.float32), (128, 128)), 64),
                            "sm_90" if case == "tma_gemm" else "sm_80")
        c = _native.Contract(ck.contract_json)
        assert bool(json.loads(ck.contract_json).get("tensor_maps")) == (case == "tma_gemm")
    assert c.param_count == _entry_params(ck.ptx)
