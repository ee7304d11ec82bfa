"""A writable argument that overlaps ITSELF (zero or interleaved strides) is refused with AliasingError.

Every thread of a DisjointSlice kernel would otherwise write bytes another thread writes. The
validator decides it exactly (fast sufficient test, then a bounded search) and says which two
elements share bytes; read-only broadcasts (zero strides) stay legal.
"""
from __future__ import annotations

import itertools
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bridge

from contract_support import BASE, arr, contract, desc, run

ITEMSIZE = {"u8": 1, "i16": 2, "f32": 4, "f64": 8}


def out_contract(ndim: int, dtype: str = "f32", access: str = "write", **extra):
    return contract([arr("src", dtype=dtype, ndim=ndim), arr("out", dtype=dtype, ndim=ndim, access=access)],
                    kernel="fill", **extra)


def offsets(shape, strides):
    return {idx: sum(i * s for i, s in zip(idx, strides)) for idx in itertools.product(*[range(n) for n in shape])}


def brute_force_overlap(shape, strides, itemsize: int) -> bool:
    """Two different elements share a byte (enumeration: the reference the validator must match)."""
    starts = sorted(offsets(shape, strides).values())
    return any(b - a < itemsize for a, b in zip(starts, starts[1:]))


def crt_strides(primes, itemsize: int):
    """Strides itemsize * Q / q_i (Q = product of the primes): no two elements of extents q_i collide
    (mod q_j, sum x_i Q/q_i = 0 forces x_j = 0), yet no stride exceeds the span of the others, so only
    the exact search can tell."""
    q = 1
    for p in primes:
        q *= p
    return [itemsize * q // p for p in primes]


def test_zero_stride_writable_argument_is_refused_naming_it_with_shape_and_strides():
    src = desc((4,), ptr=BASE + 4096)
    with pytest.raises(bridge.AliasingError) as info:
        run(out_contract(1), [src, desc((4,), strides=(0,))], grid=1, block=32)
    e = info.value
    assert (e.kernel, e.arg, e.arg_name) == ("fill", 1, "out")
    assert str(e) == ("fill: argument 'out' (#1): expected a writable array whose elements do not overlap each "
                      "other, got float32 array of shape (4,) with byte strides (0,), whose elements (0,) and (1,) "
                      "share bytes")


def test_interleaved_strides_are_refused_with_two_elements_that_really_share_bytes():
    shape, strides = (3, 2), (4, 8)          # element (2, 0) starts at 8, element (0, 1) too
    with pytest.raises(bridge.AliasingError, match=r"shape \(3, 2\) with byte strides \(4, 8\), whose elements "
                                                   r"\(0, 1\) and \(2, 0\) share bytes"):
        run(out_contract(2), [desc((3, 2), ptr=BASE + 4096), desc(shape, strides=strides)], grid=1, block=32)


def test_overlap_of_partial_bytes_counts_too():
    # byte strides that are not multiples of the itemsize: elements 0 and 1 share 2 of their 4 bytes
    with pytest.raises(bridge.AliasingError, match="share bytes"):
        run(out_contract(1), [desc((2,), ptr=BASE + 4096), desc((2,), strides=(2,))], grid=1, block=32)


def test_disjoint_interleaved_layout_is_accepted_after_the_exact_search():
    # (12, 16) with itemsize 4: the larger stride is below the other axis' span + itemsize (fast test fails),
    # but no two of the 9 elements share a byte
    assert not brute_force_overlap((3, 3), (12, 16), 4)
    run(out_contract(2), [desc((3, 3), ptr=BASE + 4096), desc((3, 3), strides=(12, 16))], grid=1, block=32)
    strides = crt_strides((5, 7, 11), 4)
    assert not brute_force_overlap((5, 7, 11), strides, 4)
    run(out_contract(3), [desc((5, 7, 11), ptr=BASE + (1 << 24)), desc((5, 7, 11), strides=tuple(strides))],
        grid=1, block=32)


def test_large_disjoint_layout_is_decided_exactly_within_the_bound():
    primes = (101, 103, 107)                  # 1.1 million elements: the search, not enumeration, proves it
    run(out_contract(3, "u8"), [desc(primes, "u8", ptr=BASE + (1 << 36)),
                                desc(primes, "u8", strides=tuple(crt_strides(primes, 1)))], grid=1, block=32)


def test_search_that_runs_out_refuses_saying_overlap_could_not_be_ruled_out():
    primes = (101, 103, 107, 109)             # disjoint, but beyond the search bound: refused, and said so
    strides = tuple(crt_strides(primes, 1))
    with pytest.raises(bridge.AliasingError) as info:
        run(out_contract(4, "u8"), [desc(primes, "u8", ptr=BASE + (1 << 40)), desc(primes, "u8", strides=strides)],
            grid=1, block=32)
    assert info.value.arg_name == "out"
    assert str(info.value).endswith(f"got uint8 array of shape {primes} with byte strides {strides}, for which "
                                    "overlap could not be ruled out within the search bound")


def test_read_only_broadcast_with_zero_strides_stays_legal():
    c = contract([arr("a", ndim=2), arr("out", ndim=2, access="write")], kernel="bcast")
    run(c, [desc((64, 64), strides=(0, 0)), desc((64, 64), ptr=BASE + (1 << 20))], grid=1, block=32)
    run(c, [desc((64, 64), strides=(0, 4)), desc((64, 64), ptr=BASE + (1 << 20))], grid=1, block=32)


@pytest.mark.parametrize("access", ["write", "readwrite"])
def test_every_writable_access_is_checked(access):
    with pytest.raises(bridge.AliasingError, match="share bytes"):
        run(out_contract(1, access=access), [desc((8,), ptr=BASE + 4096), desc((8,), strides=(0,))],
            grid=1, block=32)


def test_single_element_and_empty_writable_arrays_with_zero_strides_are_accepted():
    run(out_contract(1), [desc((1,), ptr=BASE + 4096), desc((1,), strides=(0,))], grid=1, block=32)
    run(out_contract(2), [desc((0, 5), ptr=BASE + 4096), desc((0, 5), strides=(0, 0))], grid=1, block=32)
    run(out_contract(2), [desc((1, 5), ptr=BASE + 4096), desc((1, 5), strides=(0, 4))], grid=1, block=32)


def test_an_inplace_pair_does_not_excuse_a_self_overlap():
    c = out_contract(1, inplace=[["src", "out"]])
    with pytest.raises(bridge.AliasingError, match="share bytes"):
        run(c, [desc((8,)), desc((8,), strides=(0,))], grid=1, block=32)


def test_self_overlap_is_checked_before_overlap_with_other_arguments():
    with pytest.raises(bridge.AliasingError, match="share bytes"):   # overlaps 'src' too, but itself first
        run(out_contract(1), [desc((8,)), desc((8,), strides=(0,))], grid=1, block=32)


views = st.integers(1, 4).flatmap(lambda nd: st.tuples(
    st.sampled_from(sorted(ITEMSIZE)),
    st.lists(st.integers(1, 5), min_size=nd, max_size=nd),            # extents (size > 1 mostly)
    st.lists(st.integers(-40, 40), min_size=nd, max_size=nd),         # byte strides, any sign, any residue
))


@settings(max_examples=600, deadline=None)
@given(v=views)
def test_refusal_matches_brute_force_and_the_named_elements_really_share_bytes(v):
    dtype, shape, strides = v
    item = ITEMSIZE[dtype]
    nd = len(shape)
    c = contract([arr("out", dtype=dtype, ndim=nd, access="write")], kernel="w")
    expect = brute_force_overlap(shape, strides, item)
    try:
        run(c, [desc(tuple(shape), dtype, ptr=BASE + 4096, strides=tuple(strides))], grid=1, block=32)
        refused = False
    except bridge.AliasingError as e:
        refused = True
        m = re.search(r"whose elements (\(.*?\)) and (\(.*?\)) share bytes", str(e))
        assert m, str(e)
        i0, i1 = (tuple(int(x) for x in g.strip("(,)").split(",") if x.strip()) for g in m.groups())
        off = offsets(shape, strides)
        assert i0 != i1 and abs(off[i0] - off[i1]) < item   # a real witness, both indices in range
    assert refused == expect
    read = contract([arr("a", dtype=dtype, ndim=nd)], kernel="r")
    run(read, [desc(tuple(shape), dtype, ptr=BASE + 4096, strides=tuple(strides))], grid=1, block=32)


EXTREMES_HARNESS = r'''
#include "kernelbridge/contract.hpp"
#include <cstdio>

// Every view built from extreme extents, strides and pointers: overflow_reason() decides without UB;
// views it passes have a sane extent, and every self-overlap witness really shares bytes.
int main() {
  const int64_t ext[] = {0, 1, 2, 3, INT64_C(1) << 31, INT64_C(1) << 62, INT64_MAX};
  const int64_t str[] = {INT64_MIN, -(INT64_C(1) << 62), -4, -1, 0, 3, 4, INT64_C(1) << 62, INT64_MAX};
  const uint64_t ptrs[] = {0, UINT64_C(1) << 40, UINT64_MAX - 7};
  const int ne = sizeof ext / sizeof *ext, ns = sizeof str / sizeof *str;
  long refused = 0, passed = 0, overlapping = 0, unknown = 0;
  for (int nd = 1; nd <= 3; ++nd) {
    long combos = 1;
    for (int d = 0; d < nd; ++d) combos *= ne * ns;
    for (uint64_t p : ptrs)
      for (kb::DType t : {kb::DType::u8, kb::DType::f32})
        for (long c = 0; c < combos; ++c) {
          kb::ArrayView v;
          v.ptr = p; v.ndim = nd; v.dtype = t;
          long k = c;
          for (int d = 0; d < nd; ++d) { v.shape[d] = ext[k % ne]; k /= ne; v.strides[d] = str[k % ns]; k /= ns; }
          if (v.overflow_reason()) { ++refused; continue; }
          ++passed;
          uint64_t lo, hi;
          v.extent(lo, hi);
          if (v.size() > 0 && !(lo < hi)) return 3;
          int64_t x[kb::kMaxDims];
          kb::detail::SelfOverlap r = kb::detail::self_overlap(v, x, 256);
          if (r == kb::detail::SelfOverlap::unknown) { ++unknown; continue; }
          if (r != kb::detail::SelfOverlap::overlap) continue;
          ++overlapping;
          __extension__ __int128 diff = 0;
          bool nonzero = false;
          for (int d = 0; d < nd; ++d) {
            if (x[d] <= -v.shape[d] || x[d] >= v.shape[d]) return 4;
            nonzero = nonzero || x[d] != 0;
            diff += static_cast<__int128>(x[d]) * v.strides[d];
          }
          if (!nonzero || diff <= -v.itemsize() || diff >= v.itemsize()) return 5;
        }
  }
  std::printf("%ld %ld %ld %ld\n", refused, passed, overlapping, unknown);
  return 0;
}
'''


@pytest.mark.slow
def test_extreme_views_are_decided_without_undefined_behaviour(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    include = Path(__file__).resolve().parents[2] / "cpp" / "include"
    src, exe = tmp_path / "extremes.cpp", tmp_path / "extremes"
    src.write_text(EXTREMES_HARNESS)
    build = subprocess.run([gxx, "-std=c++17", "-O1", "-g", "-fsanitize=address,undefined",
                            "-fno-sanitize-recover=all", f"-I{include}", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"sanitizer runtime unavailable: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr[-4000:]
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    refused, passed, overlapping, unknown = map(int, res.stdout.split())
    assert refused > 0 and passed > 0 and overlapping > 0   # every branch was exercised
