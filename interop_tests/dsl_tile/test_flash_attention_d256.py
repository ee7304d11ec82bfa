"""Head dim 256 in the flash-attention examples: forward (with its log-sum-exp) and backward on the CPU
simulator and the lowered sm_90 / sm_80 simulators against float64 written here, ptxas -v on the tiles
the examples pick (sm_90a and sm_80), sequences that are no multiple of the largest tile, and the GPU
against torch autograd of scaled_dot_product_attention in float64."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from attention_refs import assert_matches_sdpa_autograd, gqa64
from ptxas_kit import ptxas_verbose, spill_bytes

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
_spec = importlib.util.spec_from_file_location("flash_attention_bwd_d256", ROOT / "examples" / "flash_attention_bwd.py")
BWD = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(BWD)
FA = BWD.fwd
D = 256


def inputs(rng, heads, seq, dtype=np.float32):
    return tuple(rng.standard_normal((heads * seq, D)).astype(dtype) for _ in range(4))


def nan(*shape):
    return np.full(shape, np.nan, np.float32)


def close(got, want, rel, name):
    np.testing.assert_allclose(got, want, rtol=0, atol=rel * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize("seq", [64, 96], ids=["s64", "s96"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_simulator_forward_and_gradients_match_float64(rng, seq, causal):
    """S96: no multiple of the forward's 64-row tile on sm_80, so launch_args refuses it there; the
    simulator runs the portable tiles' picks where they divide, else the refusal is the answer."""
    q, k, v, dout = inputs(rng, 2, seq)
    want_o, want = gqa64(q, k, v, dout, seq, causal, 1)
    if seq % 64:
        with pytest.raises(ValueError, match="multiple of 64"):
            BWD.forward_and_backward(q, k, v, dout, seq, causal, simulate=True)
        return
    o, *grads = BWD.forward_and_backward(q, k, v, dout, seq, causal, simulate=True)
    close(o, want_o, 5e-3, "o")                      # f32 inputs: tf32 products, as on the tensor cores
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        close(got, ref, 5e-3, name)


@pytest.mark.slow
@pytest.mark.parametrize("arch,wgmma", [("sm_90", True), ("sm_80", False)])
def test_lowered_kernels_match_float64(rng, arch, wgmma):
    """The GPU lowering at the tiles the examples pick for `arch`, bf16, through the CPU semantics of
    its PTX: P and dS rounded to bf16 for the products (bound 1e-2 as at D64/D128)."""
    seq = 128
    q, k, v, dout = inputs(rng, 2, seq, ml_dtypes.bfloat16)
    o, lse, delta = nan(2 * seq, D), nan(2 * seq), nan(2 * seq)
    args = FA.launch_args_lse(q, k, v, o, lse, seq, True, tensor_cores=True, wgmma=wgmma)
    FA.flash_fwd_lse.simulate_lowered(*args, tensor_cores=True, arch=arch)
    grads = tuple(nan(2 * seq, D) for _ in range(3))
    for kern, a in BWD.launch_args(q, k, v, o, dout, lse, delta, *grads, seq, True, tensor_cores=True, wgmma=wgmma):
        kern.simulate_lowered(*a, tensor_cores=True, arch=arch)
    want_o, want = gqa64(q, k, v, dout, seq, True, 1)
    close(o, want_o, 1e-2, "o")
    for name, got, ref in zip(("dq", "dk", "dv"), grads, want):
        close(got, ref, 1e-2, name)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_picked_tiles_assemble_without_spills(arch, causal, tmp_path):
    """ptxas -v at the examples' D256 tiles. The one exception, pinned: the backward's dQ kernel at
    32 x 16, causal, where ptxas itself settles on 128 registers and spills 4 bytes."""
    seq, rows = 256, 512
    bf = [np.zeros((rows, D), ml_dtypes.bfloat16) for _ in range(4)]
    wg = arch == "sm_90"
    kernels = [(FA.flash_fwd_lse, FA.launch_args_lse(*bf[:3], nan(rows, D), nan(rows), seq, causal,
                                                     tensor_cores=True, wgmma=wg))]
    kernels += BWD.launch_args(*bf[:3], nan(rows, D), bf[3], nan(rows), nan(rows), nan(rows, D), nan(rows, D),
                               nan(rows, D), seq, causal, tensor_cores=True, wgmma=wg)
    for kern, args in kernels:
        allowed = 4 if (kern is BWD.flash_bwd_dq and causal) else 0
        assert spill_bytes(ptxas_verbose(kern.compile(args, arch).ptx, arch, tmp_path)) <= allowed, kern.name


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_matches_torch_autograd_of_sdpa_in_float64(causal):
    """B2 H4 S256 D256 bf16, O and the gradients relative to their largest value: bound 1e-2."""
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    g = torch.Generator(device="cuda").manual_seed(256 + causal)
    q, k, v, dout = (torch.randn(2, 4, 256, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4))
    o, *grads = BWD.forward_and_backward(*(x.reshape(-1, D) for x in (q, k, v, dout)), 256, causal)
    assert_matches_sdpa_autograd(q, k, v, dout, o, grads, causal)


def test_a_tile_neither_path_fits_names_both_paths():
    """128 x 64 on 8 warps for dK/dV at D256: the tensor-core buffers exceed shared memory and the
    portable path tried instead does too; the error says both, not only the fallback's reason."""
    from dsl import tile
    from dsl.tile.lower.errors import LoweringError
    rows = 512
    bf = np.zeros((rows, D), ml_dtypes.bfloat16)
    wide = tile.kernel(BWD.flash_bwd_dkdv.pyfunc, num_warps=8)
    args = (bf, bf, bf, bf, nan(rows), nan(rows), tile.partition(nan(rows, D), (128, D)),
            tile.partition(nan(rows, D), (128, D)), 256, D ** -0.5, 64, True, 1)
    with pytest.raises(LoweringError, match=r"tensor-core products need \d+ bytes .* portable FMA path tried "
                                            r"instead fails too: .*relayouts"):
        wide.compile(args, "sm_90")
