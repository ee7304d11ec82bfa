"""Shared-memory bank conflicts counted by the simulator (KB_SIM_BANK_CONFLICTS=1, dsl/sim/bank_conflicts.py):
a warp's access in phases of 128 / w lanes, each taking as many wavefronts as the most distinct words one
bank holds; a conflicted site is a WARNING on `kernelbridge.perf` naming the line, the kind and the ways.
Expected counts here are worked out by hand from the addresses, not by the module."""
from __future__ import annotations

import logging
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, i32, simt
from dsl.sim.bank_conflicts import wavefronts

ROOT = Path(__file__).resolve().parents[2]


@simt.kernel(block=(64, 1, 1))
def strided(a: simt.Array[f32], out: simt.DisjointSlice[f32], stride: i32):
    """Each thread stores its value at t * stride of a shared buffer and reads it back."""
    with simt.unsafe():
        buf = simt.shared.array((64 * 32,), f32)
        t = simt.threadIdx.x
        buf[t * stride] = a[t]
        simt.sync_threads()
        out[t] = buf[t * stride]


@simt.kernel(block=(64, 1, 1))
def everyone_reads_one(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        buf = simt.shared.array((64,), f32)
        t = simt.threadIdx.x
        buf[t] = a[t]
        simt.sync_threads()
        out[t] = buf[5]


def _records(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kernelbridge.perf"]


@pytest.mark.parametrize("stride,ways", [(1, None), (2, 2), (32, 32)])
def test_a_strided_shared_access_is_reported_with_its_ways(monkeypatch, caplog, stride, ways):
    """Stride 2: lanes t and t + 16 share a bank (2 words a bank, 2 wavefronts a warp); stride 32: every
    lane's word is in bank 0 (32 wavefronts). Two warps, a store and a load each."""
    monkeypatch.setenv("KB_SIM_BANK_CONFLICTS", "1")
    caplog.set_level(logging.WARNING, logger="kernelbridge.perf")
    a = np.random.default_rng(stride).standard_normal(64).astype(np.float32)
    out = np.full(64, np.nan, np.float32)
    strided.simulate(a, out, stride, grid=1)
    np.testing.assert_array_equal(out, a)
    got = _records(caplog)
    if ways is None:
        assert got == []
        return
    assert len(got) == 2
    for kind, text in zip(("store", "load"), got):
        assert text.startswith(f"strided: shared {kind} of 4 bytes a lane at ")
        assert f"{ways}.00-way bank conflicts ({2 * ways} wavefronts for 2 warp requests where 2 would do)" in text
    assert "buf[t * stride] = a[t]" in got[0]


def test_lanes_reading_one_word_share_its_wavefront(monkeypatch, caplog):
    monkeypatch.setenv("KB_SIM_BANK_CONFLICTS", "1")
    caplog.set_level(logging.WARNING, logger="kernelbridge.perf")
    a = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    everyone_reads_one.simulate(a, out, grid=1)
    assert (out == 5).all() and _records(caplog) == []


def test_nothing_is_counted_unless_asked_for(monkeypatch, caplog):
    monkeypatch.delenv("KB_SIM_BANK_CONFLICTS", raising=False)
    caplog.set_level(logging.WARNING, logger="kernelbridge.perf")
    out = np.zeros(64, np.float32)
    strided.simulate(np.ones(64, np.float32), out, 32, grid=1)
    assert _records(caplog) == []


def test_wider_accesses_are_served_in_phases_of_128_bytes():
    lanes = np.arange(32)
    # 8 bytes a lane, contiguous: two half-warp phases of 128 bytes, one wavefront each
    assert wavefronts(lanes, lanes * 8, 8) == (1, 2, 2)
    # 16 bytes a lane (ldmatrix rows), contiguous: four phases of eight lanes
    assert wavefronts(lanes, lanes * 16, 16) == (1, 4, 4)
    # 16-byte rows 128 bytes apart: each phase's eight rows start in bank 0 -> 8 wavefronts a phase
    assert wavefronts(lanes, lanes * 128, 16) == (1, 32, 4)
    # an f32 accumulator's pairs (row lane / 4, columns 2 (lane % 4), + 1) into 128-byte rows with the
    # 128-byte swizzle (16-byte chunk c of row r at c ^ (r % 8)): rows 0 and 1 put their two chunks on the
    # same eight banks, as rows 2 and 3 do, so each half-warp phase takes 2 wavefronts
    row, col = lanes // 4, 2 * (lanes % 4)
    swizzled = row * 128 + (((col * 4) // 16) ^ (row % 8)) * 16 + (col * 4) % 16
    assert wavefronts(lanes, swizzled, 8) == (1, 4, 2)
    # the same with odd rows storing the fragment two over (columns + 16: chunks four over, staging_swap): rows
    # 0-3 of a phase take chunk pairs {0, 1}, {4, 5}, {2, 3}, {6, 7} -> one wavefront a phase, the ideal
    turned = row * 128 + ((((col * 4) // 16) ^ (row % 8) ^ (4 * (row % 2))) * 16) + (col * 4) % 16
    assert wavefronts(lanes, turned, 8) == (1, 2, 2)
    # two warps, one word each: a request each, one wavefront each
    assert wavefronts(np.array([0, 32]), np.array([0, 0]), 4) == (2, 2, 2)


@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swapped"])
def test_the_attention_backwards_f32_staging_conflicts_two_ways_unless_swapped(monkeypatch, caplog, swap):
    """The fused backward at D64 (FASTEST form, lowered for sm_90, simulated): without staging_swap its dQ
    tiles' and dK / dV's 8-byte pair stores into the 128-byte-swizzled staging slabs conflict two ways (rows r
    and r ^ 1 share a chunk pair); with it (the default) none do, nor do the dS^T staging's 4-byte stores and
    the lse / Delta relayouts, and the gradients are unchanged."""
    sys.path.insert(0, str(ROOT / "interop_tests" / "dsl_tile"))
    from test_flash_attention_bwd import grads64, inputs
    from test_flash_attention_bwd_fused import FUSED, lowered_backward
    monkeypatch.setenv("KB_SIM_BANK_CONFLICTS", "1")
    monkeypatch.setenv("KB_TILE_STAGING_SWAP", "1" if swap else "0")
    caplog.set_level(logging.WARNING, logger="kernelbridge.perf")
    q, k, v, dout = inputs(np.random.default_rng(3), 1, 256, 64, ml_dtypes.bfloat16)
    grads = lowered_backward(q, k, v, dout, 256, False, FUSED.FASTEST[64])
    for name, got, want in zip(("dq", "dk", "dv"), grads, grads64(q, k, v, dout, 256, False)):
        np.testing.assert_allclose(got, want, rtol=0, atol=5e-3 * np.abs(want).max(), err_msg=name)
    got = [t for t in _records(caplog) if t.startswith("flash_bwd_fused:")]
    if swap:
        assert got == []
        return
    # dQ's two adds (the deferred form's: a step's in the next step, the last after the loop), dK's and dV's stores
    assert len(got) == 4 and all("shared store of 8 bytes a lane" in t and "2.00-way" in t for t in got)
    assert sum("tile.atomic_add(dq, (qb_prev, 0)" in t for t in got) == 2
    assert any("dk.store(" in t for t in got) and any("dv.store(" in t for t in got)
