"""The lowering switch `reverse_blocks` (dsl/tile/lower/tiles.py tile_number): blocks take the tiles
in reverse order, the last one first, so where later tiles hold more work (causal attention's later
query blocks) the heaviest start first. Each block still owns exactly one tile (persistent blocks: the
ones their loop visits), every partition of the kernel agrees on it, and the results are unchanged:
checked in the lowered simulator, which runs the PTX-level program, against NumPy."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, tile
from dsl.tile.switches import switches_key
from attention_refs import attention64

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fa_reverse", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)


@tile.kernel
def label_tiles(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], rowsum: tile.Partition[f32, 1]):
    """Each block writes its tile of x plus its tile number, and the sums of its rows (a partition of
    another ndim, matched by tile number)."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    t = tile.load(x, (i, j), (bm, bn))
    out.store(t + (i * 1000 + j))
    rowsum.store(tile.sum(t, axis=1))


def case(rng, rows=96, cols=64):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    out = np.full((rows, cols), np.nan, np.float32)
    # the row sums: tile b of rowsum (32 rows) for the block whose row-major tile number is b (of 3 x 2)
    sums = np.full(6 * 32, np.nan, np.float32)
    return x, out, sums, (x, tile.partition(out, (32, 32)), tile.partition(sums, (32,)))


def expected(x):
    want = x.astype(np.float64).copy()
    for i in range(3):
        for j in range(2):
            want[32 * i:32 * (i + 1), 32 * j:32 * (j + 1)] += i * 1000 + j
    sums = np.concatenate([x[32 * (b // 2):32 * (b // 2 + 1), 32 * (b % 2):32 * (b % 2 + 1)].astype(np.float64).sum(1)
                           for b in range(6)])
    return want, sums


@pytest.mark.parametrize("persistent,blocks", [(False, None), (True, 1), (True, 4)],
                         ids=["grid", "persistent-1", "persistent-4"])
def test_every_tile_is_owned_once_and_every_partition_agrees(rng, persistent, blocks):
    kern = tile.kernel(label_tiles.pyfunc, persistent=persistent, lowering={"reverse_blocks": True})
    x, out, sums, args = case(rng)
    kern.simulate_lowered(*args, **({"blocks": blocks} if blocks else {}))
    want, want_sums = expected(x)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-5, atol=1e-4)


def test_the_ptx_takes_the_last_tile_first():
    x, _, _, args = case(np.random.default_rng(0))
    on = tile.kernel(label_tiles.pyfunc, lowering={"reverse_blocks": True}).compile(args, "sm_90").ptx
    off = tile.kernel(label_tiles.pyfunc).compile(args, "sm_90").ptx
    assert "%nctaid.x" in on and "%nctaid.x" not in off


@pytest.mark.slow
@pytest.mark.parametrize("lowering,warps,tiles", [
    ({"reverse_blocks": True}, None, None),
    ({"loop_pipeline": "ws", "setmaxnreg": "240/24", "ws_chain": True, "pingpong": True, "reverse_blocks": True}, 8,
     (128, 128)),
], ids=["default", "ws-pingpong"])
def test_causal_attention_in_reverse_order_matches_float64_in_the_lowered_simulator(rng, lowering, warps, tiles):
    seq, d = 256, 128
    q, k, v = (rng.standard_normal((3 * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((3 * seq, d), np.nan, np.float32)
    args = FA.launch_args(q, k, v, out, seq, True, tensor_cores=True, wgmma=True, tiles=tiles)
    FA.variant(FA.flash_fwd, lowering, warps).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(q, k, v, seq, True), rtol=2e-2, atol=1e-2)


def test_the_switch_is_part_of_the_compile_keys():
    assert "reverse_blocks" in switches_key((("reverse_blocks", True),))
    assert "reverse_blocks" not in switches_key(())
