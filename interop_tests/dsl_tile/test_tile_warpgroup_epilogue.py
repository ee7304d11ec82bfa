"""A warpgroup's own epilogue (dsl/tile/lower/store_tma.py, warpgroup_split): where each of two or more
warpgroups holds its own columns of a TMA reduce-add's tile, each stages and adds them behind a named
barrier of its 128 threads, not the block's. Which tiles split; the simulator's semantics of that
barrier (every running thread of a warpgroup that reaches it must, block by block); the fused
attention backward's dQ adds against float64 with copies read late (and a mutation caught there):
test_flash_attention_bwd_fused.py."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dsl.sim.faults import SimulationError
from dsl.sim.interp import Machine
from dsl.tile.lower.layout import LV, MmaLayout
from dsl.tile.lower.store_tma import warpgroup_split
from dsl.tile.ptx.sm80 import warpgroup_barrier
from dsl.ir.types import F32


def _lowerer(threads: int, cc: int = 90, ws: bool = False):
    return SimpleNamespace(T=threads, cc=cc, ws_tid=object() if ws else None)


def _lv(shape, threads, wm, wn, by_warpgroup=False):
    lay = MmaLayout(shape, threads, wm, wn, by_warpgroup=by_warpgroup)
    return LV(lay, shape, F32, [])


def test_warpgroups_split_a_tile_only_where_each_holds_whole_slabs_of_its_own():
    # dQ of the 8-warp fused backward: two warpgroups, 64 f32 columns each (two 128-byte slabs)
    assert warpgroup_split(_lowerer(256), _lv((64, 128), 256, 4, 2, True), 4)
    assert warpgroup_split(_lowerer(256), _lv((64, 64), 256, 4, 2, True), 2)         # D64: a slab each
    assert not warpgroup_split(_lowerer(256), _lv((64, 32), 256, 4, 2, True), 1)     # half a slab each
    assert not warpgroup_split(_lowerer(256), _lv((128, 128), 256, 8, 1), 4)         # warps split M
    assert not warpgroup_split(_lowerer(128), _lv((64, 128), 128, 4, 1), 4)          # one warpgroup
    assert not warpgroup_split(_lowerer(256, cc=80), _lv((64, 128), 256, 4, 2, True), 4)
    assert not warpgroup_split(_lowerer(256, ws=True), _lv((64, 128), 256, 4, 2, True), 4)


def _machine(blocks: int, threads: int):
    lanes = SimpleNamespace(T=threads, tid_lin=np.tile(np.arange(threads), blocks))
    mach = SimpleNamespace(L=blocks * threads, lanes=lanes, live=lambda: np.ones(blocks * threads, bool))
    mach.partial_barrier = lambda arrived, want: Machine.partial_barrier(mach, arrived, want)
    mach.shared_epoch = np.zeros(blocks, np.int64)
    mach.pass_barrier = lambda arrived: Machine.pass_barrier(mach, arrived)
    return mach


@pytest.mark.parametrize("first", [0, 128])
def test_a_warpgroup_barrier_wants_every_thread_of_the_warpgroups_that_reach_it(first):
    run = warpgroup_barrier(first)
    threads = first + 256
    mach = _machine(2, threads)
    wg1_block0 = np.arange(first + 128, first + 256)
    run([], mach, wg1_block0)                                   # one whole warpgroup of one block: fine
    assert mach.shared_epoch.tolist() == [1, 0]                 # its block passed a barrier (shared races)
    both = np.concatenate([wg1_block0, threads + np.arange(first, first + 128)])
    run([], mach, both)                                         # whole warpgroups of two blocks: fine
    assert mach.shared_epoch.tolist() == [2, 1]
    with pytest.raises(SimulationError, match="warpgroup's named barrier reached by only part"):
        run([], mach, wg1_block0[:-32])                         # a warp of warpgroup 1 missing
