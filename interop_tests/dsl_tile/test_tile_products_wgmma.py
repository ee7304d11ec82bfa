"""tile.matmul products outside the GEMM loops on sm_90 warpgroup MMA (dsl/tile/lower/matmul/wgmma_products.py):
flash attention's S = Q K^T (K-major B) and O += P V (MN-major B) with A from registers, B staged by
cp.async in 128-byte swizzle atoms, run on the CPU simulator (whose wgmma reads B through the
descriptors and swizzle as the hardware does) against float64 NumPy; the PTX ptxas assembles for
sm_90a; what stays on mma.sync; the switch; and the same kernels on the H200 against torch SDPA."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import TypeVar

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, tile
from ptxas_kit import ptxas_verbose, spill_bytes

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 32 s of a full run on 2 cores: simulated flash attention

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_wg", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)

E = TypeVar("E")
WGMMA = "wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16"


@tile.kernel(num_warps=4)
def product_nt(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], kk: tile.Constant):
    """c = a @ b^T with b stored N x K (K-major B)."""
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store(tile.matmul(tile.load(a, (i, 0), (m, kk)), tile.transpose(tile.load(b, (j, 0), (n, kk)))) * 0.5)


@tile.kernel(num_warps=4)
def product_nn(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], kk: tile.Constant):
    """c = a @ b with b stored K x N (MN-major B)."""
    i, j = tile.bid(0), tile.bid(1)
    m, n = c.tile_shape
    c.store(tile.matmul(tile.load(a, (i, 0), (m, kk)), tile.load(b, (0, j), (kk, n))))


def _flash_args(rng, d, bm, bn, seq, causal, heads=2):
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((heads * seq, d), np.nan, np.float32)
    return (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1), out


def _kernel(warps):
    return tile.kernel(FA.flash_fwd.pyfunc, num_warps=warps)


@pytest.mark.parametrize("d,bm,bn,warps,seq", [(128, 64, 64, 4, 128), (64, 64, 64, 4, 128), (128, 128, 64, 8, 256),
                                               (64, 128, 128, 8, 256), (128, 64, 32, 4, 192)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_on_warpgroup_mma_matches_numpy_in_the_simulator(rng, d, bm, bn, warps, seq, causal):
    args, out = _flash_args(rng, d, bm, bn, seq, causal)
    kern = _kernel(warps)
    assert WGMMA % bn in kern.compile(args, "sm_90").ptx
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    ref = FA.reference(*args[:3], seq, causal)
    np.testing.assert_allclose(out, ref, rtol=2e-2, atol=1e-2)


@pytest.mark.parametrize("kern,kmajor", [(product_nt, True), (product_nn, False)], ids=["K-major B", "MN-major B"])
def test_ragged_products_on_warpgroup_mma_match_numpy_in_the_simulator(rng, kern, kmajor):
    """70 x 136 is no multiple of the 64 x 64 tiles: the copies past the edge are zero-filled."""
    a = rng.standard_normal((70, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((136, 128) if kmajor else (128, 136)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ (b.astype(np.float64).T if kmajor else b.astype(np.float64))
    c = np.full((70, 136), np.nan, np.float32)
    args = (a, b, tile.partition(c, (64, 64)), 128)
    assert WGMMA % 64 in kern.compile(args, "sm_90").ptx
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(c, ref * (0.5 if kmajor else 1.0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("d,bm,bn,warps", [(128, 64, 64, 4), (128, 128, 64, 8), (64, 128, 128, 8)])
def test_flash_attention_on_sm90_is_register_a_wgmma_that_ptxas_assembles_without_spills(rng, d, bm, bn, warps,
                                                                                         tmp_path):
    args, _ = _flash_args(rng, d, bm, bn, 256, True)
    ck = _kernel(warps).compile(args, "sm_90")
    ptx = ck.ptx
    assert ".target sm_90a" in ptx and "mma.sync" not in ptx and "ldmatrix" not in ptx
    # S = Q K^T: D/16 steps of n = BN; O += P V: BN/16 steps of n = D; A is four registers, B a descriptor;
    loops = 2   # causal: two loops (examples/flash_attention.py: the key blocks left of the diagonal, then on it)
    assert ptx.count(WGMMA % bn) == loops * d // 16 and ptx.count(WGMMA % d) == loops * bn // 16
    assert re.search(r"wgmma\.mma_async[^{]*\{[^}]*\}, \{%r\d+, %r\d+, %r\d+, %r\d+\}, %rd\d+", ptx)
    assert ptx.count("wgmma.fence.sync.aligned;") == 2 * loops
    assert ptx.count("wgmma.wait_group.sync.aligned 0;") == 2 * loops
    assert "fence.proxy.async.shared::cta;" in ptx          # the cp.async writes, made visible to wgmma
    log = ptxas_verbose(ptx, "sm_90a", tmp_path)
    assert spill_bytes(log) == 0
    assert "serialized" not in log                           # no wgmma serialised by ptxas
    assert ck.dynamic_smem > 0                               # K and V stage in dynamic shared memory


def test_products_whose_warps_hold_more_than_16_rows_stay_on_mma_sync(rng):
    """128 query rows on 4 warps: 32 rows a warp is two m-tiles, not a warpgroup's m64 slice."""
    args, _ = _flash_args(rng, 128, 128, 64, 256, False)
    ptx = _kernel(4).compile(args, "sm_90").ptx
    assert "mma.sync" in ptx and "wgmma" not in ptx


def test_the_switch_keeps_products_on_mma_sync_and_changes_the_cache_key(rng, monkeypatch):
    from dsl.tile.compile import switches_key
    args, _ = _flash_args(rng, 128, 64, 64, 256, False)
    on = switches_key()
    assert "wgmma.mma_async" in _kernel(4).compile(args, "sm_90").ptx
    monkeypatch.setenv("KB_TILE_WGMMA_PRODUCTS", "0")
    ptx = _kernel(4).compile(args, "sm_90").ptx
    assert "wgmma" not in ptx and "mma.sync" in ptx and ".target sm_90\n" in ptx
    assert switches_key() != on
    assert "wgmma" not in _kernel(4).compile(args, "sm_80").ptx


@pytest.mark.gpu
@pytest.mark.parametrize("d,bm,bn,warps", [(128, 64, 64, 4), (64, 64, 64, 4), (128, 128, 64, 8), (64, 128, 128, 8)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_flash_attention_on_warpgroup_mma_matches_torch_sdpa(d, bm, bn, warps, causal):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F

    import bridge
    if bridge.current_device().cc < (9, 0):
        pytest.skip("warpgroup MMA needs sm_90")
    batch, heads, seq = 2, 3, 384
    g = torch.Generator(device="cuda").manual_seed(d + bm + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    args = (*(x.reshape(-1, d) for x in (q, k, v)), tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1)
    kern = _kernel(warps)
    kern(*args)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err
    assert "wgmma.mma_async" in kern.compile(args, bridge.current_device().arch).ptx


@pytest.mark.gpu
@pytest.mark.parametrize("kern,kmajor", [(product_nt, True), (product_nn, False)], ids=["K-major B", "MN-major B"])
def test_gpu_ragged_products_on_warpgroup_mma_match_numpy(rng, kern, kmajor):
    import bridge
    if bridge.current_device().cc < (9, 0):
        pytest.skip("warpgroup MMA needs sm_90")
    a = rng.standard_normal((200, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((136, 128) if kmajor else (128, 136)).astype(ml_dtypes.bfloat16)
    ref = a.astype(np.float64) @ (b.astype(np.float64).T if kmajor else b.astype(np.float64))
    out = bridge.full((200, 136), -7.0, "float32")
    args = (bridge.from_host(a), bridge.from_host(b), tile.partition(out, (64, 64)), 128)
    kern(*args)
    bridge.synchronize()
    np.testing.assert_allclose(out.to_host(), ref * (0.5 if kmajor else 1.0), rtol=1e-4, atol=1e-3)
    assert "wgmma.mma_async" in kern.compile(args, bridge.current_device().arch).ptx
