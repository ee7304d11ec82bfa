"""The tile lowering's relayouts through shared memory (Lowerer.gather_elems: a store, a block barrier,
the loads, a second barrier before the scratch is written again) under the simulator's shared-memory race
check (KB_SIM_SHARED_RACES=1, dsl/sim/shared_races.py). The fused attention backward's prefetch form
relays its lse and Delta rows that way every step: it runs clean, and without the trailing barrier the
next step's store is reported as a write after read (the lock-step simulator gets the gradients right
either way)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from test_flash_attention_bwd import inputs
from test_flash_attention_bwd_fused import lowered_backward

from dsl.sim import SimulationError
from dsl.tile.lower.kernel import Lowerer

FORM = "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits + fp_fusion ftz, prefetch"


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
