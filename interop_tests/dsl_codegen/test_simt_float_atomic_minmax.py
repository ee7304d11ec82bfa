"""Float atomic max/min in SIMT kernels (`simt.atomic.max/min` on f32 and f64 arrays): the same table
as the tile model's atomics (dsl/vocab/atomics.py; SIMT refused them while `tile.atomic_max` took them).
Checked on the simulator against NumPy float64, for the PTX ISA's signed-zero and NaN rules of `max` /
`min`, in the PTX ptxas assembles, and on the GPU."""
from __future__ import annotations

import re

import numpy as np
import pytest

import bridge
from dsl import DslCompileError
from dsl.ir.types import SCALARS
from dsl.tile.atomics import ATOMIC_DTYPES as TILE_ATOMIC_DTYPES
from dsl.vocab.atomics import ATOMIC_DTYPES, TILE_OPS, atomic_dtype_ok
from interop_tests.dsl_codegen import atomic_minmax_kernels as K
from dsl.backend.ptxas import assemble
from interop_tests.dsl_codegen.codegen_kit import require_ptxas

KERNELS = {"max": K.bucket_max, "min": K.bucket_min}
UFUNCS = {"max": np.maximum, "min": np.minimum}
START = {"max": -np.inf, "min": np.inf}


def _case(rng, op: str, dtype, n: int = 1000, buckets: int = 7):
    x = (rng.standard_normal(n) * 100).astype(dtype)
    bucket = rng.integers(0, buckets, n).astype(np.int32)
    out = np.full(buckets, START[op], dtype)
    want = np.full(buckets, START[op], np.float64)
    UFUNCS[op].at(want, bucket, x.astype(np.float64))
    return x, bucket, out, want


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_atomic_max_min_scatter_matches_numpy_on_the_simulator(op, dtype):
    x, bucket, out, want = _case(np.random.default_rng(3), op, dtype)
    KERNELS[op].simulate(x, bucket, out)
    np.testing.assert_array_equal(out.astype(np.float64), want)      # a max/min is one of the inputs: exact


@pytest.mark.parametrize("lanes", [5, 200])   # 200 updates of one element: the simulator's serial path
def test_signed_zeros_and_nans_follow_the_ptx_max_min_rules_on_the_simulator(lanes):
    # PTX ISA max/min: a NaN operand is ignored; +0.0 > -0.0 whatever the order
    x = np.resize(np.array([np.nan, -0.0, 0.0, np.nan, -0.0], np.float32), lanes)
    bucket = np.zeros(lanes, np.int32)
    hi = np.array([-0.0], np.float32)
    K.bucket_max.simulate(x, bucket, hi)
    lo = np.array([0.0], np.float32)
    K.bucket_min.simulate(x, bucket, lo)
    assert hi[0] == 0.0 and not np.signbit(hi[0])
    assert lo[0] == 0.0 and np.signbit(lo[0])


def test_f16_atomic_max_is_refused_before_anything_runs():
    x = np.ones(8, np.float16)
    out = np.full(1, 7.0, np.float16)
    with pytest.raises(DslCompileError, match=r"simt\.atomic\.max\(\) is not available for f16 arrays"):
        K.half_max.simulate(x, out)
    assert out[0] == 7.0


def test_simt_and_tile_take_the_same_element_types_for_the_tile_ops():
    assert TILE_ATOMIC_DTYPES == {op: ATOMIC_DTYPES[op] for op in TILE_OPS}
    for op, names in ATOMIC_DTYPES.items():
        for name in names:
            assert atomic_dtype_ok(op, SCALARS[name]), (op, name)
    assert not atomic_dtype_ok("max", SCALARS["f16"]) and not atomic_dtype_ok("xor", SCALARS["f32"])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_atomic_max_compiles_to_ptx_that_ptxas_assembles(arch, dtype):
    require_ptxas()
    x, bucket, out, _ = _case(np.random.default_rng(0), "max", dtype, n=10)
    ck = K.bucket_max.compile(x, bucket, out, arch=arch)
    bits = np.dtype(dtype).itemsize * 8
    assert re.search(rf"atom(\.\w+)*\.cas\.b{bits}|atom\.global\.max\.f{bits}", ck.ptx), \
        "a float atomic max is a compare-and-swap loop (or one atom.max)"
    assert not re.search(r"atom\.\w*\.?sys\.", ck.ptx), "CUDA's atomics are device-scoped (.gpu), not .sys"
    usages, _ = assemble(ck.ptx, arch)
    assert [u.kernel for u in usages] == [ck.name] and usages[0].spill_stores == 0


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_atomic_max_min_scatter_matches_numpy_on_the_gpu(op, dtype):
    x, bucket, out, want = _case(np.random.default_rng(5), op, dtype, n=100_003, buckets=13)
    d_out = bridge.from_host(out)
    KERNELS[op](bridge.from_host(x), bridge.from_host(bucket), d_out)
    np.testing.assert_array_equal(d_out.to_host().astype(np.float64), want)


@pytest.mark.gpu
def test_signed_zeros_and_nans_follow_the_ptx_max_min_rules_on_the_gpu():
    x = bridge.from_host(np.array([np.nan, -0.0, 0.0, np.nan, -0.0], np.float32))
    bucket = bridge.from_host(np.zeros(5, np.int32))
    hi, lo = bridge.from_host(np.array([-0.0], np.float32)), bridge.from_host(np.array([0.0], np.float32))
    K.bucket_max(x, bucket, hi)
    K.bucket_min(x, bucket, lo)
    h, m = hi.to_host()[0], lo.to_host()[0]
    assert h == 0.0 and not np.signbit(h)
    assert m == 0.0 and np.signbit(m)
