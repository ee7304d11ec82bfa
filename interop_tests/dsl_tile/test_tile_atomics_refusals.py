"""What tile atomics and `requires=` refuse, each before anything runs: the poisoned outputs are
checked unchanged after every refusal (compile errors in the kernel body, launch-contract errors of
the validator, option errors at the `def`), and `check_compatible` accepts a tile port against a
C++-style contract only because the port states the same relation."""
from __future__ import annotations

import numpy as np
import pytest
from refusal_kit import assert_refused_untouched
import tile_atomics_lib as K

import bridge
from bridge import testing as T
from bridge.contract import ArgSpec, LaunchContract
from dsl import DslCompileError, f16, f32, i8, i32, tile

POISON = -777.0


@tile.kernel
def add_into_i8(x: tile.Partition[i8], acc: tile.Atomic[i8, 1]):
    tile.atomic_add(acc, 0, tile.sum(x.load()).astype(i8))


@tile.kernel
def max_into_f16(x: tile.Partition[f16], acc: tile.Atomic[f16, 1]):
    tile.atomic_max(acc, 0, tile.max(x.load()))


@tile.kernel
def add_into_array(x: tile.Partition[f32], acc: tile.Array[f32, 1]):
    tile.atomic_add(acc, 0, tile.sum(x.load()))


@tile.kernel
def scatter_into_partition(x: tile.Partition[i32], hist: tile.Partition[i32]):
    tile.scatter_add(hist, x.load(), 1)


@tile.kernel
def gather_from_atomic(x: tile.Partition[i32], acc: tile.Atomic[f32, 1], out: tile.Partition[f32]):
    out.store(tile.gather(acc, x.load()))


@tile.kernel
def region_of_wrong_rank(x: tile.Partition[f32, 2], acc: tile.Atomic[f32, 1]):
    tile.atomic_add(acc, 0, x.load())


@tile.kernel
def float_indices(x: tile.Partition[f32], hist: tile.Atomic[i32, 1]):
    tile.scatter_add(hist, x.load(), 1)


def _poisoned(n: int, dtype=np.float32) -> np.ndarray:
    return np.full(n, POISON, dtype)


@pytest.mark.parametrize("kernel, args, needle", [
    (add_into_i8, lambda: (tile.partition(np.ones(100, np.int8), (64,)), _poisoned(1, np.int8)),
     r"atomic add is not available for i8 arrays \(`acc`\); it works on i32, u32"),
    (max_into_f16, lambda: (tile.partition(np.ones(100, np.float16), (64,)), _poisoned(1, np.float16)),
     r"atomic max is not available for f16 arrays"),
    (add_into_array, lambda: (tile.partition(np.ones(100, np.float32), (64,)), _poisoned(1)),
     r"`acc` is a tile.Array, which is read-only; declare it tile.Atomic\[f32, 1\]"),
    (scatter_into_partition, lambda: (tile.partition(np.ones(100, np.int32), (64,)),
                                      tile.partition(_poisoned(100, np.int32), (64,))),
     r"`hist` is a tile.Partition, whose tiles belong to one block each"),
    (gather_from_atomic, lambda: (tile.partition(np.ones(100, np.int32), (64,)), _poisoned(1),
                                  tile.partition(_poisoned(100), (64,))),
     r"`acc` is a tile.Atomic array, which other blocks may be updating"),
    (region_of_wrong_rank, lambda: (tile.partition(np.ones((8, 8), np.float32), (4, 4)), _poisoned(4)),
     r"the value is a tile of shape \(4, 4\), `acc` has 1 axes"),
    (float_indices, lambda: (tile.partition(np.ones(100, np.float32), (64,)), _poisoned(4, np.int32)),
     r"the indices along axis 0 must be an integer tile"),
])
def test_bad_atomics_are_compile_errors_and_the_outputs_stay_poisoned(kernel, args, needle):
    assert_refused_untouched(kernel, args(), needle)


def test_a_read_only_view_for_the_atomic_argument_is_refused_by_the_validator():
    x = np.ones(300, np.float32)
    out = _poisoned(1)
    out.flags.writeable = False
    with pytest.raises(bridge.ReadOnlyError, match=r"'out'.*access 'atomic'"):
        K.global_norm.simulate(tile.partition(x, (128,)), out)
    assert out[0] == POISON


def test_a_violated_relation_is_refused_before_anything_runs():
    x = np.ones(300, np.float32)
    out = _poisoned(2)                            # the kernel requires len(out) == 1
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(out\) == 1"):
        K.global_norm.simulate(tile.partition(x, (128,)), out)
    assert np.all(out == POISON)
    a, y = np.ones(100, np.float32), _poisoned(99)
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(a\) == len\(out\)"):
        K.scaled.simulate(a, tile.partition(y, (64,)), np.float32(2))
    assert np.all(y == POISON)


def test_a_violated_relation_is_refused_by_the_lowered_kernels_contract_too():
    a, y = np.ones(100, np.float32), _poisoned(99)
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(a\) == len\(out\)"):
        K.scaled.simulate_lowered(a, tile.partition(y, (64,)), np.float32(2))
    assert np.all(y == POISON)


def test_requires_that_does_not_parse_or_names_no_parameter_is_refused_at_the_def():
    with pytest.raises(DslCompileError, match=r"requires=: cannot parse"):
        @tile.kernel(requires=["len(a) =="])
        def bad_syntax(a: tile.Array[f32], out: tile.Partition[f32]):
            out.store(tile.load(a, tile.bid(0), out.tile_shape))
    with pytest.raises(DslCompileError, match=r"requires=: 'len\(b\) == len\(out\)' names 'b', which is not a parameter"):
        @tile.kernel(requires="len(b) == len(out)")
        def bad_name(a: tile.Array[f32], out: tile.Partition[f32]):
            out.store(tile.load(a, tile.bid(0), out.tile_shape))
    with pytest.raises(DslCompileError, match=r"names 'bk', which is not a parameter"):
        @tile.kernel(requires=["bk == 4"])                    # a tile.Constant is not a launch argument
        def bad_constant(a: tile.Array[f32], out: tile.Partition[f32], bk: tile.Constant[int]):
            out.store(tile.load(a, tile.bid(0), out.tile_shape))


def _cpp_global_norm(requires=("len(data) == n", "len(out) == 1")) -> LaunchContract:
    """The contract a CUDA C++ global norm states (grid-stride, atomicAdd into out[0])."""
    return LaunchContract("global_norm", [ArgSpec.array("out", "f32", 1, access="readwrite"),
                                          ArgSpec.array("data", "f32", 1), ArgSpec.scalar("n", "i64")],
                          block=256, requires=list(requires))


@tile.kernel
def global_norm_unrelated(data: tile.Partition[f32], out: tile.Atomic[f32, 1]):
    v = data.load()
    tile.atomic_add(out, 0, tile.sum(v * v))


@tile.kernel(requires=["len(out) == 1"])
def global_norm_related(data: tile.Partition[f32], out: tile.Atomic[f32, 1]):
    v = data.load()
    tile.atomic_add(out, 0, tile.sum(v * v))


def test_check_compatible_with_a_cpp_contract_needs_the_tile_kernels_relation():
    ref = _cpp_global_norm()
    T.check_compatible(ref, global_norm_related)
    T.check_compatible(global_norm_related, ref)
    with pytest.raises(T.IncompatibleContractsError, match=r"len\(out\) == 1"):
        T.check_compatible(global_norm_unrelated, ref)
