"""Aliasing: a writable argument may not overlap another argument unless the pair is declared in-place."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bridge
from contract_support import BASE, arr, contract, desc, run

PAIR = contract([arr("src", ndim=-1), arr("dst", ndim=-1, access="write")], kernel="copy")
PAIR_INPLACE = contract([arr("src", ndim=-1), arr("dst", ndim=-1, access="write")], kernel="copy",
                        inplace=[["dst", "src"]])
READERS = contract([arr("a", ndim=-1), arr("b", ndim=-1)], kernel="readers")


def byte_set(ptr: int, shape, strides, itemsize: int) -> set[int]:
    """Every byte a view touches, by enumeration (the brute-force reference)."""
    out: set[int] = set()
    for idx in itertools.product(*[range(n) for n in shape]):
        start = ptr + sum(i * s for i, s in zip(idx, strides))
        out.update(range(start, start + itemsize))
    return out


def overlaps_itself(shape, strides, itemsize: int) -> bool:
    """Two different elements share a byte, by enumeration (the brute-force reference)."""
    starts = [sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*[range(n) for n in shape])]
    starts.sort()
    return any(b - a < itemsize for a, b in zip(starts, starts[1:]))


def extent(ptr: int, shape, strides, itemsize: int) -> tuple[int, int]:
    touched = byte_set(ptr, shape, strides, itemsize)
    return (min(touched), max(touched) + 1) if touched else (ptr, ptr)


views = st.integers(0, 3).flatmap(lambda nd: st.tuples(
    st.integers(0, 96),                                              # offset from BASE in bytes (4-aligned below)
    st.lists(st.integers(0, 4), min_size=nd, max_size=nd),            # shape
    st.lists(st.integers(-24, 24), min_size=nd, max_size=nd),         # strides in elements (zero/negative too)
))


@settings(max_examples=400, deadline=None)
@given(a=views, b=views)
def test_refusal_matches_extent_overlap_and_covers_every_byte_overlap(a, b):
    (oa, sa, ta), (ob, sb, tb) = a, b
    pa, pb = BASE + 4096 + 4 * oa, BASE + 4096 + 4 * ob
    ta, tb = [4 * t for t in ta], [4 * t for t in tb]
    src, dst = desc(tuple(sa), ptr=pa, strides=tuple(ta)), desc(tuple(sb), ptr=pb, strides=tuple(tb))
    bytes_a, bytes_b = byte_set(pa, sa, ta, 4), byte_set(pb, sb, tb, 4)
    assert src.extent() == extent(pa, sa, ta, 4) and dst.extent() == extent(pb, sb, tb, 4)
    (la, ha), (lb, hb) = src.extent(), dst.extent()
    extents_overlap = bool(bytes_a) and bool(bytes_b) and la < hb and lb < ha
    dst_self = overlaps_itself(sb, tb, 4)               # the writable one overlapping ITSELF: refused first
    try:
        run(PAIR, [src, dst], grid=1, block=32)
        refused = False
    except bridge.AliasingError as e:
        refused = True
        assert e.arg == 1 and e.arg_name == "dst"
        assert ("share bytes" if dst_self else "argument 'src' (#0)") in str(e)
    assert refused == (extents_overlap or dst_self)
    if bytes_a & bytes_b:
        assert refused                                   # sound: a real byte overlap is never accepted
    if dst_self:                                         # in-place pairs do not excuse a self-overlap
        with pytest.raises(bridge.AliasingError, match="share bytes"):
            run(PAIR_INPLACE, [src, dst], grid=1, block=32)
    else:
        run(PAIR_INPLACE, [src, dst], grid=1, block=32)  # declared in-place: accepted
    run(READERS, [src, dst], grid=1, block=32)           # read-only arguments may overlap (themselves too)


def test_identical_views_are_refused_unless_in_place():
    a = desc((10, 3), ptr=BASE)
    with pytest.raises(bridge.AliasingError):
        run(PAIR, [a, a], grid=1, block=32)
    run(PAIR_INPLACE, [a, a], grid=1, block=32)


def test_zero_size_arrays_never_alias():
    run(PAIR, [desc((0,), ptr=BASE), desc((0, 5), ptr=BASE)], grid=1, block=32)
    run(PAIR, [desc((10,), ptr=BASE), desc((4, 0), ptr=BASE + 8)], grid=1, block=32)


def test_broadcast_zero_stride_view_overlaps_its_source():
    src = desc((16,), ptr=BASE)
    dst = desc((8, 4), ptr=BASE + 32, strides=(0, 4))       # rows all alias bytes [32, 48)
    with pytest.raises(bridge.AliasingError):
        run(PAIR, [src, dst], grid=1, block=32)


def test_adjacent_views_do_not_alias():
    run(PAIR, [desc((16,), ptr=BASE), desc((16,), ptr=BASE + 64)], grid=1, block=32)


def test_two_writable_outputs_overlapping_are_refused_naming_the_first():
    c = contract([arr("x", access="write"), arr("y", access="readwrite")], kernel="two")
    with pytest.raises(bridge.AliasingError) as info:
        run(c, [desc((16,), ptr=BASE), desc((16,), ptr=BASE + 60)], grid=1, block=32)
    assert str(info.value).startswith("two: argument 'x' (#0): expected memory disjoint from argument 'y' (#1)")


def test_in_place_pair_allows_only_that_pair():
    c = contract([arr("a"), arr("b"), arr("out", access="write")], kernel="k3", inplace=[["a", "out"]])
    run(c, [desc((16,), ptr=BASE), desc((16,), ptr=BASE + 4096), desc((16,), ptr=BASE)], grid=1, block=32)
    with pytest.raises(bridge.AliasingError) as info:
        run(c, [desc((16,), ptr=BASE), desc((16,), ptr=BASE), desc((16,), ptr=BASE)], grid=1, block=32)
    assert info.value.arg_name == "out" and "argument 'b' (#1)" in str(info.value)
