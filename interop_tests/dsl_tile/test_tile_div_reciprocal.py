"""The code-generator switch `div_reciprocal` (KB_TILE_DIV_RECIPROCAL; LLVM's arcp flag on f32
divisions, dsl/backend/exprs.py): divisions by one value share one IEEE reciprocal and become products,
as flash attention's epilogue `acc / l[:, None]` wants (64 IEEE divisions a thread before, 2 reciprocals
and 64 multiplies after). The PTX with and without it, the compile keys, and on the GPU the results
within a few ulp of float64 (the simulators keep IEEE division)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, tile
from dsl.tile.switches import switches_key

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fa_div_reciprocal", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)


def normalise_rows(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    """Each row of the block's tile over its sum of magnitudes plus one (one divisor a row)."""
    bm, bn = out.tile_shape
    t = tile.load(x, (tile.bid(0), 0), (bm, bn))
    s = tile.sum(tile.abs(t), axis=1) + 1.0
    out.store(t / s[:, None])


def case(rng, rows=100, cols=64):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((rows, cols), np.nan, np.float32)
    return x, out, (x, tile.partition(out, (32, cols)))


def expected(x):
    x64 = x.astype(np.float64)
    return x64 / (np.abs(x64).sum(1, keepdims=True) + 1.0)


def ptx(rng, lowering):
    _, _, args = case(rng)
    return tile.kernel(normalise_rows, lowering=lowering).compile(args, "sm_90").ptx


def test_divisions_by_one_value_share_one_reciprocal(rng):
    on, off = ptx(rng, {"div_reciprocal": True}), ptx(rng, None)
    assert "div.rn.f32" in off and "div.rn.f32" not in on
    assert 0 < on.count("rcp.rn.f32") < off.count("div.rn.f32")


def test_the_attention_epilogue_takes_two_reciprocals_not_sixty_four_divisions():
    q = np.zeros((256, 128), ml_dtypes.bfloat16)
    o = np.zeros((256, 128), np.float32)
    args = FA.launch_args(q, q, q, o, 256, False, tensor_cores=True, wgmma=True, tiles=(128, 128))
    low = {"loop_pipeline": "ws", "setmaxnreg": "240/24", "fp_fusion": True, "ftz": True}
    on = FA.variant(FA.flash_fwd, {**low, "div_reciprocal": True}, 8).compile(args, "sm_90").ptx
    off = FA.variant(FA.flash_fwd, low, 8).compile(args, "sm_90").ptx
    assert off.count("div.rn.ftz.f32") == 64 and "div.rn" not in on.replace("div.rn.ftz.f32", "")
    assert "div.rn.ftz.f32" not in on and on.count("rcp.rn.ftz.f32") == 2


def test_the_switch_is_part_of_the_compile_keys():
    assert "div_reciprocal" in switches_key((("div_reciprocal", True),))
    assert "div_reciprocal" not in switches_key(())


def test_the_simulator_keeps_ieee_division(rng):
    x, out, args = case(rng)
    tile.kernel(normalise_rows, lowering={"div_reciprocal": True}).simulate(*args)
    np.testing.assert_allclose(out, expected(x), rtol=1e-6, atol=0)


@pytest.mark.gpu
def test_gpu_products_with_the_reciprocal_stay_within_a_few_ulp_of_float64(rng):
    torch = pytest.importorskip("torch", reason="the device arrays come from torch")
    x, _, _ = case(rng, rows=1000, cols=64)
    dx = torch.from_numpy(x).cuda()
    outs = {}
    for name, lowering in (("ieee", None), ("reciprocal", {"div_reciprocal": True})):
        out = torch.full_like(dx, float("nan"))
        tile.kernel(normalise_rows, lowering=lowering)(dx, tile.partition(out, (32, 64)))
        outs[name] = out.cpu().numpy()
    want = expected(x)
    np.testing.assert_allclose(outs["ieee"], want, rtol=1e-6, atol=0)
    np.testing.assert_allclose(outs["reciprocal"], want, rtol=4 * 2.0 ** -23, atol=0)
    assert not np.array_equal(outs["reciprocal"], outs["ieee"])        # the switch changed the code that ran
