"""Float min/max in both simulators are the device's `min`/`max` (PTX ISA): -0 below +0 whatever the
operand order, a NaN operand ignored, two NaNs the canonical NaN — for f32, f64, f16 and bf16, bit for
bit, and the same for scalars and arrays (NumPy's np.fmin gives -0.0 on scalars, +0.0 on arrays).
The pinned bits are in minmax_cases.py; test_sim_agrees_with_gpu.py checks them on the device."""
from __future__ import annotations

import minmax_cases as M
import numpy as np
import pytest
from sim_irkit import R, arr, bop, gid, guarded, kernel, load, params, store

from dsl import tile
from dsl.ir import nodes as N
from dsl.ir.types import SCALARS, I64
from dsl.sim import arith, run

DTYPES = ["f32", "f64", "f16", "bf16"]


def _ir_minmax_kernel(t) -> N.Function:
    """Hand-built IR (no front end): the four outputs are BinOp min, BinOp max, Math fmin, Math fmax."""
    a, b, *outs = params(("a", arr(t)), ("b", arr(t)), *((f"o{k}", arr(t, writable=True)) for k in range(4)))
    i = N.Var("i", I64)
    x, y = load(a, [R(i)], t), load(b, [R(i)], t)
    values = [bop("min", x, y, t), bop("max", x, y, t), N.Math("fmin", [x, y], t), N.Math("fmax", [x, y], t)]
    body = [store(o, [R(i)], v, mode="guarded") for o, v in zip(outs, values)]
    return kernel("minmax", [a, b, *outs], [N.Assign(i, gid()), guarded(outs[0], [R(i)], body)])


@pytest.mark.parametrize("dt", DTYPES)
def test_simt_simulator_min_max_fmin_fmax_give_the_ptx_bits_on_arrays(dt):
    a, b = M.operands(dt)
    outs = [np.zeros_like(a) for _ in range(4)]
    run(_ir_minmax_kernel(SCALARS[dt]), [a, b, *outs], grid=1, block=32)
    lo, hi = M.expected(dt, "min"), M.expected(dt, "max")
    got = [M.bits_of(o) for o in outs]
    assert got == [lo, hi, lo, hi], [[hex(v) for v in g] for g in got]


@pytest.mark.parametrize("dt", DTYPES)
def test_a_simt_kernel_with_min_max_fmin_fmax_simulates_to_the_ptx_bits(dt):
    """The front end's `min`/`max` builtins and simt.fmin/fmax, the kernel the GPU test runs."""
    a, b = M.operands(dt)
    outs = [np.zeros_like(a) for _ in range(4)]
    M.simt_minmax.simulate(a, b, *outs, grid=1, block=32)
    lo, hi = M.expected(dt, "min"), M.expected(dt, "max")
    assert [M.bits_of(o) for o in outs] == [lo, hi, lo, hi]


@pytest.mark.parametrize("dt", DTYPES)
def test_simt_simulator_min_max_on_scalars_give_the_same_bits_as_on_arrays(dt):
    t = SCALARS[dt]
    a, b = M.operands(dt)
    for op in ("min", "max"):
        scalar = [M.bits_of(np.asarray(arith.binop(op, x, y, t)).reshape(1))[0] for x, y in zip(a, b)]
        fn = [M.bits_of(np.asarray(arith.math_fn("f" + op, [x, y], t)).reshape(1))[0] for x, y in zip(a, b)]
        assert scalar == fn == M.expected(dt, op), (op, [hex(v) for v in scalar], [hex(v) for v in fn])


@pytest.mark.parametrize("runner", ["simulate", "simulate_lowered"])
@pytest.mark.parametrize("dt", DTYPES)
def test_tile_minimum_maximum_fmin_fmax_give_the_ptx_bits(dt, runner):
    """The tile simulator selects in the operand type; the lowering computes f16/bf16 in f32 and
    converts back (a NaN converts to the canonical NaN), on the SIMT simulator: the same bits."""
    a, b = M.operands(dt)
    out = np.zeros(M.PAIRS_TILE, a.dtype)
    getattr(M.tile_minmax_pairs, runner)(a, b, tile.partition(out, M.PAIRS_TILE))
    lo, hi = M.expected(dt, "min"), M.expected(dt, "max")
    assert [M.bits_of(row) for row in out] == [lo, hi, lo, hi]


@pytest.mark.parametrize("runner", ["simulate", "simulate_lowered"])
@pytest.mark.parametrize("dt", DTYPES)
def test_tile_max_min_reductions_order_zeros_and_skip_nans_like_the_device(dt, runner):
    """Each row mixes +0/-0 (in both orders) and NaNs; the tile simulator folds in its own order, the
    lowering (run on the SIMT simulator) in the device's shuffle tree: both give these bits."""
    x = np.stack([M.values(dt, row) for row, _, _ in M.ROWS])
    out = np.zeros((2, 4), x.dtype)
    getattr(M.tile_minmax_rows, runner)(x, tile.partition(out, (2, 4)))
    assert M.bits_of(out[0]) == [M.BITS[dt][mx] for _, mx, _ in M.ROWS]
    assert M.bits_of(out[1]) == [M.BITS[dt][mn] for _, _, mn in M.ROWS]


@pytest.mark.parametrize("dst", ["f16", "bf16"])
def test_a_nan_converted_to_f16_or_bf16_is_the_canonical_nan_whatever_its_sign_and_payload(dst):
    """Half-precision min/max computed in f32 (the tile lowering, fmin/fmax of the front end) come back
    through this conversion: CUDA's cvt gives 0x7fff for every NaN, NumPy and ml_dtypes do not."""
    f32 = np.array([0x7FFF_FFFF, 0xFFC0_0000, 0x7FC0_0001, 0x7F80_0001], np.uint32).view(np.float32)
    f64 = np.array([0xFFF8_0000_0000_0000, 0x7FF0_0000_0000_0001], np.uint64).view(np.float64)
    for x, src in ((f32, "f32"), (f64, "f64")):
        got = arith.cast(x, SCALARS[src], SCALARS[dst])
        assert M.bits_of(got) == [0x7FFF] * len(x), (src, [hex(v) for v in M.bits_of(got)])
    ones = arith.cast(np.array([1.0, -0.0], np.float32), SCALARS["f32"], SCALARS[dst])
    assert M.bits_of(ones) == [M.BITS[dst]["one"], M.BITS[dst]["nz"]]      # numbers convert as before
