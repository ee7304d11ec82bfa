"""A table of bad launches: each is refused with its typed error, naming kernel, argument and position."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
from contract_support import BASE, arr, contract, desc, run, sca

SAXPY = contract(
    [arr("x"), arr("y", access="readwrite", layout="C", align=16), sca("a", "f32"), sca("n", "i32"),
     arr("m", ndim=2, layout="F"), sca("flag", "bool"), sca("idx", "u8"), sca("h", "f16")],
    kernel="saxpy", block={"max_threads": 512}, requires=["n <= len(x)", "len(x) == len(y)"],
    grid_from={"arg": "y"})

X, Y, M = BASE, BASE + 0x10000, BASE + 0x20000


def good_args() -> list:
    return [desc((100,), ptr=X), desc((100,), ptr=Y), 2.0, 100, desc((4, 5), ptr=M, strides=(4, 16)), True, 7, 1.5]


def with_arg(pos: int, value) -> list:
    args = good_args()
    args[pos] = value
    return args


# (argument position, replacement value, error class)
BAD = [
    (0, 1.0, bridge.ArgumentKindError),
    (0, "x", bridge.ArgumentKindError),
    (0, None, bridge.ArgumentKindError),
    (2, desc((100,), ptr=BASE + 0x30000), bridge.ArgumentKindError),
    (3, None, bridge.ArgumentKindError),
    (4, True, bridge.ArgumentKindError),
    (0, desc((100,), "f64", ptr=X), bridge.DTypeError),
    (0, desc((100,), "bf16", ptr=X), bridge.DTypeError),
    (1, desc((100,), "i32", ptr=Y), bridge.DTypeError),
    (1, desc((10, 10), "i64", ptr=Y), bridge.DTypeError),
    (4, desc((4, 5), "f16", ptr=M, strides=(2, 8)), bridge.DTypeError),
    (2, True, bridge.DTypeError),
    (2, np.int32(2), bridge.DTypeError),
    (2, 1 + 2j, bridge.DTypeError),
    (2, np.complex64(1), bridge.DTypeError),
    (3, 1.5, bridge.DTypeError),
    (3, np.float32(3), bridge.DTypeError),
    (3, False, bridge.DTypeError),
    (5, 1, bridge.DTypeError),
    (6, np.float64(1), bridge.DTypeError),
    (7, np.uint16(1), bridge.DTypeError),
    (0, desc((10, 10), ptr=X), bridge.NdimError),
    (4, desc((20,), ptr=M), bridge.NdimError),
    (1, desc((), ptr=Y), bridge.NdimError),
    (0, desc((100,), ptr=X, device_type=1), bridge.DeviceMismatchError),
    (0, desc((100,), ptr=X, device_type=3), bridge.DeviceMismatchError),
    (1, desc((100,), ptr=Y, device_id=1), bridge.DeviceMismatchError),
    (4, desc((4, 5), ptr=M, strides=(4, 16), device_type=4), bridge.DeviceMismatchError),
    (1, desc((100,), ptr=Y, strides=(8,)), bridge.LayoutError),
    (1, desc((100,), ptr=Y + 396, strides=(-4,)), bridge.LayoutError),
    (4, desc((4, 5), ptr=M), bridge.LayoutError),
    (1, desc((100,), ptr=Y + 4), bridge.AlignmentError),
    (0, desc((100,), ptr=X + 2), bridge.AlignmentError),
    (1, desc((100,), ptr=Y, readonly=True), bridge.ReadOnlyError),
    (3, 2**31, bridge.ScalarRangeError),
    (3, -2**31 - 1, bridge.ScalarRangeError),
    (3, 2**70, bridge.ScalarRangeError),
    (6, 256, bridge.ScalarRangeError),
    (6, -1, bridge.ScalarRangeError),
    (6, np.int64(300), bridge.ScalarRangeError),
    (7, 70000.0, bridge.ScalarRangeError),
    (7, -1e5, bridge.ScalarRangeError),
    (2, 1e39, bridge.ScalarRangeError),
    (2, np.float64(-1e300), bridge.ScalarRangeError),
    (3, 101, bridge.ShapeRelationError),
    (1, desc((99,), ptr=Y), bridge.ShapeRelationError),
    (1, desc((100,), ptr=X + 16), bridge.AliasingError),
    (1, desc((100,), ptr=X), bridge.AliasingError),
    (1, desc((100,), ptr=M - 32), bridge.AliasingError),
]


def test_good_launch_passes():
    grid, block = run(SAXPY, good_args())
    assert block == (256, 1, 1) and grid == (1, 1, 1)


@pytest.mark.parametrize("pos,value,cls", BAD, ids=[f"{i}-{c.__name__}" for i, (_, _, c) in enumerate(BAD)])
def test_bad_launch_is_refused_naming_the_argument(pos, value, cls):
    assert len(BAD) >= 40
    with pytest.raises(cls) as info:
        run(SAXPY, with_arg(pos, value))
    e = info.value
    name = ["x", "y", "a", "n", "m", "flag", "idx", "h"][pos]
    assert isinstance(e, ValueError) and isinstance(e, bridge.LaunchContractError)
    assert type(e) is cls
    msg = str(e)
    assert msg.startswith(f"saxpy: argument '{name}' (#{pos}): expected "), msg
    assert ", got " in msg
    assert (e.kernel, e.arg, e.arg_name) == ("saxpy", pos, name)


PINNED = [
    (0, desc((100,), "f64", ptr=X), "saxpy: argument 'x' (#0): expected 1-D float32 array, got float64 array of shape (100,)"),
    (2, desc((100,), ptr=BASE + 0x30000),
     "saxpy: argument 'a' (#2): expected float32 scalar, got float32 array of shape (100,)"),
    (3, 1.5, "saxpy: argument 'n' (#3): expected int32 scalar, got float 1.5"),
    (2, np.int32(2), "saxpy: argument 'a' (#2): expected float32 scalar, got numpy.int32 2"),
    (0, "x", "saxpy: argument 'x' (#0): expected 1-D float32 array, got str object"),
    (1, desc((100,), ptr=Y, device_id=1), "saxpy: argument 'y' (#1): expected device memory on cuda:0, got memory on cuda:1"),
    (0, desc((100,), ptr=X, device_type=1), "saxpy: argument 'x' (#0): expected device memory on cuda:0, got host memory (cpu)"),
    (1, desc((100,), ptr=Y, strides=(8,)),
     "saxpy: argument 'y' (#1): expected 1-D C-contiguous float32 array, got float32 array of shape (100,) with byte strides (8,)"),
    (1, desc((100,), ptr=Y + 4), "saxpy: argument 'y' (#1): expected data pointer aligned to 16 bytes, got address 0x7f0000010004"),
    (1, desc((100,), ptr=Y, readonly=True),
     "saxpy: argument 'y' (#1): expected writable array (access 'readwrite'), got a read-only array"),
    (3, 2**31, "saxpy: argument 'n' (#3): expected int32 scalar in [-2147483648, 2147483647], got int 2147483648"),
    (6, -1, "saxpy: argument 'idx' (#6): expected uint8 scalar in [0, 255], got int -1"),
    (7, 70000.0, "saxpy: argument 'h' (#7): expected float16 scalar of magnitude at most 65504 (larger overflows to inf), "
                 "got float 70000.0"),
    (3, 101, "saxpy: argument 'n' (#3): expected n <= len(x), got n = 101, len(x) = 100"),
    (1, desc((99,), ptr=Y), "saxpy: argument 'y' (#1): expected len(x) == len(y), got len(x) = 100, len(y) = 99"),
    (1, desc((100,), ptr=X + 16),
     "saxpy: argument 'y' (#1): expected memory disjoint from argument 'x' (#0) (declare the pair in inplace to allow it), "
     "got overlapping bytes [0x7f0000000010, 0x7f00000001a0) and [0x7f0000000000, 0x7f0000000190)"),
]


@pytest.mark.parametrize("pos,value,text", PINNED)
def test_error_text_is_pinned(pos, value, text):
    with pytest.raises(bridge.LaunchContractError) as info:
        run(SAXPY, with_arg(pos, value))
    assert str(info.value) == text


def test_wrong_argument_count_lists_the_declared_names():
    with pytest.raises(bridge.ArgumentCountError) as info:
        run(SAXPY, good_args()[:3])
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)
    assert str(info.value) == "saxpy: expected 8 arguments (x, y, a, n, m, flag, idx, h), got 3"
    with pytest.raises(bridge.ArgumentCountError):
        run(SAXPY, good_args() + [1])


def test_first_failing_argument_in_position_order_is_reported():
    args = good_args()
    args[4] = desc((20,), ptr=M)                 # ndim error at #4
    args[1] = desc((100,), "f64", ptr=Y)         # dtype error at #1: reported first
    with pytest.raises(bridge.DTypeError) as info:
        run(SAXPY, args)
    assert info.value.arg == 1


def test_scalar_range_is_checked_after_all_per_argument_checks():
    args = good_args()
    args[3] = 2**40                              # range error at #3
    args[4] = desc((20,), ptr=M)                 # ndim error at #4 comes first (per-argument pass)
    with pytest.raises(bridge.NdimError):
        run(SAXPY, args)


def test_relations_are_checked_before_aliasing():
    args = good_args()
    args[1] = desc((99,), ptr=X)                 # overlaps x and breaks len(x) == len(y)
    with pytest.raises(bridge.ShapeRelationError):
        run(SAXPY, args)


def test_accepted_scalar_spellings():
    args = good_args()
    args[2], args[3], args[5], args[6], args[7] = 3, np.int16(5), np.bool_(False), np.uint8(255), np.float16(2.5)
    run(SAXPY, args)
    args[2], args[3], args[6], args[7] = np.float32(1.25), -2**31, 0, 65504.0
    run(SAXPY, args)
    args[2], args[7] = float("inf"), float("nan")   # inf/nan given as such are representable
    run(SAXPY, args)


def test_ml_dtypes_scalars_are_typed_floats():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for _ in range(3):                              # the per-type dtype cache gives the same answer
        args = good_args()
        args[2], args[7] = ml_dtypes.bfloat16(1.5), ml_dtypes.float8_e4m3fn(2.0)
        run(SAXPY, args)
        args[3] = ml_dtypes.bfloat16(3.0)
        with pytest.raises(bridge.DTypeError) as info:
            run(SAXPY, args)
        assert str(info.value) == "saxpy: argument 'n' (#3): expected int32 scalar, got ml_dtypes.bfloat16 3.0"


def test_managed_memory_is_accepted_on_any_device():
    args = good_args()
    args[0] = desc((100,), ptr=X, device_type=13, device_id=3)
    run(SAXPY, args)


def test_view_abi_needs_strides_in_whole_elements():
    c = contract([arr("v", ndim=1, abi="view"), arr("p", ndim=1, abi="pointer")], kernel="abi")
    with pytest.raises(bridge.LayoutError) as info:
        run(c, [desc((10,), ptr=BASE, strides=(6,)), desc((1,), ptr=BASE + 4096)], grid=1, block=32)
    assert str(info.value) == ("abi: argument 'v' (#0): expected 1-D float32 array with strides that are multiples "
                               "of its itemsize, got float32 array of shape (10,) with byte strides (6,)")
    run(c, [desc((10,), ptr=BASE, strides=(8,)), desc((10,), ptr=BASE + 4096, strides=(6,))], grid=1, block=32)


def test_empty_arrays_skip_the_alignment_check():
    args = good_args()
    args[0], args[1], args[3] = desc((0,), ptr=X + 2), desc((0,), ptr=Y + 4), 0
    run(SAXPY, args, grid=1)
