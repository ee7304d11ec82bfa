"""The tile lowering's relayouts through shared memory (Lowerer.gather_elems: a store, a block barrier,
the loads, a second barrier before the scratch is written again) under the simulator's shared-memory race
check (KB_SIM_SHARED_RACES=1, dsl/sim/shared_races.py). The fused attention backward's prefetch form
relays its lse and Delta rows that way every step: it runs clean, and without the trailing barrier the
next step's store is reported as a write after read (the lock-step simulator gets the gradients right
either way). Under the lowering switch lazy_barriers the trailing barrier is left to the next one that
comes (Lowerer.readers_done, relayout_scratch, block_of): fewer barriers, still clean, and a loop body
that would rewrite its buffer unordered in its next iteration keeps one at its end."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_flash_attention_bwd import grads64, inputs, nan
from test_flash_attention_bwd_fused import FUSED, lowered_backward

from dsl import f32, i32, tile
from dsl.sim import SimulationError
from dsl.tile.lower.kernel import Lowerer

FORM = "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch"
LAZY = [(form, d) for form in FUSED.LADDER if form.endswith(", lazy barriers") for d in (64, 128) if FUSED.applies(form, d)]


def carried_rows(x: tile.Array[f32, 2], a: tile.Array[f32, 1], b: tile.Array[f32, 1], out: tile.Partition[f32, 2],
                 steps: i32, both: tile.Constant):
    """Rows of a (and b when `both`) loaded a step ahead, as the attention backward's prefetch does: each
    held one value a thread across the step and relaid across the block's columns where it is used."""
    bm, bn = out.tile_shape
    acc = tile.zeros((bm, bn), f32)
    a_n = tile.load(a, (0,), (bn,))
    b_n = tile.load(b, (0,), (bn,))
    for j in range(steps):
        a_j = a_n
        b_j = b_n
        a_n = tile.load(a, (j + 1,), (bn,))
        b_n = tile.load(b, (j + 1,), (bn,))
        xj = tile.load(x, (j, 0), (bm, bn)) * a_j[None, :]
        if both:
            xj = xj - b_j[None, :]
        acc = acc + xj
    out.store(acc)


def run_carried_rows(rng, lazy: bool, both: bool, steps: int = 5) -> tuple[np.ndarray, np.ndarray, str]:
    """carried_rows lowered (lazy_barriers on or off) in the simulator: (result, float64 reference, PTX)."""
    bm, bn = 16, 32
    x = rng.standard_normal((steps * bm, bn)).astype(np.float32)
    a, b = (rng.standard_normal((steps + 1) * bn).astype(np.float32) for _ in range(2))
    out = np.full((bm, bn), np.nan, np.float32)
    kern = tile.kernel(num_warps=4, lowering={"lazy_barriers": lazy})(carried_rows)
    args = (x, a, b, tile.partition(out, (bm, bn)), steps, both)
    kern.simulate_lowered(*args)
    xs = x.astype(np.float64).reshape(steps, bm, bn)
    ref = (xs * a[:steps * bn].reshape(steps, 1, bn)).sum(0)
    if both:
        ref -= b[:steps * bn].astype(np.float64).reshape(steps, bn).sum(0)[None, :]
    return out, ref, kern.ptx(*args)


def _without_trailing_barrier(real):
    """gather_elems whose second barrier (after the loads) is left out: only its first sync() runs."""
    def gather(self, src, idxs):
        had, calls = self.__dict__.get("sync"), []

        def sync():
            calls.append(1)
            if len(calls) == 1:
                Lowerer.sync(self)
        self.sync = sync
        try:
            return real(self, src, idxs)
        finally:
            if had is None:
                self.__dict__.pop("sync", None)
            else:
                self.sync = had
    return gather


def test_the_prefetch_forms_relayouts_are_ordered_by_their_barriers(monkeypatch, rng):
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    q, k, v, dout = inputs(rng, 2, 256, 64, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, 256, True, FORM)
    assert all(np.isfinite(g).all() for g in grads)


def test_a_relayout_without_its_trailing_barrier_is_a_write_after_read(monkeypatch, rng):
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    monkeypatch.setenv("KB_CACHE", "0")
    monkeypatch.setattr(Lowerer, "gather_elems", _without_trailing_barrier(Lowerer.gather_elems))
    q, k, v, dout = inputs(rng, 2, 256, 64, ml_dtypes.bfloat16)
    with pytest.raises(SimulationError, match=r"flash_bwd_fused: shared-memory race \(write after read\)"):
        lowered_backward(q, k, v, dout, 256, True, FORM)


@pytest.mark.parametrize("lazy", [False, True], ids=["eager", "lazy"])
def test_two_relayouts_a_step_take_turns_in_two_buffers_under_lazy_barriers(monkeypatch, rng, lazy):
    """Each row's relayout: a store, a barrier, the loads; eagerly a second barrier after the loads. Lazily
    the other row's barrier orders them: two barriers a step, not four, and the race check stays clean."""
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    out, ref, ptx = run_carried_rows(rng, lazy, both=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert ptx.count("bar.sync") == (2 if lazy else 4)


def test_a_loop_body_whose_next_iteration_rewrites_its_buffer_ends_with_a_barrier(monkeypatch, rng):
    """One relayout a step: nothing else orders its readers before the next step's store into the same
    buffer, so the body keeps a barrier at its end (two a step, as eagerly)."""
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    out, ref, ptx = run_carried_rows(rng, True, both=False)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert ptx.count("bar.sync") == 2


def test_without_the_loop_bodys_closing_barrier_the_next_step_is_a_write_after_read(monkeypatch, rng):
    """The same kernel with block_of's closing barrier left out: the race check reports the next step's store."""
    def block_of(self, stmts_fn):
        out: list = []
        self.stack.append(out)
        stmts_fn()
        self.stack.pop()
        return out
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    monkeypatch.setenv("KB_CACHE", "0")
    monkeypatch.setattr(Lowerer, "block_of", block_of)
    with pytest.raises(SimulationError, match=r"carried_rows: shared-memory race \(write after read\)"):
        run_carried_rows(rng, True, both=False)


@pytest.mark.parametrize("form,d", LAZY)
def test_the_lazy_barrier_forms_match_float64_and_run_clean(monkeypatch, rng, form, d):
    """The fused backward's prefetch forms under lazy_barriers, causal: against float64, no race reported."""
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    q, k, v, dout = inputs(rng, 2, 256, d, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, 256, True, form)
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, 256, True)):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=name)


def test_lazy_barriers_leave_two_of_the_prefetch_steps_six_block_barriers_out():
    """D128, full: the lse row's readers ordered by the Delta row's barrier, the Delta row's by dS^T's staging
    barrier; the PTX has two block barriers fewer (both in the step loop) and nothing else changes in count."""
    counts = {}
    lazy_form = next(form for form, d in LAZY if d == 128)
    for form in (lazy_form, lazy_form.removesuffix(", lazy barriers")):
        rows, seq, d = 512, 256, 128
        bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
        steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                                  nan(rows, d), seq, False, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
        kern, args = steps[1]
        ptx = kern.compile(args, "sm_90").ptx
        counts[form] = (ptx.count("bar.sync \t0;"), ptx.count("bar.sync"), ptx.count("ld.shared"))
    lazy, eager = counts.values()
    assert lazy[0] == eager[0] - 2 and lazy[1] == eager[1] - 2 and lazy[2] == eager[2]
