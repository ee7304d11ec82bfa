"""The flash-attention tile kernel (examples/flash_attention.py): the simulator against a float64
NumPy reference, the GPU against torch's scaled_dot_product_attention, causal and not, head dims 64
and 128, f16 and bf16; bad shapes refused by the host wrapper before anything runs."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import bridge
from attention_refs import attention64

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("flash_attention_example", ROOT / "examples" / "flash_attention.py")
FA = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FA)




@pytest.mark.parametrize("d,dtype", [(64, np.float32), (128, np.float32), (64, np.float16), (128, np.float16),
                                     (256, np.float16)], ids=["d64-f32", "d128-f32", "d64-f16", "d128-f16", "d256-f16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_simulator_matches_numpy(rng, d, dtype, causal):
    """f32, and f16 in and out (the output in the inputs' dtype, as SDPA returns it: the f32 result
    rounded once), against float64."""
    seq, heads = 128, 3
    q, k, v = (rng.standard_normal((heads * seq, d)).astype(dtype) for _ in range(3))
    out = np.full_like(q, np.nan)
    FA.flash_fwd.simulate(*FA.launch_args(q, k, v, out, seq, causal))
    np.testing.assert_allclose(out.astype(np.float64), attention64(q, k, v, seq, causal), rtol=1e-2, atol=5e-3)


@pytest.mark.slow
@pytest.mark.parametrize("lowering,warps,tiles", [
    ({}, None, None),
    ({"loop_pipeline": "ws", "setmaxnreg": "240/24", "ws_chain": True, "pingpong": True}, 8, (128, 128)),
], ids=["default", "ws-pingpong"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_bf16_output_matches_float64_in_the_lowered_sm90_simulator(rng, lowering, warps, tiles, causal):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    seq, d = 256, 128
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((2 * seq, d), np.nan, ml_dtypes.bfloat16)
    args = FA.launch_args(q, k, v, out, seq, causal, tensor_cores=True, wgmma=True, tiles=tiles)
    FA.variant(FA.flash_fwd, lowering or None, warps).simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out.astype(np.float64), attention64(q, k, v, seq, causal), rtol=2e-2, atol=1e-2)


def test_an_output_of_another_dtype_is_refused_before_anything_runs():
    q = np.zeros((256, 64), np.float16)
    for dtype in (np.float64, np.int32, np.float16):
        out = np.full((256, 64), 7, dtype)
        src = q.astype(np.float32) if dtype == np.float16 else q       # f16 out beside f32 inputs
        with pytest.raises(ValueError, match=r"out: expected float32 or q's dtype"):
            FA.launch_args(src, src, src, out, 128, False)
        assert (out == 7).all()


@pytest.mark.parametrize("bad,text", [
    (dict(seq=100), "multiple of 64"),
    (dict(seq=96), "rows of sequences of 96"),
    (dict(d=32), "head dim 32 not supported"),
    (dict(vshape=(256, 48)), "v: expected shape"),
])
def test_bad_shapes_are_refused_naming_the_argument(bad, text):
    d = bad.get("d", 64)
    q = np.zeros((256, d), np.float32)
    v = np.zeros(bad.get("vshape", (256, d)), np.float32)
    with pytest.raises(ValueError, match=text):
        FA.launch_args(q, q, v, np.zeros((256, d), np.float32), bad.get("seq", 128), False)


def test_the_tile_is_the_first_preferred_one_that_divides_the_sequence():
    """On mma.sync D64 takes 128 query rows a block where the sequence allows it, 64 otherwise; on
    sm_90's warpgroup MMA 64 query rows and 128 key rows where it allows; D128 takes 64x64 on both."""
    def tile_of(seq, d, wgmma):
        q = np.zeros((2 * seq, d), np.float32)
        args = FA.launch_args(q, q, q, np.zeros((2 * seq, d), np.float32), seq, False, tensor_cores=True,
                              wgmma=wgmma)
        return args[3].tile_shape[0], args[6]
    assert tile_of(256, 64, False) == (128, 64)
    assert tile_of(192, 64, False) == (64, 64)
    assert tile_of(256, 128, False) == (64, 64)
    assert tile_of(256, 64, True) == (64, 128)
    assert tile_of(192, 64, True) == (64, 64)
    assert tile_of(256, 128, True) == (64, 64)


@pytest.mark.gpu
@pytest.mark.parametrize("d,seq", [(64, 192), (64, 256), (128, 192)])   # D64 at S256: 128 query rows a block
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_matches_torch_sdpa(d, seq, causal, dtype):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    batch, heads = 2, 3
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
               for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    FA.flash_fwd(*FA.launch_args(*(x.reshape(-1, d) for x in (q, k, v)), out, seq, causal))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err
    assert bridge.gpu_available()


@pytest.mark.gpu
@pytest.mark.parametrize("d,seq", [(64, 256), (128, 384)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("tuned", [False, True], ids=["default", "tuned"])
def test_gpu_output_in_the_inputs_dtype_matches_torch_sdpa(d, seq, causal, dtype, tuned):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    batch, heads = 2, 3
    g = torch.Generator(device="cuda").manual_seed(d + causal + 11)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
               for _ in range(3))
    out = torch.full((batch * heads * seq, d), 123.0, device="cuda", dtype=q.dtype)
    rows = [x.reshape(-1, d) for x in (q, k, v)]
    if tuned:
        FA.flash_fwd_tuned(*rows, out, seq, causal)
    else:
        FA.flash_fwd(*FA.launch_args(*rows, out, seq, causal))
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err


def _configs(d, seq, causal, arch):
    q = np.zeros((2 * seq, d), np.float32)
    return [(c.tiles["o"][0], c.constants["bn"], c.num_warps, c.lowering.get("loop_pipeline"), bool(c.persistent))
            for c in FA.tuned_configs(q, seq, causal, arch=arch)]


def test_autotune_candidates_are_the_default_first_then_the_sm90_ladders_best_that_fit():
    """sm_80: the default alone. sm_90: the default (wgmma tiles), the TMA ring with fp_fusion + ftz, and
    128 x 128 on a producer warpgroup with setmaxnreg (its causal diagonal loop on the producer's ring,
    ws_chain) with ping-pong, also with the product overlap, also with Q copied by the producer, persistent
    or not, and persistent with two buffers of Q and the turns through the program, each only where its tiles
    divide the sequence; causal also persistent with its tiles in a snake, with and without those two; every
    sm_90 candidate divides by one reciprocal a row. D256: 128 x 64 on a producer warpgroup with Q copied by it,
    ping-pong and the overlap."""
    ws = [(128, 128, 8, "ws", False)] * 3 + [(128, 128, 8, "ws", True)] * 2
    assert _configs(128, 256, True, "sm_80") == [(64, 64, None, None, False)]
    assert _configs(128, 256, False, "sm_90a") == [(64, 64, None, None, False), (64, 64, None, "tma", False)] + ws
    assert _configs(128, 192, False, "sm_90a") == [(64, 64, None, None, False), (64, 64, None, "tma", False)]
    assert _configs(256, 256, False, "sm_90a") == [(32, 128, None, None, False), (128, 64, 8, "ws", False)]
    assert _configs(256, 320, False, "sm_90a") == [(32, 64, None, None, False)]      # 128 rows do not divide 320
    assert _configs(128, 256, True, "sm_90a") == _configs(128, 256, False, "sm_90a") + [(128, 128, 8, "ws", True)] * 2
    assert _configs(64, 256, True, "sm_90a") == [(64, 128, None, None, False), (64, 128, None, "tma", False)] + ws + \
        [(64, 64, None, "tma", False)] + [(128, 128, 8, "ws", True)] * 2
    configs = FA.tuned_configs(np.zeros((512, 128), np.float32), 256, True, arch="sm_90a")
    pingpong, overlap, q_by_producer, walk, walk_q2, snake, snake_q2 = configs[-7:]
    assert snake.lowering == {**walk.lowering, "persistent_order": "snake"} and snake.persistent is True
    q2_span = {"produced_a_buffers": 2, "pingpong_span": "program"}
    assert walk_q2.lowering == {**walk.lowering, **q2_span} and walk_q2.persistent is True
    assert snake_q2.lowering == {**snake.lowering, **q2_span} and snake_q2.persistent is True
    assert "persistent_order" not in walk.lowering
    assert pingpong.lowering == {"loop_pipeline": "ws", "setmaxnreg": "240/24", "ws_chain": True, "pingpong": True,
                                 "fp_fusion": True, "ftz": True, "div_reciprocal": True}
    assert overlap.lowering == {**pingpong.lowering, "product_overlap": True}
    assert walk.lowering == q_by_producer.lowering == {**overlap.lowering, "wgmma_a": "shared"}
    assert walk.persistent is True and overlap.persistent is None and q_by_producer.persistent is None
    assert all(c.lowering["div_reciprocal"] for c in configs[1:]) and not configs[0].lowering
    (d256,) = FA.tuned_configs(np.zeros((512, 256), np.float32), 256, True, arch="sm_90a")[1:]
    no_rcp = {k: v for k, v in overlap.lowering.items() if k != "div_reciprocal"}
    assert d256.lowering == {**no_rcp, "wgmma_a": "shared"} and d256.tiles["o"] == (128, 256)
    assert d256.constants["bn"] == 64 and d256.num_warps == 8 and not d256.persistent


def test_the_autotuned_launcher_runs_its_first_candidate_on_the_simulator(rng):
    seq, d = 128, 64
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(np.float32) for _ in range(3))
    out = np.full_like(q, np.nan)
    tuned = FA.tile.autotune(FA.flash_fwd, FA.tuned_configs(q, seq, True))
    tuned.simulate(q, k, v, out, seq, d ** -0.5)
    np.testing.assert_allclose(out, attention64(q, k, v, seq, True), rtol=0, atol=1e-2)


def test_the_autotuned_launcher_refuses_bad_shapes_before_anything_runs():
    q = np.zeros((256, 64), np.float32)
    out = np.full((256, 64), np.nan, np.float32)
    with pytest.raises(ValueError, match="k: expected shape"):
        FA.flash_fwd_tuned(q, np.zeros((128, 64), np.float32), q, out, 128, False)
    assert np.isnan(out).all()


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_autotuned_launcher_matches_torch_sdpa(d, causal):
    """flash_fwd_tuned times its candidates on first use (each compiled and launched on scratch output)
    and then runs the pick on the caller's output: the result matches SDPA whichever it picked."""
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    batch, heads, seq = 2, 3, 512
    g = torch.Generator(device="cuda").manual_seed(d + causal + 7)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = torch.full((batch * heads * seq, d), 12345.0, device="cuda")
    tuned = FA.flash_fwd_tuned(*(x.reshape(-1, d) for x in (q, k, v)), out, seq, causal)
    assert len(tuned.picks) == 1
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err


def test_the_lse_kernel_on_warpgroup_mma_is_the_tma_ring_variant_and_elsewhere_the_kernel():
    assert FA.lse_kernel(128, False) is FA.flash_fwd_lse and FA.lse_kernel(256, True) is FA.flash_fwd_lse
    assert FA.lse_kernel(64, True) is FA.flash_fwd_lse           # not measured with the rung: unchanged
    fast = FA.lse_kernel(128, True)
    assert fast is FA.lse_kernel(128, True) and fast.pyfunc is FA.flash_fwd_lse.pyfunc
    assert dict(fast.lowering) == {"loop_pipeline": "tma", "fp_fusion": True, "ftz": True}


def lowered_lse_matches_float64(rng, seq: int, d: int, causal: bool, launch, tmp_path) -> str:
    """`launch(q, k, v, o, lse)` -> (kernel, arguments) run in the lowered sm_90 simulator on two bf16 heads
    of `seq`: O and the log-sum-exp against float64, and no spills (ptxas); returns the PTX."""
    import ml_dtypes
    from ptxas_kit import ptxas_verbose, spill_bytes
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    o, lse = np.full((2 * seq, d), np.nan, np.float32), np.full(2 * seq, np.nan, np.float32)
    kern, args = launch(q, k, v, o, lse)
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(o, attention64(q, k, v, seq, causal), rtol=0, atol=1e-2)
    np.testing.assert_allclose(lse, lse64(q, k, seq, causal), rtol=0, atol=1e-2)
    ptx = kern.compile(args, "sm_90").ptx
    assert spill_bytes(ptxas_verbose(ptx, "sm_90", tmp_path)) == 0
    return ptx


def lse64(q, k, seq: int, causal: bool) -> np.ndarray:
    """Float64 log-sum-exp of each query row's scaled scores, for (2 * seq, d) row stacks of two heads."""
    d = q.shape[1]
    q64, k64 = (x.astype(np.float64).reshape(2, seq, d) for x in (q, k))
    s = q64 @ k64.transpose(0, 2, 1) / np.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((seq, seq), bool)), s, -np.inf)
    return (s.max(-1) + np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1))).reshape(-1)


@pytest.mark.slow
@pytest.mark.parametrize("d", [128])
def test_the_lse_variant_matches_float64_in_the_lowered_sm90_simulator_and_assembles_without_spills(rng, d, tmp_path):
    """O and the log-sum-exp of the TMA-ring + fp_fusion + ftz variant (what the SDPA drop-in and the
    backward example launch on sm_90) through the CPU semantics of its PTX, causal, bf16 inputs."""
    def launch(q, k, v, o, lse):
        return FA.lse_kernel(d, True), FA.launch_args_lse(q, k, v, o, lse, 128, True, tensor_cores=True, wgmma=True)
    ptx = lowered_lse_matches_float64(rng, 128, d, True, launch, tmp_path)
    assert "cp.async.bulk.tensor" in ptx and "ex2.approx.ftz" in ptx


def test_lse_launch_takes_the_wide_producer_form_at_d128():
    """lse_launch: LSE_WIDE (128 x 128 tiles, 8 warps, a producer warpgroup with ping-pong and the product
    overlap) at D128 on warpgroup MMA when 128 divides seq, causal or not; other head dims, other lengths
    and no warpgroup MMA keep lse_kernel on launch_args_lse's tiles."""
    def pick(d, seq, causal, wgmma):
        rows = 2 * seq
        x, o, lse = np.zeros((rows, d), np.float32), np.zeros((rows, d), np.float32), np.zeros(rows, np.float32)
        kern, args = FA.lse_launch(x, x, x, o, lse, seq, causal, wgmma=wgmma)
        return kern, args[3].tile_shape[0], args[4].tile_shape, args[7]
    (bm, bn), warps, lowering, persistent = FA.LSE_WIDE
    assert lowering["pingpong"] and lowering["product_overlap"] and lowering["ws_chain"] and not persistent
    for causal in (False, True):
        kern, rows, lse_tile, keys = pick(128, 256, causal, True)
        assert (rows, lse_tile, keys) == (bm, (bm,), bn) and kern.num_warps == warps
        assert kern.pyfunc is FA.flash_fwd_lse.pyfunc and dict(kern.lowering) == lowering
    for d, seq, causal, wgmma in ((64, 256, False, True), (128, 320, True, True), (128, 256, False, False)):
        kern, rows, _, _ = pick(d, seq, causal, wgmma)
        assert kern is FA.lse_kernel(d, wgmma), (d, seq, causal, wgmma)
        assert rows != bm or d == 64, (d, seq, causal, wgmma)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_wide_lse_form_matches_float64_in_the_lowered_sm90_simulator_and_assembles_without_spills(
        rng, tmp_path, causal):
    """O and the log-sum-exp of LSE_WIDE (what the SDPA drop-in launches at D128 on sm_90) through the
    CPU semantics of its PTX, bf16 inputs, two heads of 256."""
    def launch(q, k, v, o, lse):
        kern, args = FA.lse_launch(q, k, v, o, lse, 256, causal, wgmma=True)
        assert kern.num_warps == 8
        return kern, args
    ptx = lowered_lse_matches_float64(rng, 256, 128, causal, launch, tmp_path)
    assert "setmaxnreg" in ptx and "cp.async.bulk.tensor" in ptx and "bar.sync" in ptx


# ------------------------------------------------------------------ infer_launch: no log-sum-exp wanted
def _infer_pick(d, seq, causal, wgmma, out_dtype=np.float32):
    rows = 2 * seq
    x = np.zeros((rows, d), np.float16)
    out = np.zeros((rows, d), out_dtype)
    kern, args = FA.infer_launch(x, x, x, out, seq, causal, wgmma=wgmma)
    return kern, args[3].tile_shape[0], args[6]


def test_infer_launch_takes_the_measured_fastest_form_per_head_dim_where_its_tiles_fit():
    """INFER_SM90: D128 the 128 x 128 ws rung with ping-pong and the overlap on 8 warps, persistent, Q by
    the producer and one reciprocal a row; D64 the TMA ring on launch_args' tiles with the reciprocal;
    D256 128 x 64 on 8 warps with Q by the producer; elsewhere (no warpgroup MMA, 128 not dividing seq)
    flash_fwd itself."""
    (bm, bn), warps, lowering, persistent = FA.INFER_SM90[128]
    kern, rows, keys = _infer_pick(128, 256, True, True, np.float16)
    assert (rows, keys, kern.num_warps) == (bm, bn, warps) and dict(kern.lowering) == lowering
    assert kern.pyfunc is FA.flash_fwd.pyfunc and lowering["pingpong"] and lowering["product_overlap"]
    assert persistent and kern.persistent and lowering["wgmma_a"] == "shared" and lowering["div_reciprocal"]
    kern, rows, _ = _infer_pick(64, 256, False, True)
    assert not kern.persistent and FA.INFER_SM90[64][2]["div_reciprocal"]
    assert dict(kern.lowering) == FA.INFER_SM90[64][2] and rows == FA.launch_args(
        *[np.zeros((512, 64), np.float16)] * 3, np.zeros((512, 64), np.float32), 256, False, wgmma=True)[3].tile_shape[0]
    kern, rows, keys = _infer_pick(256, 256, False, True)
    assert (rows, keys, kern.num_warps) == (128, 64, 8) and dict(kern.lowering)["wgmma_a"] == "shared"
    for d, seq, wgmma in ((128, 320, True), (128, 256, False), (256, 320, True), (64, 256, False)):
        kern, _, _ = _infer_pick(d, seq, False, wgmma)
        assert kern is FA.flash_fwd, (d, seq, wgmma)


def test_infer_launch_refuses_bad_arguments_before_anything_runs():
    q = np.zeros((512, 128), np.float16)
    out = np.full((512, 64), 7.0, np.float16)
    with pytest.raises(ValueError, match="out"):
        FA.infer_launch(q, q, q, out, 256, False, wgmma=True)
    assert (out == 7).all()


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_infer_launchs_sm90_pick_with_a_bf16_output_matches_float64_in_the_lowered_simulator(rng, d, causal):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    seq = 256
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = np.full((2 * seq, d), np.nan, ml_dtypes.bfloat16)
    kern, args = FA.infer_launch(q, k, v, out, seq, causal, wgmma=True)
    assert kern is not FA.flash_fwd
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(out.astype(np.float64), attention64(q, k, v, seq, causal), rtol=2e-2, atol=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("d", [128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_infer_launchs_wide_picks_serve_grouped_query_heads_in_the_lowered_simulator(rng, d, causal):
    """Two query heads a key/value head (the drop-in under enable_gqa) on the producer-warpgroup rungs:
    D128's persistent 128 x 128, D256's 128 x 64."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    seq, group = 256, 2
    q = rng.standard_normal((group * seq, d)).astype(ml_dtypes.bfloat16)
    k, v = (rng.standard_normal((seq, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    out = np.full(q.shape, np.nan, ml_dtypes.bfloat16)
    kern, args = FA.infer_launch(q, k, v, out, seq, causal, group=group, wgmma=True)
    assert dict(kern.lowering) == FA.INFER_SM90[d][2]
    kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    want = FA.reference(q, k, v, seq, causal, group=group)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("d,seq", [(64, 256), (128, 384), (128, 320), (256, 384)])   # 320: flash_fwd's own tiles
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gpu_infer_launch_matches_torch_sdpa_in_the_inputs_dtype(d, seq, causal, dtype):
    torch = pytest.importorskip("torch", reason="the SDPA reference needs torch")
    import torch.nn.functional as F
    batch, heads = 2, 3
    g = torch.Generator(device="cuda").manual_seed(d + seq + causal)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=getattr(torch, dtype), generator=g)
               for _ in range(3))
    out = torch.full((batch * heads * seq, d), 123.0, device="cuda", dtype=q.dtype)
    kern, args = FA.infer_launch(*(x.reshape(-1, d) for x in (q, k, v)), out, seq, causal)
    kern(*args)
    torch.cuda.synchronize()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal)
    err = (out.reshape(ref.shape).double() - ref).abs().max().item()
    assert err < 2e-2, err
