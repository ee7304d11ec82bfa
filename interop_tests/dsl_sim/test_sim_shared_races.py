"""Shared-memory races in the simulator (KB_SIM_SHARED_RACES=1, dsl/sim/shared_races.py): an access that
no barrier orders after another thread's conflicting one is a SimulationError naming the kind, both
threads, the buffer and the line; the same kernels with their barriers run clean. The lock-step
simulator gives these kernels the right answer either way: without the check nothing shows."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import f32, i32, simt
from dsl.sim import SimulationError


@simt.kernel(block=(64, 1, 1))
def neighbour(a: simt.Array[f32], out: simt.DisjointSlice[f32], barrier: i32):
    with simt.unsafe():
        buf = simt.shared.array((64,), f32)
        t = simt.threadIdx.x
        buf[t] = a[t]
        if barrier != 0:
            simt.sync_threads()
        out[t] = buf[(t + 1) % 64]


@simt.kernel(block=(64, 1, 1))
def rounds(a: simt.Array[f32], out: simt.DisjointSlice[f32], trailing: i32):
    """Each round every thread writes its slot, meets the others, reads its neighbour's; a round's
    write after the previous round's reads needs the trailing barrier."""
    with simt.unsafe():
        buf = simt.shared.array((64,), f32)
        t = simt.threadIdx.x
        acc = f32(0.0)
        for r in range(3):
            buf[t] = a[t] * f32(r + 1)
            simt.sync_threads()
            acc += buf[(t + 1) % 64]
            if trailing != 0:
                simt.sync_threads()
        out[t] = acc


@simt.kernel(block=(32, 1, 1))
def everyone_writes_slot_0(out: simt.DisjointSlice[i32]):
    with simt.unsafe():
        buf = simt.shared.array((4,), i32)
        buf[0] = i32(simt.threadIdx.x)
        simt.sync_threads()
        out[simt.threadIdx.x] = buf[0]


def test_a_read_of_another_threads_store_without_a_barrier_is_a_race(monkeypatch, rng):
    monkeypatch.delenv("KB_SIM_SHARED_RACES", raising=False)
    a = rng.standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    neighbour.simulate(a, out, 0, grid=1, block=64)        # off by default: lock step gives the right answer
    np.testing.assert_array_equal(out, np.roll(a, -1))
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    with pytest.raises(SimulationError, match=r"neighbour: shared-memory race \(read after write\) on '.*'\[1\]: "
                                              r"thread \(0, 0, 0\) of block \(0, 0, 0\) at .* and thread \(1, 0, 0\) "
                                              r"of block \(0, 0, 0\) with no barrier of the block between them"):
        neighbour.simulate(a, out, 0, grid=1, block=64)
    out[:] = np.nan
    neighbour.simulate(a, out, 1, grid=1, block=64)
    np.testing.assert_array_equal(out, np.roll(a, -1))


def test_a_store_over_an_element_another_thread_read_since_the_last_barrier_is_a_race(monkeypatch, rng):
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    a = rng.standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    with pytest.raises(SimulationError, match=r"rounds: shared-memory race \(write after read\)"):
        rounds.simulate(a, out, 0, grid=1, block=64)
    rounds.simulate(a, out, 1, grid=1, block=64)
    np.testing.assert_allclose(out, 6 * np.roll(a, -1).astype(np.float64), rtol=1e-6)


def test_two_lanes_of_one_store_on_one_element_are_a_race(monkeypatch):
    monkeypatch.setenv("KB_SIM_SHARED_RACES", "1")
    with pytest.raises(SimulationError, match=r"race \(write after write\) on '.*'\[0\]"):
        everyone_writes_slot_0.simulate(np.zeros(32, np.int32), grid=1, block=32)
