"""Parallel split-K in the tile DSL (tile_kernels_lib.gemm_split_k + sum_splits): each block computes
one split of one output tile into its own tile of a partial buffer, a second kernel sums the splits.
Checked against float64 NumPy on ragged shapes, in the tile simulator and through the sm_90 TMA +
wgmma and sm_80 mma.sync loops in the PTX-level simulator; the GPU test is in test_tile_gpu.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

from dsl import tile


def operands(rng, m, k, n, dtype=ml_dtypes.bfloat16):
    return rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("splits", [1, 3, 4])
def test_split_k_matches_numpy_with_uneven_and_empty_splits(rng, splits):
    """K = 5 k tiles of 64 (the last ragged): 3 splits take 2, 2, 1; 4 splits take 2, 2, 1 and none
    (an empty split contributes zeros). M, N not multiples of the tile."""
    m, k, n = 72, 300, 40
    a, b = operands(rng, m, k, n)
    partial = np.full((K.split_k_rows(m, 64, splits), n), np.nan, np.float32)
    c = np.full((m, n), np.nan, np.float32)
    K.gemm_split_k_run(a, b, c, (64, 64), 64, splits, partial, sum_tile=(16, 32), simulate=True)
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("arch,tshape", [("sm_90", (128, 256)), ("sm_80", (64, 64))])
@pytest.mark.slow
def test_split_k_runs_through_the_tensor_core_loops_in_the_simulator(rng, arch, tshape):
    """The k loop starting at a split's first tile lowers to the TMA + wgmma loop on sm_90 and to the
    cp.async + mma.sync loop on sm_80, and both run in the PTX-level simulator."""
    m, k, n = 136, 1000, 264
    a, b = operands(rng, m, k, n)
    splits = 3
    partial = np.full((K.split_k_rows(m, tshape[0], splits), n), np.nan, np.float32)
    args = (a, b, tile.partition(partial, tshape), 64)
    ptx = K.gemm_split_k.compile(args, arch).ptx
    assert ("cp.async.bulk.tensor" in ptx and "wgmma" in ptx) if arch == "sm_90" else "mma.sync" in ptx
    K.gemm_split_k.simulate_lowered(*args, tensor_cores=True, arch=arch)
    c = np.full((m, n), np.nan, np.float32)
    K.sum_splits.simulate(partial, splits, tile.partition(c, (16, 64)))
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-4)


def test_each_split_block_owns_its_own_tile_of_the_partial_buffer(rng):
    """Stage 1 alone: split s of tile (i, j) lands in row block s * tiles_m + i, and it is the sum over
    that split's k tiles only (the partial buffers are not reduced into one another)."""
    m, k, n = 40, 256, 32
    a, b = operands(rng, m, k, n)
    splits, bm = 2, 64
    partial = np.full((K.split_k_rows(m, bm, splits), n), np.nan, np.float32)
    K.gemm_split_k.simulate(a, b, tile.partition(partial, (bm, 32)), 64)
    for s, ks in enumerate((slice(0, 128), slice(128, 256))):
        want = reference(a[:, ks], b[ks])
        np.testing.assert_allclose(partial[s * bm:s * bm + m], want, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(partial[s * bm + m:(s + 1) * bm], 0.0)   # A's zero-filled rows


def test_split_k_stores_bf16_like_torch_matmul(rng):
    """sum_splits rounds the f32 sum once, to c's dtype (bf16 here)."""
    m, k, n = 136, 520, 264
    a, b = operands(rng, m, k, n)
    want = reference(a, b).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    partial = np.full((K.split_k_rows(m, 128, 2), n), np.nan, np.float32)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    K.gemm_split_k_run(a, b, c, (128, 128), 64, 2, partial, simulate=True)
    np.testing.assert_allclose(c.astype(np.float64), want, rtol=8e-3, atol=1e-2)
