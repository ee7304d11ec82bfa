"""The fused flash-attention backward (examples/flash_attention_bwd_fused.py): dK, dV and dQ from one
kernel, dQ added atomically into a tile.Atomic f32 array (per element, or by TMA reduce-adds under
`tma_store` on sm_90). The simulator and the lowered sm_90 kernels against float64 gradients from the
softmax Jacobian (test_flash_attention_bwd.grads64), GQA, bad inputs refused before anything runs,
ptxas for sm_90a, and the GPU against torch autograd of SDPA in float64."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from ptxas_kit import ptxas_verbose, spill_bytes
from test_flash_attention_bwd import grads64, inputs, nan

import bridge

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
_spec = importlib.util.spec_from_file_location("flash_attention_bwd_fused", ROOT / "examples" / "flash_attention_bwd_fused.py")
FUSED = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FUSED)
FA = FUSED.bwd.fwd
REDUCE = "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add"


def lowered_backward(q, k, v, dout, seq, causal, form, group=1, out_dtype=np.float32):
    """The forward (lowered) and the fused backward's launches, lowered for sm_90, in the simulator;
    O, dK and dV in `out_dtype` (the SDPA drop-in's training path: the inputs' dtype)."""
    rows, d = q.shape
    o, lse, delta = nan(rows, d).astype(out_dtype), nan(rows), nan(rows)
    FA.flash_fwd_lse.simulate_lowered(*FA.launch_args_lse(q, k, v, o, lse, seq, causal, group=group),
                                      tensor_cores=True, arch="sm_90")
    dq, dk, dv = nan(rows, d), nan(k.shape[0], d).astype(out_dtype), nan(k.shape[0], d).astype(out_dtype)
    steps = FUSED.launch_args(q, k, v, o, dout, lse, delta, dq, dk, dv, seq, causal, tensor_cores=True, wgmma=True,
                              group=group, **FUSED.form_options(form))
    fused = steps[1]
    assert (REDUCE in fused[0].compile(fused[1], "sm_90").ptx) == (form != "atomic dQ")
    for kern, args in steps:
        kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    return dq, dk, dv


@pytest.mark.parametrize("d", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_fused_backward_matches_float64_in_the_simulator(rng, d, causal):
    seq = 128
    q, k, v, dout = inputs(rng, 2, seq, d)
    _, *grads = FUSED.forward_and_backward(q, k, v, dout, seq, causal, simulate=True)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max(), err_msg=name)


def test_forward_and_backward_stores_o_dk_dv_in_the_dtype_asked_and_dq_in_f32(rng):
    """The drop-in's training dtypes through the example's own helper (the bf16 GPU test runs it so)."""
    seq, d = 128, 64
    q, k, v, dout = inputs(rng, 1, seq, d, ml_dtypes.bfloat16)
    o, *grads = FUSED.forward_and_backward(q, k, v, dout, seq, False, simulate=True, dtype=ml_dtypes.bfloat16)
    assert [x.dtype for x in (o, *grads)] == [ml_dtypes.bfloat16, np.float32, ml_dtypes.bfloat16, ml_dtypes.bfloat16]
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, False)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=1.2e-2 * np.abs(want).max(),
                                   err_msg=name)


def test_grouped_query_heads_add_into_their_own_query_rows(rng):
    """group 2: a key/value block walks both query heads of its group, each adding into its own rows of dQ."""
    seq, d, group = 64, 64, 2
    q, dout = inputs(rng, 4, seq, d)[:2]
    k, v = inputs(rng, 2, seq, d)[:2]
    _, *grads = FUSED.forward_and_backward(q, k, v, dout, seq, True, simulate=True, group=group)
    want = FUSED.bwd.reference(q, k, v, dout, seq, True, group)
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        np.testing.assert_allclose(got, w, rtol=0, atol=5e-3 * np.abs(w).max(), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("form,d", [(form, d) for form in FUSED.LADDER for d in (64, 128) if FUSED.applies(form, d)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_lowered_sm90_fused_backward_matches_float64(rng, form, d, causal):
    """Every form of the ladder; bf16 inputs: P and dS rounded to bf16 for the products, as the
    two-kernel backward's test bounds (fp_fusion rounds once where the simulator rounds twice)."""
    seq = 128
    q, k, v, dout = inputs(rng, 2, seq, d, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, seq, causal, form)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=name)


PICKS = sorted({(form, d) for d, form in FUSED.FASTEST.items()} | {(form, d) for d, form in FUSED.FASTEST_CAUSAL.items()})


@pytest.mark.slow
@pytest.mark.parametrize("form,d", PICKS)
def test_the_picks_store_o_dk_dv_in_bf16_as_the_sdpa_drop_in_asks(rng, form, d):
    """The drop-in's training path: O written and read in bf16, dK and dV stored in bf16 by the kernel's
    epilogue (half the staging of f32), dQ summed in f32; still float64's gradients within bf16's bounds."""
    seq = 256
    q, k, v, dout = inputs(rng, 1, seq, d, ml_dtypes.bfloat16)
    causal = form == FUSED.FASTEST_CAUSAL.get(d, FUSED.FASTEST[d])
    grads = lowered_backward(q, k, v, dout, seq, causal, form, out_dtype=ml_dtypes.bfloat16)
    assert [g.dtype for g in grads] == [np.float32, ml_dtypes.bfloat16, ml_dtypes.bfloat16]
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=1.2e-2 * np.abs(want).max(),
                                   err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("group", [1, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_heads_in_turn_reorder_the_blocks_and_every_gradient_still_matches_float64(rng, causal, group):
    """Three (key) heads of two key blocks each in the lowered simulator: the blocks take the heads' first key
    blocks, then their second (tile.block_order), a real permutation of the grid; dQ, dK and dV against float64.
    Grouped: two query heads a key head, as the SDPA drop-in's GQA runs the causal picks (FASTEST_CAUSAL)."""
    form = ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
            "heads in turn")
    assert FUSED.form_options(form)["heads_in_turn"] == 8
    seq, d = 256, 128
    q, _, _, dout = inputs(rng, 3 * group, seq, d, ml_dtypes.bfloat16)
    _, k, v, _ = inputs(rng, 3, seq, d, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, seq, causal, form, group=group)
    want = (grads64(q, k, v, dout, seq, causal) if group == 1 else
            FUSED.bwd.reference(*(x.astype(np.float64) for x in (q, k, v, dout)), seq, causal, group))
    for name, got, w in zip(("dq", "dk", "dv"), grads, want):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-2 * np.abs(w).max(), err_msg=name)


def test_the_last_wave_is_cut_where_parts_finish_sooner():
    """2048 key blocks on 132 SMs: 1980 whole (15 waves), 68 in thirds (204 blocks: two waves of a third, not one
    of a whole); a grid of whole waves stays whole; one smaller than the GPU is cut as far as MAX_PARTS."""
    assert FUSED.last_wave(2048, 132) == (1980, 3)
    assert FUSED.last_wave(1980, 132) == (1980, 1)
    assert FUSED.last_wave(16, 132) == (0, 4)
    assert FUSED.last_wave(6, 4) == (4, 2)
    assert FUSED.last_wave(7, 0) == (7, 1)                  # no GPU: no slots to fill


SPLIT_FORMS = sorted(FUSED.SPLIT)


@pytest.mark.parametrize("form", SPLIT_FORMS)
@pytest.mark.parametrize("heads,slots,launched", [(3, 4, {128: [(1, 0), (2, 4)], 64: [(1, 0), (2, 4)]}),
                                                  (1, 8, {128: [(4, 0)], 64: [(2, 0)]})],
                         ids=["whole and parts", "all parts"])
def test_split_key_blocks_sum_their_parts_to_float64_gradients(rng, form, heads, slots, launched):
    """Full attention's last wave split (lowered sm_90, simulated): the whole key blocks, then the split ones in
    parts over their query blocks (no more parts than query blocks: 4 at D128, 2 of 128 rows at D64), each
    part's dK and dV rows in f32 scratch, summed by sum_parts into dK and dV."""
    seq = 256
    d = 64 if form.startswith("128x128") else 128
    launched = launched[d]
    q, k, v, dout = inputs(rng, heads, seq, d, ml_dtypes.bfloat16)
    rows = q.shape[0]
    o, lse, delta = nan(rows, d), nan(rows), nan(rows)
    FA.flash_fwd_lse.simulate_lowered(*FA.launch_args_lse(q, k, v, o, lse, seq, False), tensor_cores=True,
                                      arch="sm_90")
    dq, dk, dv = nan(rows, d), nan(rows, d), nan(rows, d)
    steps = FUSED.launch_args(q, k, v, o, dout, lse, delta, dq, dk, dv, seq, False, tensor_cores=True, wgmma=True,
                              slots=slots, **FUSED.form_options(form))
    assert [kern.name for kern, _ in steps] == ["attn_bwd_preprocess_zero", *["flash_bwd_fused"] * len(launched),
                                                "sum_parts"]
    assert [args[-2:] for _, args in steps[1:-1]] == launched           # (parts, first key block)
    for kern, args in steps:
        kern.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    for name, got, want in zip(("dq", "dk", "dv"), (dq, dk, dv), grads64(q, k, v, dout, seq, False)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize("causal,group", [(True, 1), (False, 2)], ids=["causal", "gqa"])
def test_causal_and_grouped_backwards_are_never_split(causal, group):
    """Causal key blocks differ in work (block_order evens them out) and a grouped block walks several heads:
    the split is for full attention with one query head a key head, so these run whole, in two launches."""
    seq, d = 256, 128
    rows = 4 * seq
    bf = [np.zeros((n, d), ml_dtypes.bfloat16) for n in (rows, rows // group, rows // group, rows)]
    steps = FUSED.launch_args(bf[0], bf[1], bf[2], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d),
                              nan(rows // group, d), nan(rows // group, d), seq, causal, tensor_cores=True,
                              wgmma=True, group=group, slots=3, **FUSED.form_options(FUSED.FASTEST[128]))
    assert [kern.name for kern, _ in steps] == ["attn_bwd_preprocess_zero", "flash_bwd_fused"]
    assert steps[1][1][-2:] == (1, 0)


def simulated_lse(q, k, v, seq, causal):
    rows, d = q.shape
    o, lse = nan(rows, d), nan(rows)
    FA.flash_fwd_lse.simulate(*FA.launch_args_lse(q, k, v, o, lse, seq, causal))
    return o, lse


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_staged_launches_finish_the_first_heads_dq_rows_before_the_rest(rng, causal):
    """An unsplit launch cut by heads (staged_launch_args): after the first stage the rows of dQ it reports done
    hold their float64 gradients and the last head's still hold the first stage's zeros; after the rest every
    gradient matches."""
    seq, d = 128, 64
    q, k, v, dout = inputs(rng, 3, seq, d, ml_dtypes.bfloat16)
    rows = q.shape[0]
    o, lse = simulated_lse(q, k, v, seq, causal)
    dq, dk, dv = nan(rows, d), nan(rows, d), nan(rows, d)
    stages = FUSED.staged_launch_args(q, k, v, o, dout, lse, nan(rows), dq, dk, dv, seq, causal, tail_heads=1)
    assert [kern.name for kern, _ in stages.first] == ["attn_bwd_preprocess_zero", "flash_bwd_fused"]
    assert [kern.name for kern, _ in stages.rest] == ["flash_bwd_fused"]
    assert stages.done == 2 * seq
    want = grads64(q, k, v, dout, seq, causal)
    for kern, args in stages.first:
        kern.simulate(*args)
    tol = 1e-2 * np.abs(want[0]).max()
    np.testing.assert_allclose(dq[:stages.done], want[0][:stages.done], rtol=0, atol=tol)
    assert np.all(dq[stages.done:] == 0) and np.all(np.isnan(dk[2 * seq:]))
    for kern, args in stages.rest:
        kern.simulate(*args)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-2 * np.abs(ref).max(), err_msg=name)


def test_a_split_launch_is_staged_before_its_parts(rng):
    """Full attention's split (3 heads of two 128-row key blocks on 4 slots: 4 whole, 2 in parts): the first
    stage is the preprocess and the whole key blocks, whose two heads' dQ rows are then final; the parts and
    their sums are the rest."""
    seq, d = 256, 128
    form = FUSED.FASTEST[128]
    q, k, v, dout = inputs(rng, 3, seq, d, ml_dtypes.bfloat16)
    rows = q.shape[0]
    o, lse = simulated_lse(q, k, v, seq, False)
    dq, dk, dv = nan(rows, d), nan(rows, d), nan(rows, d)
    stages = FUSED.staged_launch_args(q, k, v, o, dout, lse, nan(rows), dq, dk, dv, seq, False, tensor_cores=True,
                                      wgmma=True, slots=4, **FUSED.form_options(form))
    assert [kern.name for kern, _ in stages.first] == ["attn_bwd_preprocess_zero", "flash_bwd_fused"]
    assert [kern.name for kern, _ in stages.rest] == ["flash_bwd_fused", "sum_parts"]
    assert stages.done == 2 * seq
    want = grads64(q, k, v, dout, seq, False)
    for kern, args in stages.first:
        kern.simulate(*args)
    np.testing.assert_allclose(dq[:stages.done], want[0][:stages.done], rtol=0, atol=1e-2 * np.abs(want[0]).max())
    assert not np.allclose(dq[stages.done:], want[0][stages.done:], rtol=0, atol=1e-2 * np.abs(want[0]).max())
    for kern, args in stages.rest:
        kern.simulate(*args)
    for name, got, ref in zip(("dq", "dk", "dv"), (dq, dk, dv), want):
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-2 * np.abs(ref).max(), err_msg=name)


@pytest.mark.parametrize("tail_heads", [0, 4, 5])
def test_too_few_heads_to_cut_leave_everything_in_the_first_stage(tail_heads):
    seq, d, heads = 128, 64, 4
    bf = np.zeros((heads * seq, d), ml_dtypes.bfloat16)
    dq = nan(heads * seq, d)
    stages = FUSED.staged_launch_args(bf, bf, bf, nan(heads * seq, d), bf, nan(heads * seq), nan(heads * seq), dq,
                                      nan(heads * seq, d), nan(heads * seq, d), seq, True, tail_heads=tail_heads)
    assert [kern.name for kern, _ in stages.first] == ["attn_bwd_preprocess_zero", "flash_bwd_fused"]
    assert (stages.done, stages.rest) == (heads * seq, [])


PDL_FORMS = sorted(FUSED.PDL)


@pytest.mark.slow
@pytest.mark.parametrize("form", PDL_FORMS)
def test_pdl_forms_launch_every_step_by_programmatic_dependent_launch(tmp_path, form):
    """The PDL forms' launches (preprocess, fused whole and parts, sum_parts) each declare PDL in their contract
    and wait at their entry on sm_90 (nothing emitted for sm_80, an ordinary launch there); the same form
    without PDL launches none of them so. The small kernels assemble for sm_90a (the fused one: the ptxas pins)."""
    d = 64 if form.startswith("128x128") else 128
    seq, rows = 256, 3 * 256
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]

    def steps(pdl):
        return FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                                 nan(rows, d), seq, False, tensor_cores=True, wgmma=True, slots=4,
                                 **{**FUSED.form_options(form), "pdl": pdl})
    with_pdl = steps(True)
    names = ["attn_bwd_preprocess_zero", "flash_bwd_fused"]
    assert [k.name for k, _ in with_pdl][:2] == names and len(with_pdl) == (4 if FUSED.form_options(form)["split"]
                                                                                 else 2)
    for (kern, args), (plain, _) in zip(with_pdl, steps(False)):
        assert json.loads(kern.compile(args, "sm_90").contract_json).get("pdl") is True, kern.name
        ptx = kern.compile(args, "sm_90").ptx
        assert "griddepcontrol.wait" in ptx, kern.name
        if kern.name != "flash_bwd_fused":
            assert spill_bytes(ptxas_verbose(ptx, "sm_90a", tmp_path)) == 0, kern.name
        assert "griddepcontrol" not in kern.compile(args, "sm_80").ptx, kern.name
        assert "pdl" not in json.loads(plain.compile(args, "sm_90").contract_json), plain.name


def matches_float64_with_late_copies(monkeypatch, rng, form, d, seq, causal):
    """The lowered backward in `form` against float64 with every TMA copy read at its wait
    (KB_SIM_TMA_LANDING=wait), two heads of `seq`."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    q, k, v, dout = inputs(rng, 2, seq, d, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, seq, causal, form)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, seq, causal)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=name)


@pytest.mark.parametrize("form,d", [("TMA ring + TMA reduce dQ", 64), ("128x64 w8, TMA ring + TMA reduce dQ", 64),
                                    ("TMA ring + TMA reduce dQ, K V swizzled, batched products", 64),
                                    ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", 64),
                                    ("128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", 128),
                                    ("128x128 w8, TMA ring + TMA reduce dQ, K V swizzled + fp_fusion ftz", 64),
                                    *((form, d) for form in sorted(FUSED.PREFETCH) for d in (64, 128)
                                      if FUSED.applies(form, d))])
def test_the_tma_copies_are_right_when_they_read_late(monkeypatch, rng, form, d):
    """KB_SIM_TMA_LANDING=wait: each dQ tile is read at the wait before the next query block's tile is
    staged, and the dK and dV tiles (staged in the drained ring's stages) at the block's last wait, the
    latest the copy engine may. The 8-warp swizzled forms' warpgroups each stage and add their own dQ
    columns (store_tma.warpgroup_split), each warpgroup's first thread waiting for its own adds."""
    matches_float64_with_late_copies(monkeypatch, rng, form, d, 256, False)


@pytest.mark.slow
@pytest.mark.parametrize("form", sorted(FUSED.DIAGONAL))
@pytest.mark.parametrize("d", [64, 128])
def test_the_diagonal_loop_forms_mask_exactly_the_blocks_that_cross_it(monkeypatch, rng, form, d):
    """Causal, 384 rows a head: each 128-key block masks its first two 64-row query blocks and runs the
    rest unmasked (the last key block has none), copies landing at their wait; against float64. A split
    one block early leaves a crossing block unmasked, one late masks nothing wrong: the first fails here."""
    matches_float64_with_late_copies(monkeypatch, rng, form, d, 384, True)


def test_a_dq_that_is_not_float32_is_refused_and_nothing_is_written():
    rows, d, seq = 256, 64, 128
    z = np.zeros((rows, d), np.float32)
    dq, dk, dv, delta = np.full((rows, d), np.nan, np.float16), nan(rows, d), nan(rows, d), nan(rows)
    with pytest.raises(bridge.DTypeError, match="dq: expected float32"):
        FUSED.bwd.run(FUSED.launch_args(z, z, z, z, z, np.zeros(rows, np.float32), delta, dq, dk, dv, seq, True),
                      simulate=True)
    assert np.isnan(dq).all() and np.isnan(dk).all() and np.isnan(dv).all() and np.isnan(delta).all()


def test_tiles_that_do_not_divide_the_sequence_are_refused_and_nothing_is_written():
    """The 128 x 64 form at S 192: the 128 key rows a block owns do not divide it."""
    rows, d, seq = 384, 64, 192
    z = np.zeros((rows, d), np.float32)
    dq, dk, dv, delta = nan(rows, d), nan(rows, d), nan(rows, d), nan(rows)
    with pytest.raises(bridge.ShapeRelationError, match=r"seq: 192 is not a multiple of the tiles' 128 and 64 rows"):
        FUSED.bwd.run(FUSED.launch_args(z, z, z, z, z, np.zeros(rows, np.float32), delta, dq, dk, dv, seq, True,
                                        tiles=FUSED.WIDE), simulate=True)
    assert np.isnan(dq).all() and np.isnan(dk).all() and np.isnan(dv).all() and np.isnan(delta).all()


def test_the_wide_form_owns_128_key_rows_on_8_warps():
    """Its launches: the dK/dV partitions of 128 rows, the streamed query rows 64, the kernel on 256 threads."""
    rows, d, seq = 512, 128, 256
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True,
                              **FUSED.form_options("128x64 w8, TMA ring + TMA reduce dQ"))
    kern, args = steps[1]
    assert args[7].tile_shape == (128, d) and args[11] == 64
    assert kern.compile(args, "sm_90").threads == 256


def test_the_example_runs_the_picks_and_the_portable_form_unless_asked_for_every_form(monkeypatch):
    """On a GPU the example runs, at each head dim, the portable atomic-dQ form and the forms pick_form gives (full
    and causal), then grouped-query heads; `--all-forms` walks every checked form, as the GPU tests do."""
    monkeypatch.setattr(bridge, "gpu_available", lambda: True)
    for all_forms, want in ((False, lambda d: ["atomic dQ", *dict.fromkeys(
            FUSED.pick_form(d, 256, wgmma=True, causal=c) for c in (False, True))]),
                            (True, lambda d: [f for f in FUSED.CHECKED if FUSED.applies(f, d)])):
        ran = []
        monkeypatch.setattr(FUSED, "run_gpu", lambda b, h, s, d, kv_heads=None, form=None: ran.append((d, form)))
        assert FUSED.main(["--all-forms"] if all_forms else []) == 0
        for d in (64, 128):
            assert [f for dd, f in ran if dd == d and f is not None] == want(d)
            assert ran.count((d, None)) == 1                       # the grouped-query run, in the default form
    assert len(FUSED.example_forms(128)) == 3 and len(FUSED.example_forms(64)) == 2


def fused_ptx(d, form, seq=256, rows=512):
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    kern, args = steps[1]
    return kern.compile(args, "sm_90").ptx


@pytest.mark.parametrize("d,form,n", [(64, "TMA ring + TMA reduce dQ, K V swizzled", 64),
                                      (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", 64),
                                      (64, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled", 32)])
def test_dq_runs_on_wgmma_reading_ds_transposed_from_shared_memory(d, form, n):
    """With K in swizzle atoms, dQ = dS K is an SS wgmma: A = (dS^T)^T MN-major (imm-trans-a 1) from one
    store of dS^T, B = K MN-major; no mma.sync is left. On 8 warps each warpgroup takes n = 64 of D128's
    columns, or 32 of D64's (half a swizzle panel: it went to mma.sync with 2-byte shared loads before,
    a third of the 4-warp form's speed). The other forms keep mma.sync for it."""
    ptx = fused_ptx(d, form)
    dq = [ln for ln in ptx.splitlines() if f"wgmma.mma_async.sync.aligned.m64n{n}k16" in ln and "p, 1, 1, 1, 1;" in ln]
    bn = FUSED.TILES.get(form, (64,))[0]
    assert len(dq) == bn // 16 and "mma.sync" not in ptx
    assert "mma.sync" in fused_ptx(d, form.split(", K V")[0])


def test_bad_shapes_are_refused_as_the_two_kernel_backward_refuses_them():
    rows, d, seq = 256, 64, 128
    z = np.zeros((rows, d), np.float32)
    dq, dk = nan(rows, d), nan(rows, d)
    with pytest.raises(bridge.ShapeRelationError, match=r"dv: expected shape \(256, 64\)"):
        FUSED.launch_args(z, z, z, z, z, np.zeros(rows, np.float32), nan(rows), dq, dk, nan(128, d), seq, False)
    assert np.isnan(dq).all() and np.isnan(dk).all()


@pytest.mark.parametrize("diagonal,prefetch", [(3, True), (2, False), ("yes", True), (1.5, True), (-1, True)])
def test_a_bad_diagonal_is_refused_naming_it_and_nothing_is_written(diagonal, prefetch):
    rows, d, seq = 256, 64, 128
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    dq, dk, dv = nan(rows, d), nan(rows, d), nan(rows, d)
    with pytest.raises(ValueError, match=r"^diagonal: expected False, True .* or 2 \(a branch, with prefetch\)"):
        FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), dq, dk, dv, seq, True,
                          diagonal=diagonal, prefetch=prefetch)
    assert np.isnan(dq).all() and np.isnan(dk).all() and np.isnan(dv).all()


def test_a_branch_mask_form_is_its_base_without_causal():
    """diagonal=2 masks only causal steps: on full attention the kernel is its base form's, instruction for
    instruction (the mask's branch is not there at all), and causal it differs."""
    base = "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch"
    branch = f"{base}, branch mask, heads in turn"

    def code(form, causal):
        bf = [np.zeros((512, 128), ml_dtypes.bfloat16) for _ in range(4)]
        steps = FUSED.launch_args(*bf[:3], nan(512, 128), bf[3], nan(512), nan(512), nan(512, 128), nan(512, 128),
                                  nan(512, 128), 256, causal, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
        ptx = steps[-1][0].compile(steps[-1][1], "sm_90").ptx
        return [ln for ln in ptx.splitlines() if not ln.strip().startswith((".loc", "//"))]
    assert code(branch, False) == code(f"{base}, heads in turn", False)
    assert code(branch, True) != code(f"{base}, heads in turn", True)


# spill bytes ptxas 13.0 gives each form on sm_90a, bf16 causal (pinned: a change shows here). With the query
# loop at the top for one query head a key head (2026-12-05, so a producer warpgroup can feed it) the 4-warp
# D128 forms spill a little more: atomic dQ 12 bytes (was 4), the K V swizzled ring 88 (was 76)
SPILLS = {(64, "atomic dQ"): 0, (64, "TMA reduce dQ"): 0, (64, "TMA ring + TMA reduce dQ"): 0,
          (64, "TMA ring S3 + TMA reduce dQ"): 0, (64, "TMA ring + TMA reduce dQ + fp_fusion ftz"): 0,
          (128, "atomic dQ"): 12, (128, "TMA reduce dQ"): 4, (128, "TMA ring + TMA reduce dQ"): 0,
          (128, "TMA ring S3 + TMA reduce dQ"): 0, (128, "TMA ring + TMA reduce dQ + fp_fusion ftz"): 0,
          (256, "atomic dQ"): 0, (256, "TMA reduce dQ"): 0,
          (64, "TMA ring + TMA reduce dQ, K V swizzled"): 0, (128, "TMA ring + TMA reduce dQ, K V swizzled"): 88,
          (64, "TMA ring + TMA reduce dQ, K V swizzled, early loads"): 0,
          (128, "TMA ring + TMA reduce dQ, K V swizzled, early loads"): 84,
          **{(d, form): 0 for d in (64, 128) for form in FUSED.TILES if FUSED.applies(form, d)},
          # D64's 128 query rows a step: lse and delta for 32 query columns a thread, held from the early loads on;
          # 68 since the f32 staging's selects (staging_swap; 60 without)
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads + fp_fusion ftz"): 68,
          # D64's 128-row step with lazy waits: S^T's and dP^T's accumulators (64 registers each) live at once
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch"): 136,
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, lazy waits + fp_fusion ftz, prefetch"): 132,
          # warp vectors: the lse and Delta rows whole in every warp (2 + 2 registers a thread, 4 at D64's 128 rows)
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
                "warp vectors"): 4,
          # heads in turn (tile.block_order): the same steps, the block's key block chosen by a few integer ops
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, lazy waits + fp_fusion ftz, prefetch, heads in turn"):
              132,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
                "warp vectors, heads in turn"): 4,
          # deferred dQ: a step's dQ (32 registers a thread) carried into the next step; with warp vectors, causal
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
                "deferred dQ, warp vectors"): 28,
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
               "deferred dQ"): 124,
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
               "deferred dQ, heads in turn"): 124,
          # and with warp vectors: the lse and Delta rows shuffled from the warp's copy, not held from the early loads
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
               "deferred dQ, warp vectors"): 84,
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
               "deferred dQ, warp vectors, heads in turn"): 72,
          # prefetch: one lse and Delta value a thread held across the step, not 16-32 (0 bytes but on the producer)
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, "
                "prefetch"): 8,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop, "
                "prefetch"): 24,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop, "
                "prefetch, heads in turn"): 24,
          # the mask under a branch in the one loop (diagonal=2): no second copy of the step
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
                "branch mask, heads in turn"): 0,
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
               "deferred dQ, branch mask, heads in turn"): 128,
          # lazy_barriers: the Delta row's loads no longer wait behind a barrier after the lse row's (causal)
          (64, "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads + fp_fusion ftz, prefetch, lazy barriers"): 104,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, "
                "lazy barriers"): 16,
          # product_batches: dV and dP^T both in flight (their accumulators and P^T's registers at once)
          (64, "TMA ring + TMA reduce dQ, K V swizzled, batched products"): 0,
          (128, "TMA ring + TMA reduce dQ, K V swizzled, batched products"): 92,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, batched products"): 28,
          # a producer warpgroup's ring, K and V copied by it too (matmul/produced_a.py): on 4 warps (no
          # register reallocation for 256 threads) D128 spills; on 8, 8 bytes (0 with K and V by cp.async)
          (64, "ws + TMA reduce dQ, K V swizzled"): 0, (128, "ws + TMA reduce dQ, K V swizzled"): 108,
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled"): 8,
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads"): 8,
          # lazy_waits: dP^T's and dK's accumulators live beside dV's and dK's at D128
          (64, "TMA ring + TMA reduce dQ, K V swizzled, lazy waits"): 0,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits"): 12,
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits"): 80,
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz"): 12,
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz"): 108,
          # the diagonal loop: two copies of the step (masked, then not)
          (128, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop"): 12,
          (64, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop"): 8,
          (128, "128x64 w8, ws setmaxnreg + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, diagonal loop"):
              180}
# the last wave split and PDL: the same kernel as their base's, whole (the test's causal launch is never split)
SPILLS.update({(d, form): SPILLS[d, form.removesuffix(", pdl").removesuffix(", last wave split")]
               for d, form in ((64 if f.startswith("128x128") else 128, f) for f in FUSED.SPLIT | FUSED.PDL)})


@pytest.mark.slow
@pytest.mark.parametrize("d,form", list(SPILLS))
def test_ptxas_assembles_the_fused_kernel(tmp_path, d, form):
    """bf16, causal, the two-kernel backward's tiles; dQ = dS K runs on mma.sync from dS staged
    through shared memory (dS^T is what the tensor cores hand back)."""
    tma = form != "atomic dQ"
    spills = SPILLS[d, form]
    seq, rows = 256, 512
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    kern, args = steps[1]
    ptx = kern.compile(args, "sm_90").ptx
    assert ("wgmma.mma_async" in ptx) == (d < 256)         # D256: mma.sync (no wgmma tile fits, as two-kernel)
    # one reduce-add a 128-byte slab of dQ's row block; where the two warpgroups hold their own columns of
    # dQ (8 warps, dQ on wgmma), each issues its own half behind its own barrier (store_tma.warpgroup_split)
    # causal here: the diagonal forms' step is there twice; the deferred-dQ forms add in the loop and after it
    loops = 2 if form in FUSED.DIAGONAL or form in FUSED.DEFERRED else 1
    assert ptx.count(REDUCE) == loops * d * 4 // 128 if tma else "atom.global.add.f32" in ptx
    by_warpgroup = form.startswith("128x64 w8") and "K V swizzled" in form and ", ws " not in form
    assert ("bar.sync 4, 128;" in ptx and "bar.sync 5, 128;" in ptx) == by_warpgroup
    assert spill_bytes(ptxas_verbose(ptx, "sm_90a", tmp_path)) <= spills


SM80_SPILLS = {64: 4, 128: 0}      # bytes, sm_80 (pinned: 0 at D64 before lse and delta were loaded per thread)


@pytest.mark.slow
@pytest.mark.parametrize("d", [64, 128])
def test_ptxas_assembles_both_launches_for_sm80(tmp_path, d):
    """mma.sync products, per-element atomic adds (TMA is sm_90's): 255 registers and SM80_SPILLS."""
    seq, rows = 256, 512
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=False, lowering=FUSED.TMA_REDUCE)
    for kern, args in steps:
        ptx = kern.compile(args, "sm_80").ptx
        assert REDUCE not in ptx
        assert spill_bytes(ptxas_verbose(ptx, "sm_80", tmp_path)) <= (SM80_SPILLS[d] if kern.name == "flash_bwd_fused" else 0), \
            kern.name


@pytest.mark.gpu
@pytest.mark.parametrize("form,d", [(form, d) for form in FUSED.CHECKED for d in (64, 128) if FUSED.applies(form, d)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_fused_gradients_match_torch_autograd_in_float64(form, d, causal):
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    import torch.nn.functional as F
    batch, heads, seq = 2, 4, 256
    g = torch.Generator(device="cuda").manual_seed(d + causal)
    q, k, v, dout = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for _ in range(4))
    _, *grads = FUSED.forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), seq, causal,
                                           **FUSED.form_options(form))
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*x64, is_causal=causal).backward(dout.double())
    for name, got, x in zip(("dq", "dk", "dv"), grads, x64):
        err = ((got.reshape(x.shape).double() - x.grad).abs().max() / x.grad.abs().max()).item()
        assert err < 1e-2, (name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("form", SPLIT_FORMS)
@pytest.mark.parametrize("slots", [7, None], ids=["whole and parts", "this GPU"])
def test_gpu_split_last_wave_matches_torch_autograd_in_float64(form, slots):
    """The split picks at B2 H4 (S384 at D128, S256 at D64): on 7 slots 21 key blocks whole and 3 in halves (14
    and 2 in halves at D64: as many parts as its two query blocks); on this GPU's SMs (fewer key blocks than one
    wave) every key block in parts."""
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    import torch.nn.functional as F
    d = 64 if form.startswith("128x128") else 128
    batch, heads, seq = 2, 4, 384 if d == 128 else 256
    g = torch.Generator(device="cuda").manual_seed(d + 5)
    q, k, v, dout = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for _ in range(4))
    _, *grads = FUSED.forward_and_backward(*(x.reshape(-1, d) for x in (q, k, v, dout)), seq, False, slots=slots,
                                           **FUSED.form_options(form))
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*x64).backward(dout.double())
    for name, got, x in zip(("dq", "dk", "dv"), grads, x64):
        err = ((got.reshape(x.shape).double() - x.grad).abs().max() / x.grad.abs().max()).item()
        assert err < 1e-2, (name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("form,d", PICKS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_gpu_picks_with_o_dk_dv_in_bf16_match_torch_autograd_in_float64(form, d, causal):
    """As the SDPA drop-in launches them: O, dK and dV in bf16 (the forward's O read back in bf16), dQ f32."""
    torch = pytest.importorskip("torch", reason="the autograd reference needs torch")
    import torch.nn.functional as F
    batch, heads, seq = 2, 4, 384
    g = torch.Generator(device="cuda").manual_seed(d + 2 * causal)
    q, k, v, dout = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, generator=g)
                     for _ in range(4))
    rows = [x.reshape(-1, d) for x in (q, k, v, dout)]
    o, dq, dk, dv = FUSED.forward_and_backward(*rows, seq, causal, dtype=torch.bfloat16, **FUSED.form_options(form))
    x64 = [x.double().requires_grad_() for x in (q, k, v)]
    F.scaled_dot_product_attention(*x64, is_causal=causal).backward(dout.double())
    assert (o.dtype, dk.dtype, dv.dtype) == (torch.bfloat16,) * 3
    for name, got, x in zip(("dq", "dk", "dv"), (dq, dk, dv), x64):
        err = ((got.reshape(x.shape).double() - x.grad).abs().max() / x.grad.abs().max()).item()
        assert err < 1.2e-2, (name, err)


@pytest.mark.slow
def test_k_and_v_reach_their_products_by_ldmatrix_and_the_simulator_runs_that_path(rng, monkeypatch):
    """K and V wait in shared memory (SharedTile); S^T = K Q^T and dP^T = V dO^T take their A fragments by
    ldmatrix.x4, 8 a product at D128 (matmul/products.py _a_by_ldmatrix). Mutation: fragments of the
    wrong 16 x 16 slice give gradients far off in the lowered simulator, so it runs the path."""
    from dsl.tile.lower.matmul import products as PR
    seq, d, form = 128, 128, "TMA ring + TMA reduce dQ"
    q, k, v, dout = inputs(rng, 2, seq, d, ml_dtypes.bfloat16)
    rows = 2 * seq
    steps = FUSED.launch_args(q, k, v, nan(rows, d), dout, nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, False, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    ptx = steps[1][0].compile(steps[1][1], "sm_90").ptx
    assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared") >= 16
    want = grads64(q, k, v, dout, seq, False)

    def worst(grads):
        return max(float(np.abs(g - w).max() / np.abs(w).max()) for g, w in zip(grads, want))
    assert worst(lowered_backward(q, k, v, dout, seq, False, form)) < 1e-2
    right = PR._a_by_ldmatrix

    def shifted(L, layout, shared, kk):
        got = right(L, layout, shared, kk)
        keys = sorted(got)
        return {key: got[keys[(i + 1) % len(keys)]] for i, key in enumerate(keys)}
    monkeypatch.setattr(PR, "_a_by_ldmatrix", shifted)
    monkeypatch.setenv("KB_CACHE", "0")
    assert worst(lowered_backward(q, k, v, dout, seq, False, form)) > 0.5


def test_the_benchmark_refuses_an_unknown_fused_form_before_anything_runs(monkeypatch):
    """benchmarks/attention.py --bwd-forms: a form not in LADDER is named, with the forms there are."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _attention_bwd
    with pytest.raises(ValueError, match=r"--bwd-forms: unknown \['nope'\]; expected forms of \['atomic dQ'"):
        _attention_bwd.backward_cases(None, None, 1, False, forms=["nope"])


def test_warpgroups_that_never_release_a_ring_stage_deadlock_the_simulated_leader(monkeypatch, rng):
    """The 8-warp ring forms release Q's and dO's stages by arrivals on their empty mbarriers, which
    thread 0 waits for before it refills them (matmul/ring.py): without the arrivals its wait can never
    complete, which the simulator reports (a hang on the GPU)."""
    from dsl.sim.faults import SimulationError
    from dsl.tile.ptx import sm80 as ptx_sim
    from dsl.tile.ptx import table as ptx_table
    from dsl.tile.ptx.table import SemanticsRef
    monkeypatch.setitem(ptx_table._RESOLVED, SemanticsRef("mbarrier.arrive"), ptx_sim.no_op)
    seq, d = 512, 64                                   # 8 query blocks of 64: more than the 2 stages
    q, k, v, dout = inputs(rng, 1, seq, d, ml_dtypes.bfloat16)
    with pytest.raises(SimulationError, match="mbarrier phase that never completes"):
        lowered_backward(q, k, v, dout, seq, False, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled")


def test_the_benchmark_times_a_form_only_at_the_head_dims_it_runs_at(monkeypatch):
    """--bwd-head-dims 64,128 with a D64-only form (128 query rows a step) times it at D64 and skips D128."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import _attention_bwd
    square = "128x128 w8, TMA ring + TMA reduce dQ, K V swizzled + fp_fusion ftz"
    assert _attention_bwd.fused_forms(FUSED, [square, "atomic dQ"], 64) == [square, "atomic dQ"]
    assert _attention_bwd.fused_forms(FUSED, [square, "atomic dQ"], 128) == ["atomic dQ"]
    assert set(_attention_bwd.fused_forms(FUSED, None, 128)) == set(FUSED.LADDER) - {
        form for form, dims in FUSED.HEAD_DIMS.items() if 128 not in dims}


DEFERRED128 = "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch, deferred dQ"


def _deferred_ptx(kern_of=None) -> str:
    rows, seq, d = 512, 256, 128
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, False, tensor_cores=True, wgmma=True, **FUSED.form_options(DEFERRED128))
    kern, args = steps[1]
    return (kern_of(kern) if kern_of else kern).compile(args, "sm_90").ptx


def test_a_carried_dq_follows_its_product_into_the_warpgroup_layout(monkeypatch):
    """The deferred-dQ form carries each step's dQ into the next step. Its product settles on warpgroup MMA
    (a warpgroup's columns each) a lowering after the carrying variable was first hinted (mma.sync's 1 x 8
    warps); the hint follows the product once (Lowerer.hint), so both adds (in the loop, after it) stay TMA
    reduce-adds that each warpgroup stages and issues on its own. With the first hint kept, the carried dQ stays
    in the 1 x 8 layout: the whole block stages its adds (no warpgroup barriers)."""
    from dsl import tile
    from dsl.tile.lower.kernel import Lowerer
    ptx = _deferred_ptx()
    assert ptx.count(REDUCE) == 2 * 128 * 4 // 128 and "bar.sync 4, 128;" in ptx and "red.global.add" not in ptx

    def first_wins(self, tv, layout):
        if id(tv) not in self.layout_hints and id(tv) not in self.new_hints and id(tv) not in self.var_layouts:
            self.new_hints[id(tv)] = layout if isinstance(layout, tuple) else layout.key
    monkeypatch.setattr(Lowerer, "hint", first_wins)
    monkeypatch.setenv("KB_CACHE", "0")
    fresh = _deferred_ptx(lambda k: tile.kernel(k.pyfunc, num_warps=k.num_warps, lowering=FUSED.LADDER[DEFERRED128]))
    assert fresh.count(REDUCE) == 8 and "bar.sync 4, 128;" not in fresh
