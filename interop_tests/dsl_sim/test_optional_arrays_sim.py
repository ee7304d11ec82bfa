"""SIMT optional arrays (`simt.Array[f32] | None`, `simt.Optional[...]`): None selects its own
specialisation (`bias is not None` is False there; a null pointer and zero extents reach the kernel),
the contract declares the argument optional, and the simulator agrees with NumPy float64 for None and
for a given array. Refusals leave a poisoned output unchanged; GPU twins launch for real."""
from __future__ import annotations

import numpy as np
import pytest

import bridge
import dsl
from dsl import f32, simt

POISON = -7.0
N = 1000
T = dsl.TypeVar("T")


@simt.kernel(block=128, requires=["len(x) == len(out)", "len(bias) == len(out)"])
def affine(x: simt.Array[f32], bias: simt.Array[f32] | None, out: simt.DisjointSlice[f32], s: f32):
    i = simt.thread.index_1d()
    if bias is not None:
        out[i] = x[i] * s + bias[i]
    else:
        out[i] = x[i] * s


@simt.kernel(block=128, requires=["len(x) == len(out)", "len(bias) == len(out)"])
def shifted(x: simt.Array[f32], bias: simt.Optional[simt.Array[f32]], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    if bias is None:
        return
    out[i] = x[i] - bias[i]


@simt.kernel(block=128, requires=["len(x) == len(out)", "len(extra) == len(out)"])
def maybe_twice(x: simt.Array[T], out: simt.DisjointSlice[T], extra: simt.DisjointSlice[T] | None):
    i = simt.thread.index_1d()
    out[i] = x[i]
    if extra is not None:
        extra[i] = x[i] + x[i]


def _inputs():
    rng = np.random.default_rng(7)
    return rng.standard_normal(N).astype(np.float32), rng.standard_normal(N).astype(np.float32)


def test_simulated_affine_with_a_bias_matches_numpy_float64():
    x, b = _inputs()
    out = np.full(N, POISON, np.float32)
    affine.simulate(x, b, out, 1.5)
    np.testing.assert_allclose(out, x.astype(np.float64) * 1.5 + b.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_simulated_affine_without_a_bias_matches_numpy_float64():
    x, _ = _inputs()
    out = np.full(N, POISON, np.float32)
    affine.simulate(x, None, out, 1.5)
    np.testing.assert_allclose(out, x.astype(np.float64) * 1.5, rtol=1e-6, atol=1e-6)


def test_none_and_an_array_select_two_specialisations_with_one_contract_shape():
    x, b = _inputs()
    out = np.zeros(N, np.float32)
    with_bias, without = affine.build(x, b, out, 1.0), affine.build(x, None, out, 1.0)
    assert with_bias is not without
    assert with_bias.params[1].type.optional and not with_bias.params[1].type.absent
    assert without.params[1].type.absent
    for args in ((x, b, out, 1.0), (x, None, out, 1.0)):
        spec = affine.contract(*args).native().args[1]
        assert spec["name"] == "bias" and spec["optional"] is True


def test_early_return_on_none_makes_the_rest_of_the_kernel_a_tested_region():
    x, b = _inputs()
    out = np.full(N, POISON, np.float32)
    shifted.simulate(x, None, out)
    np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))      # returned before any write
    shifted.simulate(x, b, out)
    np.testing.assert_allclose(out, x.astype(np.float64) - b.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_an_optional_output_is_written_only_when_given_and_its_dtype_binds_from_others():
    x = np.arange(N, dtype=np.float64)
    out, extra = np.full(N, POISON), np.full(N, POISON)
    maybe_twice.simulate(x, out, None)
    np.testing.assert_array_equal(out, x)
    maybe_twice.simulate(x, out, extra)
    np.testing.assert_array_equal(extra, 2.0 * x)


def test_relation_naming_a_given_optional_array_is_checked_and_nothing_is_written():
    x, _ = _inputs()
    out = np.full(N, POISON, np.float32)
    with pytest.raises(bridge.ShapeRelationError, match=r"affine: argument 'out' \(#2\): expected len\(bias\) == "
                                                        r"len\(out\), got len\(bias\) = 10, len\(out\) = 1000"):
        affine.simulate(x, np.ones(10, np.float32), out, 1.0)
    np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))


def test_none_for_a_required_array_is_refused_naming_it_and_nothing_is_written():
    _, b = _inputs()
    out = np.full(N, POISON, np.float32)
    with pytest.raises(bridge.ArgumentKindError) as info:
        affine.simulate(None, b, out, 1.0)
    assert info.value.arg_name == "x" and "got None" in str(info.value)
    np.testing.assert_array_equal(out, np.full(N, POISON, np.float32))


def test_none_for_an_optional_array_whose_dtype_nothing_binds_is_a_dtype_error():
    @simt.kernel(block=32)
    def lonely(out: simt.DisjointSlice[f32], b: simt.Array[T] | None):
        i = simt.thread.index_1d()
        out[i] = f32(0.0)
    with pytest.raises(bridge.DTypeError, match=r"lonely: argument 'b' \(#1\): got None, and no other argument "
                                                r"binds its dtype"):
        lonely.simulate(np.zeros(4, np.float32), None)


def test_a_grid_is_not_derived_from_an_optional_output():
    @simt.kernel(block=32)
    def only_optional(out: simt.DisjointSlice[f32] | None):
        i = simt.thread.index_1d()
        if out is not None:
            out[i] = f32(1.0)
    buf = np.full(64, POISON, np.float32)
    with pytest.raises(bridge.GridSizeError, match="an explicit grid"):
        only_optional.simulate(buf)
    np.testing.assert_array_equal(buf, np.full(64, POISON, np.float32))
    only_optional.simulate(buf, grid=2)
    np.testing.assert_array_equal(buf, np.ones(64, np.float32))
    only_optional.simulate(None, grid=2)


@pytest.mark.gpu
def test_gpu_affine_with_and_without_a_bias_matches_numpy_float64():
    x, b = _inputs()
    dx, db = bridge.from_host(x), bridge.from_host(b)
    out = bridge.from_host(np.full(N, POISON, np.float32))
    affine(dx, db, out, 1.5)
    np.testing.assert_allclose(out.to_host(), x.astype(np.float64) * 1.5 + b, rtol=1e-6, atol=1e-6)
    affine(dx, None, out, 1.5)
    np.testing.assert_allclose(out.to_host(), x.astype(np.float64) * 1.5, rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_gpu_refusals_leave_the_poisoned_output_unchanged():
    x, _ = _inputs()
    out = bridge.from_host(np.full(N, POISON, np.float32))
    with pytest.raises(bridge.ArgumentKindError, match="got None"):
        affine(None, bridge.from_host(x), out, 1.0)
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(bias\) = 10"):
        affine(bridge.from_host(x), bridge.from_host(np.ones(10, np.float32)), out, 1.0)
    np.testing.assert_array_equal(out.to_host(), np.full(N, POISON, np.float32))
