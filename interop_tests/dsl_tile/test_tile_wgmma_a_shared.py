"""KB_TILE_WGMMA_A / lowering switch `wgmma_a` (dsl/tile/lower/matmul/shared_a.py): with "shared", a
warpgroup-MMA product's A operand that is a loop-invariant `tile.load` of an array (flash attention's
Q; the backward's Q, dO, K, V) is staged once in swizzled shared memory and read by SS wgmmas, so its
registers are free. Proven here: the default leaves the PTX as the "registers" choice makes it; the
PTX of "shared" (two descriptors for Q K^T, P V still from registers, the stage in the dynamic shared
bytes); ptxas -v registers and spills before and after; the lowered sm_90 simulator against float64
attention and gradients written here; the TMA rings; the fallbacks (an operand read elsewhere, a
product on mma.sync, shared memory too small).

GPU part (H200): python -m pytest -q -n 0 -m gpu interop_tests/dsl_tile/test_tile_wgmma_a_shared.py
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import TypeVar

import ml_dtypes
import numpy as np
import pytest
from attention_refs import assert_matches_sdpa_autograd, attention64, gqa64
from ptxas_kit import ptxas_verbose, spill_bytes

import bridge
from dsl import f32, i32, tile

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
_spec = importlib.util.spec_from_file_location("flash_attention_bwd_wgmma_a",
                                               ROOT / "examples" / "flash_attention_bwd.py")
BWD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BWD)
FA = BWD.fwd
E = TypeVar("E")
SHARED = {"wgmma_a": "shared"}
# an SS wgmma: accumulators, then two 64-bit descriptors; an RS one: accumulators, then 4 A registers
SS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, %rd\d+, %rd\d+,")
RS = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n\d+k16\.f32\.bf16\.bf16 \{[^}]*\}, \{%r")


def kern(fn, warps: int = 4, **lowering):
    """A fresh kernel object over `fn`'s function with the given lowering switches."""
    return tile.kernel(fn.pyfunc, num_warps=warps, lowering=lowering or None)


def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def bf16(rng, *shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


def fwd_args(rng, d, bm, bn, seq, causal, heads=2):
    q, k, v = (bf16(rng, heads * seq, d) for _ in range(3))
    out = nan(heads * seq, d)
    return (q, k, v, tile.partition(out, (bm, d)), seq, d ** -0.5, bn, causal, 1), out




def lse64(q, k, seq, causal):
    """Float64 natural log-sum-exp of each query row's scaled scores (what flash_fwd_lse stores)."""
    d = q.shape[1]
    out = np.empty(q.shape[0], np.float64)
    for h in range(q.shape[0] // seq):
        rows = slice(h * seq, (h + 1) * seq)
        s = q[rows].astype(np.float64) @ k[rows].astype(np.float64).T / np.sqrt(d)
        if causal:
            s[np.triu_indices(seq, 1)] = -np.inf
        top = s.max(axis=1)
        out[rows] = top + np.log(np.exp(s - top[:, None]).sum(axis=1))
    return out


# ------------------------------------------------------------------------------ the switch, the PTX
def test_the_switch_is_in_the_table_and_the_cache_key_only_when_shared(monkeypatch):
    from dsl.options import OptionError
    from dsl.tile.switches import SWITCHES, check_lowering, switches_key
    monkeypatch.delenv("KB_TILE_WGMMA_A", raising=False)
    assert SWITCHES["wgmma_a"] == ("KB_TILE_WGMMA_A", ("registers", "shared"), "registers")
    default = switches_key()
    assert not any("wgmma_a" in str(part) for part in default)
    assert switches_key((("wgmma_a", "registers"),)) == default
    assert switches_key((("wgmma_a", "shared"),)) == default + ("wgmma_a_shared",)
    monkeypatch.setenv("KB_TILE_WGMMA_A", "shared")
    assert switches_key() == default + ("wgmma_a_shared",)
    monkeypatch.setenv("KB_TILE_WGMMA_A", "smem")
    with pytest.raises(bridge.ConfigurationError, match="KB_TILE_WGMMA_A"):
        switches_key()
    with pytest.raises(OptionError, match="wgmma_a"):
        check_lowering({"wgmma_a": "smem"})


def test_the_default_is_the_registers_choice_and_issues_no_ss_wgmma(monkeypatch, rng):
    monkeypatch.delenv("KB_TILE_WGMMA_A", raising=False)
    args, _ = fwd_args(rng, 128, 64, 64, 256, True)
    default = kern(FA.flash_fwd).compile(args, "sm_90")
    explicit = kern(FA.flash_fwd, wgmma_a="registers").compile(args, "sm_90")
    assert default.ptx == explicit.ptx and default.dynamic_smem == explicit.dynamic_smem
    loops = 2   # causal: two loops (examples/flash_attention.py: the key blocks left of the diagonal, then on it)
    assert not SS.search(default.ptx) and len(RS.findall(default.ptx)) == loops * (128 // 16 + 64 // 16)


@pytest.mark.slow
@pytest.mark.parametrize("d,bm,bn", [(64, 64, 128), (64, 64, 64), (128, 64, 64)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_environment_at_registers_gives_the_default_ptx(monkeypatch, rng, d, bm, bn, causal):
    """The PTX of the default was also compared byte for byte with the PTX saved before the switch
    existed (36 fwd/dq/dkdv kernels, D64-D256): identical. Here: the environment's "registers" is it."""
    args, _ = fwd_args(rng, d, bm, bn, 256, causal)
    monkeypatch.delenv("KB_TILE_WGMMA_A", raising=False)
    default = kern(FA.flash_fwd).compile(args, "sm_90").ptx
    monkeypatch.setenv("KB_TILE_WGMMA_A", "registers")
    assert kern(FA.flash_fwd).compile(args, "sm_90").ptx == default


def test_shared_reads_q_by_descriptor_and_p_from_registers(rng):
    """D128, 64x64: S = Q K^T is 8 SS wgmmas (k16 steps of 128), P V 4 RS ones; Q's stage (64 x 128
    bf16, 16 KiB) is counted in the dynamic shared memory the launch asks for."""
    args, _ = fwd_args(rng, 128, 64, 64, 256, True)
    regs = kern(FA.flash_fwd).compile(args, "sm_90")
    ck = kern(FA.flash_fwd, **SHARED).compile(args, "sm_90")
    assert len(SS.findall(ck.ptx)) == 2 * 8 and len(RS.findall(ck.ptx)) == 2 * 4     # causal: two loops
    assert ck.dynamic_smem >= regs.dynamic_smem + 64 * 128 * 2
    assert ".target sm_90a" in ck.ptx and "fence.proxy.async" in ck.ptx


# ------------------------------------------------------------------------------ ptxas -v
def _ptxas(kernel, args, tmp_path) -> tuple[int, int]:
    report = ptxas_verbose(kernel.compile(args, "sm_90").ptx, "sm_90", tmp_path)
    return int(re.search(r"Used (\d+) registers", report).group(1)), spill_bytes(report)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_ptxas_needs_fewer_registers_with_q_in_shared_memory_at_d128(rng, causal, tmp_path):
    """Measured (ptxas 13.0): 231 -> 154 causal, 225 -> 152 full; both without spills."""
    args, _ = fwd_args(rng, 128, 64, 64, 256, causal)
    before, _ = _ptxas(kern(FA.flash_fwd), args, tmp_path)
    after, spills = _ptxas(kern(FA.flash_fwd, **SHARED), args, tmp_path)
    assert after < before and spills == 0, (before, after)


@pytest.mark.slow
@pytest.mark.parametrize("bn", [64, 32])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_d256_forward_tiles_of_one_warpgroup_assemble_without_spills(rng, bn, causal, tmp_path):
    """The 64-row D256 tiles do not spill with Q in wgmma's swizzle atoms (253 / 255 and 221 / 208
    registers, causal / full). By default Q waits in its padded shared tile and each product takes its
    A fragments by ldmatrix (2026-12-05): 64x64 still spills (172 / 148 bytes), 64x32 no longer (its
    A fragments read element by element spilled 12 / 164)."""
    args, _ = fwd_args(rng, 256, 64, bn, 256, causal)
    _, spills_before = _ptxas(kern(FA.flash_fwd), args, tmp_path)
    _, spills_after = _ptxas(kern(FA.flash_fwd, **SHARED), args, tmp_path)
    assert (spills_before > 0) == (bn == 64) and spills_after == 0, (spills_before, spills_after)


def bwd_args(rng, d, own, stream, seq, causal, heads=2):
    """flash_bwd_dkdv's and flash_bwd_dq's arguments, lse and delta computed in float64 here, and
    the float64 gradients."""
    q, k, v, dout = (bf16(rng, heads * seq, d) for _ in range(4))
    o, want = gqa64(q, k, v, dout, seq, causal, 1)
    lse = lse64(q, k, seq, causal).astype(np.float32)
    delta = (dout.astype(np.float64) * o).sum(axis=1).astype(np.float32)
    dq, dk, dv = nan(heads * seq, d), nan(heads * seq, d), nan(heads * seq, d)
    sc = d ** -0.5
    dkdv = (q, k, v, dout, lse, delta, tile.partition(dk, (own, d)), tile.partition(dv, (own, d)), seq, sc, stream,
            causal, 1)
    dqa = (q, k, v, dout, lse, delta, tile.partition(dq, (own, d)), seq, sc, stream, causal, 1)
    return dkdv, dqa, (dq, dk, dv), want


@pytest.mark.slow
@pytest.mark.parametrize("d,stream", [(64, 64), (128, 32)])
def test_ptxas_backward_kernels_need_fewer_registers(rng, d, stream, tmp_path):
    """The examples' sm_90 backward tiles (64 rows owned), causal. Measured: dQ D64 220 -> 168, D128
    253 -> 156; dK/dV D64 252 -> 195, D128 252 -> 221; no spills before or after."""
    dkdv, dqa, _, _ = bwd_args(rng, d, 64, stream, 128, True)
    for fn, args in ((BWD.flash_bwd_dkdv, dkdv), (BWD.flash_bwd_dq, dqa)):
        before, spills_before = _ptxas(kern(fn), args, tmp_path)
        after, spills_after = _ptxas(kern(fn, **SHARED), args, tmp_path)
        assert after < before and spills_after <= spills_before == 0, (fn.name, before, after)


# ------------------------------------------------------------------------------ the lowered simulator
@pytest.mark.slow
@pytest.mark.parametrize("d,bn", [(64, 128), (128, 64), (256, 64), (256, 32)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_forward_with_shared_q_matches_float64_in_the_simulator(rng, d, bn, causal):
    args, out = fwd_args(rng, d, 64, bn, 256, causal)
    k = kern(FA.flash_fwd, **SHARED)
    assert SS.search(k.compile(args, "sm_90").ptx)
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], 256, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("d,stream", [(64, 64), (128, 32), (256, 32)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_with_shared_operands_matches_float64_gradients_in_the_simulator(rng, d, stream, causal):
    """dK/dV: K and V are the staged A of S^T = K Q^T and dP^T = V dO^T; dQ: Q and dO of S = Q K^T and
    dP = dO V^T (4 SS products a kernel per k step). Error relative to the largest gradient: 1e-2."""
    dkdv, dqa, got, want = bwd_args(rng, d, 64, stream, 128, causal)
    for fn, args in ((BWD.flash_bwd_dkdv, dkdv), (BWD.flash_bwd_dq, dqa)):
        k = kern(fn, **SHARED)
        assert len(SS.findall(k.compile(args, "sm_90").ptx)) == 2 * d // 16, fn.name
        k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    for name, g, w in zip(("dq", "dk", "dv"), got, want):
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-2 * np.abs(w).max(), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("lowering,warps,bm", [
    ({"loop_pipeline": "tma", "product_overlap": True}, 4, 64),
    ({"loop_pipeline": "ws", "setmaxnreg": "240/24", "loop_stages": 3}, 8, 128),
], ids=["tma-overlap", "ws-two-warpgroups"])
def test_the_tma_rings_take_shared_q_too(rng, lowering, warps, bm):
    """With a TMA ring (K and V by TMA, Q by cp.async before the loop) and with two consumer
    warpgroups (each reads its own 64 rows of Q's atoms), causal D128."""
    args, out = fwd_args(rng, 128, bm, 64, 256, True)
    k = kern(FA.flash_fwd, warps, **lowering, **SHARED)
    ptx = k.compile(args, "sm_90").ptx
    assert "cp.async.bulk.tensor.2d" in ptx and len(SS.findall(ptx)) == 2 * 8      # causal: two loops
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out, attention64(*args[:3], 256, True), rtol=2e-2, atol=1e-2)


# ------------------------------------------------------------------------------ where it does not apply
@tile.kernel(num_warps=4, lowering=SHARED)
def two_products(x: tile.Array[E, 2], w: tile.Array[E, 2], u: tile.Array[E, 2], c: tile.Partition[f32, 2],
                 e: tile.Partition[f32, 2], blocks: i32, d: tile.Constant):
    """xt is the A of a warpgroup-MMA product (B 64 x d, K-major) and of one that stays on mma.sync
    (B d x 32: rows of 32 elements, no 128-byte swizzle atom)."""
    xt = tile.load(x, (tile.bid(0), 0), (64, d))
    acc = tile.zeros((64, 64), f32)
    for j in range(blocks):
        acc = tile.matmul(xt, tile.transpose(tile.load(w, (j, 0), (64, d))), acc)
    c.store(acc)
    e.store(tile.matmul(xt, tile.load(u, (0, 0), (d, 32))))


@tile.kernel(num_warps=4, lowering=SHARED)
def also_summed(x: tile.Array[E, 2], w: tile.Array[E, 2], c: tile.Partition[f32, 2], blocks: i32, d: tile.Constant):
    """xt is also read outside a product: it keeps the register path."""
    xt = tile.load(x, (tile.bid(0), 0), (64, d))
    acc = tile.zeros((64, 64), f32) + tile.sum(xt.astype(f32), axis=1)[:, None]
    for j in range(blocks):
        acc = tile.matmul(xt, tile.transpose(tile.load(w, (j, 0), (64, d))), acc)
    c.store(acc)


def test_a_product_on_mma_sync_reads_the_staged_operand_from_its_atoms(rng):
    d, blocks = 128, 2
    x, w, u = bf16(rng, 128, d), bf16(rng, 64 * blocks, d), bf16(rng, d, 32)
    c, e = nan(128, 64), nan(128, 32)
    args = (x, w, u, tile.partition(c, (64, 64)), tile.partition(e, (64, 32)), blocks, d)
    ptx = two_products.compile(args, "sm_90").ptx
    assert len(SS.findall(ptx)) == d // 16 and "mma.sync.aligned.m16n8k16" in ptx
    two_products.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    x64, w64, u64 = (a.astype(np.float64) for a in (x, w, u))
    np.testing.assert_allclose(c, x64 @ (w64[:64] + w64[64:]).T, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(e, x64 @ u64, rtol=1e-3, atol=1e-3)


def test_an_operand_read_outside_products_stays_in_registers(rng):
    d = 128
    x, w = bf16(rng, 64, d), bf16(rng, 128, d)
    c = nan(64, 64)
    args = (x, w, tile.partition(c, (64, 64)), 2, d)
    ptx = also_summed.compile(args, "sm_90").ptx
    assert not SS.search(ptx) and len(RS.findall(ptx)) == d // 16
    also_summed.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    x64 = x.astype(np.float64)
    want = x64.sum(axis=1)[:, None] + x64 @ w.astype(np.float64)[:64].T + x64 @ w.astype(np.float64)[64:].T
    np.testing.assert_allclose(c, want, rtol=1e-3, atol=2e-2)


@pytest.mark.slow
def test_a_kernel_whose_stages_would_not_fit_keeps_registers(rng):
    """D256 with a 3-stage TMA ring of K and V (192 KiB): Q's 34 KiB stage would take the block past
    the 226 KiB it may opt into, so the kernel is lowered as with "registers"."""
    args, _ = fwd_args(rng, 256, 64, 64, 256, True)
    ring = {"loop_pipeline": "tma", "loop_stages": 3}
    shared = kern(FA.flash_fwd, **ring, **SHARED).compile(args, "sm_90")
    regs = kern(FA.flash_fwd, **ring).compile(args, "sm_90")
    assert shared.ptx == regs.ptx and shared.dynamic_smem == regs.dynamic_smem


# ------------------------------------------------------------------------------ the GPU
def _sm90_torch():
    torch = pytest.importorskip("torch", reason="the references need torch")
    if not bridge.gpu_available() or bridge.current_device().cc < (9, 0):
        pytest.skip("SS warpgroup MMA needs an sm_90 GPU")
    return torch


@pytest.mark.gpu
@pytest.mark.parametrize("d,bn", [(64, 128), (128, 64), (256, 64), (256, 32)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_forward_with_shared_q_matches_torch_sdpa(d, bn, causal):
    torch = _sm90_torch()
    import torch.nn.functional as F
    batch, heads, seq = 2, 3, 256
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    args = (*(x.reshape(-1, d) for x in (q, k, v)), tile.partition(out, (64, d)), seq, d ** -0.5, bn, causal, 1)
    attn = kern(FA.flash_fwd, **SHARED)
    attn(*args)
    assert SS.search(attn.compile(args, bridge.current_device().arch).ptx)
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
    err = (out.reshape(ref.shape) - ref).abs().max().item()
    assert err < 2e-2, err


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_backward_with_shared_operands_matches_autograd_in_float64(monkeypatch, d, causal):
    """The examples' kernels under KB_TILE_WGMMA_A=shared, B2 H4 S256 bf16, against torch autograd of
    SDPA in float64; errors relative to the largest value, bound 1e-2 as the examples' own check."""
    torch = _sm90_torch()
    monkeypatch.setenv("KB_TILE_WGMMA_A", "shared")
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, dout = (torch.randn(2, 4, 256, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    o, *grads = BWD.forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), 256, causal)
    assert_matches_sdpa_autograd(q, k, v, dout, o, grads, causal)
