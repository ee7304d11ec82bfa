"""f8e4m3fn and f8e5m2 are DSL element types with storage semantics: arrays of them load and store,
arithmetic on their values happens in f32 (`promote`), and converting to them rounds to nearest even
and saturates to the largest finite value (PTX cvt .satfinite), NaN staying NaN. The simulator is
checked against ml_dtypes on every bit pattern and on random values around every binade; the PTX of
the software conversions assembles for sm_80 and sm_90. What f8 cannot do is refused with typed errors."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from bridge.errors import DTypeError
from dsl import DslCompileError, f8e4m3fn, f8e5m2, f32, simt
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.ir import types as irt

E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
F8_MAX = {E4: 448.0, E5: 57344.0}       # written here, not imported: the formats' largest finite values


@simt.kernel
def widen_scale(a: simt.Array[f8e4m3fn], b: simt.Array[f8e5m2], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0 + b[i]


@simt.kernel
def quantize(x: simt.Array[f32], q4: simt.DisjointSlice[f8e4m3fn], q5: simt.DisjointSlice[f8e5m2]):
    i = simt.thread.index_1d()
    q4[i] = f8e4m3fn(x[i])
    q5[i] = f8e5m2(x[i])


@simt.kernel
def copy_f8(a: simt.Array[f8e4m3fn], out: simt.DisjointSlice[f8e4m3fn]):
    i = simt.thread.index_1d()
    out[i] = f8e4m3fn(-a[i] if a[i] < 0 else a[i])     # -x computes in f32, like every f8 arithmetic


def every_pattern(dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(dtype)


def test_every_f8_bit_pattern_widens_exactly(rng):
    a, b = every_pattern(E4), every_pattern(E5)
    out = np.full(256, 12345.0, np.float32)
    widen_scale.simulate(a, b, out)
    ref = a.astype(np.float32) * 2 + b.astype(np.float32)
    np.testing.assert_array_equal(out, ref)      # NaN where either is NaN, infinities from e5m2


def test_conversion_to_f8_rounds_to_nearest_even_and_saturates(rng):
    x = np.concatenate([rng.standard_normal(4000) * s for s in (1e-6, 1e-3, 0.1, 1, 40, 1e3, 1e5)])
    for dt in (E4, E5):    # exact values and the midpoints between neighbours (the ties)
        v = np.sort(every_pattern(dt).astype(np.float64)[np.isfinite(every_pattern(dt).astype(np.float64))])
        x = np.concatenate([x, v, (v[1:] + v[:-1]) / 2])
    x = np.concatenate([x, [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30]]).astype(np.float32)
    q4, q5 = np.zeros(len(x), E4), np.zeros(len(x), E5)
    quantize.simulate(x, q4, q5)
    for q, dt in ((q4, E4), (q5, E5)):
        ref = np.clip(x, -F8_MAX[dt], F8_MAX[dt]).astype(dt)
        got, want = q.astype(np.float64), ref.astype(np.float64)
        assert np.array_equal(got, want, equal_nan=True)
        assert np.isnan(got[np.isnan(x)]).all() and (np.abs(got[np.isinf(x)]) == F8_MAX[dt]).all()


def test_f8_values_copy_and_negate_through_f32(rng):
    a = every_pattern(E4)
    out = np.zeros(256, E4)
    copy_f8.simulate(a, out)
    ref = np.where(a.astype(np.float32) < 0, -a.astype(np.float32), a.astype(np.float32)).astype(E4)
    assert np.array_equal(out.astype(np.float64), ref.astype(np.float64), equal_nan=True)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_f8_conversions_assemble_without_hardware_cvt(arch):
    """The conversions are integer code, so they run on every arch (sm_80 has no f8 cvt)."""
    x = np.zeros(4, np.float32)
    for kernel, args in ((widen_scale, (np.zeros(4, E4), np.zeros(4, E5), x)),
                         (quantize, (x, np.zeros(4, E4), np.zeros(4, E5)))):
        ptx = kernel.ptx(*args, arch=arch)
        assert "e4m3" not in ptx and "e5m2" not in ptx
        usage, _ = assemble(ptx, arch)
        assert usage and usage[0].spill_stores == 0


def test_arithmetic_on_f8_promotes_to_f32():
    assert irt.promote(irt.F8E4M3, irt.F8E4M3) is irt.F32 and irt.promote(irt.F8E5M2, irt.F16) is irt.F32
    assert irt.promote(irt.F8E4M3, irt.F64) is irt.F64 and irt.promote(irt.I32, irt.F8E5M2) is irt.F32


def test_f8_atomics_are_refused_at_compile_time():
    @simt.kernel
    def f8_atomic(out: simt.DisjointSlice[f8e4m3fn]):
        with simt.unsafe():
            simt.atomic.add(out, 0, 1.0)
    with pytest.raises(DslCompileError, match="not available for f8e4m3fn arrays"):
        f8_atomic.ptx(np.zeros(4, E4), arch="sm_90")


def test_an_f32_value_stored_into_an_f8_array_needs_an_explicit_conversion():
    @simt.kernel
    def implicit_narrowing(x: simt.Array[f32], out: simt.DisjointSlice[f8e4m3fn]):
        i = simt.thread.index_1d()
        out[i] = x[i]
    with pytest.raises(DslCompileError, match="f8e4m3fn"):
        implicit_narrowing.ptx(np.zeros(4, np.float32), np.zeros(4, E4), arch="sm_90")


def test_an_f8_scalar_argument_is_refused_and_nothing_is_written():
    @simt.kernel
    def scaled(s: f8e4m3fn, out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = s
    out = np.full(4, 7.0, np.float32)
    with pytest.raises(DTypeError, match=r"argument 's'.*f8 scalars are not supported"):
        scaled.simulate(E4(1.0), out)
    assert (out == 7.0).all()


def test_torch_float8_tensors_arrive_as_the_dsl_f8_types():
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    import bridge
    for tdt, tag in ((torch.float8_e4m3fn, "f8e4m3fn"), (torch.float8_e5m2, "f8e5m2")):
        t = torch.zeros(8, dtype=tdt)
        view = bridge.asarray(t)
        assert view.dtype_tag == tag and view.ptr == t.data_ptr()
