"""TMA stores and TMA reduce-adds at small shapes, for the sanitizer passes (scripts/gpu_check.py lists
this file in SANITIZE_FILES, so memcheck, racecheck, synccheck and initcheck run every test here): the
GEMM epilogue through TMA stores (the default loop, persistent warp-specialised), tile.atomic_add of
accumulators by TMA reduce-adds in a loop, the attention forward's output by TMA stores, and the fused
attention backward in both dQ forms and on 128 key rows (its dK and dV staged in the drained ring). racecheck is what sees a staging tile rewritten while a copy still
reads it, which the lock-step simulator cannot. Each test checks its results against float64 NumPy."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K
import tile_reduce_lib as R

import bridge
from dsl import tile

from attention_refs import attention64

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
TMA = {"tma_store": True}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_tma_sanitized", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _sm90_or_skip():
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA stores and reduce-adds: sm_90 or newer")


def _bf16(rng, shape):
    return rng.standard_normal(shape).astype(ml_dtypes.bfloat16)


@pytest.mark.parametrize("mode", ["sync", "pws"])
def test_small_tma_store_gemm(rng, mode):
    """136 x 72 x 264: ragged edge tiles, three tiles a persistent block walks with 2 of them."""
    _sm90_or_skip()
    a, b = _bf16(rng, (136, 72)), _bf16(rng, (72, 264))
    c = bridge.from_host(np.full((136, 264), np.nan, np.float32))
    kern = tile.kernel(K.gemm.pyfunc, persistent=mode == "pws",
                       lowering={**TMA, "gemm_pipeline": "ws" if mode == "pws" else "sync"})
    kern(bridge.from_host(a), bridge.from_host(b), tile.partition(c, (128, 128)), 64)
    np.testing.assert_allclose(c.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


def test_small_tma_reduce_adds_in_a_loop(rng):
    _sm90_or_skip()
    a, b = _bf16(rng, (136, 200)), _bf16(rng, (200, 264))
    start = rng.standard_normal((136, 264)).astype(np.float32)
    c = bridge.from_host(start)
    marks = bridge.from_host(np.zeros((136, 264), np.float32))
    kern = tile.kernel(R.gemm_by_k_updates.pyfunc, lowering=TMA)
    kern(bridge.from_host(a), bridge.from_host(b), tile.partition(marks, (64, 128)), c, 64)
    want = start + 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(c.to_host(), want, rtol=1e-4, atol=1e-3)


def test_small_attention_forward_stores_its_output_by_tma(rng):
    _sm90_or_skip()
    fa = _load("flash_attention")
    seq, heads, d = 128, 2, 64
    q, k, v = (_bf16(rng, (heads * seq, d)) for _ in range(3))
    out = bridge.from_host(np.full((heads * seq, d), np.nan, np.float32))
    kern = tile.kernel(fa.flash_fwd.pyfunc, lowering={**TMA, "loop_pipeline": "tma"})
    kern(*fa.launch_args(*(bridge.from_host(x) for x in (q, k, v)), out, seq, True))
    want = attention64(*(x.astype(np.float32) for x in (q, k, v)), seq, True)
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-2, atol=5e-3)


@pytest.mark.parametrize("form", ["atomic dQ", "TMA reduce dQ", "128x64 w8, TMA ring + TMA reduce dQ"])
def test_small_fused_attention_backward(form):
    """B1 H2 S128 D64, causal, bf16 inputs: the bound of the two-kernel backward's tests (1e-2 of the
    largest gradient: P and dS are rounded to bf16 for the products)."""
    torch = pytest.importorskip("torch", reason="the fused example takes torch CUDA tensors")
    _sm90_or_skip()
    fused = _load("flash_attention_bwd_fused")
    seq, d = 128, 64
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v, dout = (torch.randn(2 * seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    _, *grads = fused.forward_and_backward(q, k, v, dout, seq, True, **fused.form_options(form))
    want = fused.bwd.reference(*(x.float().cpu().numpy() for x in (q, k, v, dout)), seq, True)
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        err = np.abs(got.cpu().numpy().astype(np.float64) - w).max() / np.abs(w).max()
        assert err < 1e-2, (name, err)
