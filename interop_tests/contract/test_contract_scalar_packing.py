"""Scalars are packed into kernel-parameter bytes bit-exactly like NumPy / ml_dtypes would store them."""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bridge
from bridge import _native

ml_dtypes = pytest.importorskip("ml_dtypes")

INT_TYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
             "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}


@pytest.mark.parametrize("name,np_type", sorted(INT_TYPES.items()))
def test_integers_pack_like_numpy_at_the_range_ends(name, np_type, rng):
    info = np.iinfo(np_type)
    values = [int(info.min), int(info.max), 0, 1] + [int(v) for v in rng.integers(info.min, info.max, 50,
                                                                                    dtype=np_type, endpoint=True)]
    for v in values:
        assert _native.pack_scalar(v, name) == np_type(v).tobytes()
        assert _native.pack_scalar(np_type(v), name) == np_type(v).tobytes()
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(int(info.max) + 1, name)
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(int(info.min) - 1, name)


def test_bool_packs_to_one_byte():
    assert _native.pack_scalar(True, "bool") == b"\x01"
    assert _native.pack_scalar(np.bool_(False), "bool") == b"\x00"


@settings(max_examples=500, deadline=None)
@given(x=st.floats(allow_nan=False, width=64))
def test_float_values_pack_like_numpy(x):
    assert _native.pack_scalar(x, "f64") == np.float64(x).tobytes()
    if abs(x) < 3.4028235677973366e38:
        assert _native.pack_scalar(x, "f32") == np.float32(x).tobytes()
    if abs(x) < 65520.0:
        assert _native.pack_scalar(x, "f16") == np.float16(x).tobytes()


def f16_cases(rng):
    """Random values across the f16 range, incl. subnormals and exact ties between neighbours."""
    mags = np.exp2(rng.uniform(-26, 15.9, 3000)) * rng.choice([-1.0, 1.0], 3000)
    halves = np.arange(1, 0x7C00, 97, dtype=np.uint16).view(np.float16).astype(np.float64)
    ties = (halves[:-1] + np.nextafter(halves[:-1].astype(np.float16), np.float16(np.inf)).astype(np.float64)) / 2
    return [float(v) for v in np.concatenate([mags, halves, ties, [0.0, -0.0, 65504.0, 65519.99, 2.0**-24, 2.0**-25,
                                                                  3 * 2.0**-26, float("inf"), float("-inf")]])]


def test_f16_rounding_to_nearest_even_is_bit_exact(rng):
    for x in f16_cases(rng):
        assert _native.pack_scalar(x, "f16") == np.float16(x).tobytes(), x


def bf16_reference(x: float) -> bytes:
    """Correctly rounded (single rounding, ties to even) bfloat16 of a double, by exact rationals."""
    if math.isinf(x) or x == 0.0:
        return ml_dtypes.bfloat16(x).tobytes()
    lo = ml_dtypes.bfloat16(np.float32(x))        # a neighbour; search the two around x exactly
    cands = {lo.view(np.uint16).item() + d for d in (-2, -1, 0, 1, 2)}
    best = None
    for bits in sorted(cands):
        v = float(np.uint16(bits & 0xFFFF).view(ml_dtypes.bfloat16))
        if math.isnan(v) or math.isinf(v):
            continue
        err = abs(Fraction(v) - Fraction(x))
        key = (err, bits & 1)
        if best is None or key < best[0]:
            best = (key, bits & 0xFFFF)
    return struct.pack("<H", best[1])


def test_bf16_rounding_is_correct_and_matches_ml_dtypes_on_float32_values(rng):
    f32 = rng.standard_normal(3000).astype(np.float32) * np.exp2(rng.integers(-130, 120, 3000)).astype(np.float32)
    for x in f32:
        assert _native.pack_scalar(float(x), "bf16") == ml_dtypes.bfloat16(x).tobytes(), x
    f64 = rng.standard_normal(2000) * np.exp2(rng.integers(-140, 120, 2000).astype(np.float64))
    for x in f64:
        assert _native.pack_scalar(float(x), "bf16") == bf16_reference(float(x)), x


def test_bf16_and_f16_nan_stay_nan():
    for name, t in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        v = np.frombuffer(_native.pack_scalar(float("nan"), name), dtype=t)[0]
        assert np.isnan(np.float32(v))


def test_float_overflow_is_a_range_error_but_rounding_into_range_is_not():
    _native.pack_scalar(65519.0, "f16")                     # rounds to 65504
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(65520.0, "f16")                 # rounds to inf
    _native.pack_scalar(float(np.finfo(np.float32).max), "f32")
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(3.4028235677973366e38, "f32")
    _native.pack_scalar(3.3961e38, "bf16")                  # below the half-ulp threshold: rounds to max
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(3.3962e38, "bf16")
    with pytest.raises(bridge.ScalarRangeError):
        _native.pack_scalar(10**400, "f64")


def test_python_int_for_float_packs_exactly():
    assert _native.pack_scalar(16777217, "f32") == np.float32(16777217).tobytes()
    assert _native.pack_scalar(2**64 - 1, "f32") == np.float32(2**64 - 1).tobytes()
    assert _native.pack_scalar(-7, "f16") == np.float16(-7).tobytes()
    assert _native.pack_scalar(2**64 - 1, "u64") == np.uint64(2**64 - 1).tobytes()


def test_float_given_for_int_is_refused():
    with pytest.raises(bridge.DTypeError) as info:
        _native.pack_scalar(1.0, "i32")
    assert str(info.value) == "pack_scalar: argument 'value' (#0): expected int32 scalar, got float 1.0"
