"""Row vectors over tensor-core accumulator columns held whole by every warp (lowering switch warp_vectors,
dsl/tile/lower/warp_vectors.py): a 1-D f32 variable broadcast as `r[None, :]` over a product's columns reaches
them by shuffles within each warp, not through shared memory between two block barriers. The simulator runs
the lowered kernels (shuffles and all) against NumPy float64; the PTX says which path was taken."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_flash_attention_bwd import grads64, inputs
from test_flash_attention_bwd_fused import FUSED, lowered_backward

from dsl import bf16, f32, i32, tile

BM, BK = 64, 16


def carried_scale(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2],
                  r: tile.Array[f32, 1], out: tile.Partition[f32, 2], steps: i32):
    """acc += (a_j @ b) * (2 r_j)[None, :] - r_j[None, :], r_j loaded a step ahead (the attention backward's
    prefetched lse rows): r's variables are carried through the loop in a layout of their own."""
    bm, bn = out.tile_shape
    acc = tile.zeros((bm, bn), f32)
    r_n = tile.load(r, (0,), (bn,))
    for j in range(steps):
        r_j = r_n
        r_n = tile.load(r, (j + 1,), (bn,))
        p = tile.matmul(tile.load(a, (j, 0), (bm, BK)), tile.load(b, (0, 0), (BK, bn)))
        acc = acc + p * (r_j * 2.0)[None, :] - r_j[None, :]
    out.store(acc)


def carried_scale_and_sum(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2],
                          r: tile.Array[f32, 1], out: tile.Partition[f32, 2], sums: tile.Partition[f32, 1],
                          steps: i32):
    """carried_scale whose vector also meets a reduction and a store: those gather it as any layout."""
    bm, bn = out.tile_shape
    acc = tile.zeros((bm, bn), f32)
    total = tile.zeros((bn,), f32)
    r_n = tile.load(r, (0,), (bn,))
    for j in range(steps):
        r_j = r_n
        r_n = tile.load(r, (j + 1,), (bn,))
        p = tile.matmul(tile.load(a, (j, 0), (bm, BK)), tile.load(b, (0, 0), (BK, bn)))
        acc = acc + p * r_j[None, :]
        total = total + r_j * tile.sum(r_j)
    out.store(acc)
    sums.store(total)


def _operands(rng, steps: int, bn: int):
    bf = ml_dtypes.bfloat16
    a = rng.standard_normal((steps * BM, BK)).astype(bf)
    b = rng.standard_normal((BK, bn)).astype(bf)
    r = rng.standard_normal((steps + 1) * bn).astype(np.float32)
    return a, b, r


def _reference(a, b, r, steps: int, bn: int) -> np.ndarray:
    a64, b64, r64 = a.astype(np.float64), b.astype(np.float64), r.astype(np.float64)
    acc = np.zeros((BM, bn))
    for j in range(steps):
        rj = r64[j * bn:(j + 1) * bn]
        acc += (a64[j * BM:(j + 1) * BM] @ b64) * (2 * rj)[None, :] - rj[None, :]
    return acc


def _run(rng, on: bool, bn: int = 64, steps: int = 3):
    a, b, r = _operands(rng, steps, bn)
    out = np.full((BM, bn), np.nan, np.float32)
    kern = tile.kernel(num_warps=4, lowering={"warp_vectors": on})(carried_scale)
    args = (a, b, r, tile.partition(out, (BM, bn)), steps)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_80")
    return out, _reference(a, b, r, steps, bn), kern.ptx(*args, arch="sm_80")


def test_a_row_vector_over_accumulator_columns_is_shuffled_from_every_warps_copy(rng):
    got, want, ptx = _run(rng, on=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    plain, want_plain, ptx_plain = _run(np.random.default_rng(0), on=False)
    np.testing.assert_allclose(plain, want_plain, rtol=1e-5, atol=1e-4)
    assert "shfl.sync.idx" in ptx and "shfl.sync.idx" not in ptx_plain
    # the plain lowering relays r_j for its two uses through shared memory, a store, a barrier, the loads
    # and a barrier each; held by every warp, r_j needs none of them
    assert ptx.count("bar.sync") <= ptx_plain.count("bar.sync") - 4


def test_other_uses_of_a_warp_vector_gather_it_as_any_layout(rng):
    """A reduction and an elementwise product with a distributed tile read the same variables correctly."""
    steps, bn = 3, 128
    a, b, r = _operands(rng, steps, bn)
    out = np.full((BM, bn), np.nan, np.float32)
    sums = np.full(bn, np.nan, np.float32)
    kern = tile.kernel(num_warps=4, lowering={"warp_vectors": True})(carried_scale_and_sum)
    args = (a, b, r, tile.partition(out, (BM, bn)), tile.partition(sums, (bn,)), steps)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_80")
    assert "shfl.sync.idx" in kern.ptx(*args, arch="sm_80")
    a64, b64, r64 = a.astype(np.float64), b.astype(np.float64), r.astype(np.float64)
    want, total = np.zeros((BM, bn)), np.zeros(bn)
    for j in range(steps):
        rj = r64[j * bn:(j + 1) * bn]
        want += (a64[j * BM:(j + 1) * BM] @ b64) * rj[None, :]
        total += rj * rj.sum()
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(sums, total, rtol=1e-5, atol=1e-4)


def test_vectors_that_are_not_whole_64_element_pairs_keep_the_shared_memory_relayout(rng):
    got, want, ptx = _run(rng, on=True, bn=32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert "shfl.sync.idx" not in ptx


def test_the_switch_is_off_by_default_and_part_of_the_cache_key():
    from dsl.tile.switches import SWITCHES, switches_key
    assert SWITCHES["warp_vectors"][2] is False
    assert "warp_vectors" in switches_key((("warp_vectors", True),))
    assert "warp_vectors" not in switches_key()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_backwards_warp_vector_form_matches_float64_and_runs_race_free(monkeypatch, rng, causal):
    """The fused attention backward's D128 full pick (the lse and Delta rows held by every warp), lowered for
    sm_90 and simulated under the shared-memory race check: no relayout left to order, the staging still
    ordered, gradients against float64."""
    form = FUSED.FASTEST[128]
    assert FUSED.LADDER[form]["warp_vectors"] is True
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    q, k, v, dout = inputs(rng, 2, 256, 128, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, 256, causal, form)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, 256, causal)):
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max(), err_msg=name)
