"""Loads of one tile in a ring loop share one stage (dsl/tile/lower/pipeline.py `distinct`): copied once
an iteration, waited for at the first product that reads it, released after the last. Attention's
backward reads its Q and dO tiles in two products each; before, each read had a stage of its own, so
the ring copied both tiles twice an iteration into twice the shared memory. Checked: the ring's
barriers and shared memory count tiles, not loads; loads of other tiles keep their own stages; the
lowered sm_90 simulator matches float64 whenever the copies land, under both ring forms (tma, ws);
and a stage released after its first read is caught."""
from __future__ import annotations

import re

import numpy as np
import pytest
from ptxas_kit import ptxas_verbose

from dsl import TypeVar, f32, i32, tile
from dsl.tile.lower import pipeline as P

E = TypeVar("E")
ROWS = 64           # a tile's rows and columns: one m64 wgmma on 4 warps, one 128-byte swizzle row


@tile.kernel
def same_tile_twice(a: tile.Array[E, 2], w: tile.Array[E, 2], out: tile.Partition[f32, 2], n: i32):
    """out = sum_j (W A_j^T rounded to E) A_j: A_j read by two products, K-major then MN-major."""
    wt = tile.load(w, (0, 0), (ROWS, ROWS))
    acc = tile.zeros((ROWS, ROWS), f32)
    for j in range(n):
        s = tile.matmul(wt, tile.transpose(tile.load(a, (j, 0), (ROWS, ROWS))))
        acc = acc + tile.matmul(s.astype(a.dtype), tile.load(a, (j, 0), (ROWS, ROWS)))
    out.store(acc)


@tile.kernel
def next_tile(a: tile.Array[E, 2], w: tile.Array[E, 2], out: tile.Partition[f32, 2], n: i32):
    """As same_tile_twice, but the second product reads A_{j+1} (zeros past the array): two tiles."""
    wt = tile.load(w, (0, 0), (ROWS, ROWS))
    acc = tile.zeros((ROWS, ROWS), f32)
    for j in range(n):
        s = tile.matmul(wt, tile.transpose(tile.load(a, (j, 0), (ROWS, ROWS))))
        acc = acc + tile.matmul(s.astype(a.dtype), tile.load(a, (j + 1, 0), (ROWS, ROWS)))
    out.store(acc)


FORMS = {"tma": {"loop_pipeline": "tma"}, "ws": {"loop_pipeline": "ws"}}


def _inputs(n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n * ROWS, ROWS)).astype(np.float16)
    w = (rng.standard_normal((ROWS, ROWS)) / 8).astype(np.float16)
    return a, w


def _want(a: np.ndarray, w: np.ndarray, n: int, shift: int) -> np.ndarray:
    """float64, with the kernel's one rounding: S to float16 before the second product."""
    tiles = [a[j * ROWS:(j + 1) * ROWS].astype(np.float64) for j in range(n)] + [np.zeros((ROWS, ROWS))]
    acc = np.zeros((ROWS, ROWS))
    for j in range(n):
        s = (w.astype(np.float64) @ tiles[j].T).astype(np.float16).astype(np.float64)
        acc += s @ tiles[j + shift]
    return acc


def _run(kern, form: str, n: int = 5, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    a, w = _inputs(n, seed)
    out = np.full((ROWS, ROWS), np.nan, np.float32)
    k = tile.kernel(kern.pyfunc, lowering=FORMS[form])
    k.simulate_lowered(a, w, tile.partition(out, (ROWS, ROWS)), n, tensor_cores=True, arch="sm_90")
    return out, _want(a, w, n, 0 if kern is same_tile_twice else 1)


def _compiled(kern, form: str):
    a, w = _inputs(3, 0)
    out = np.zeros((ROWS, ROWS), np.float32)
    return tile.kernel(kern.pyfunc, lowering=FORMS[form]).compile((a, w, tile.partition(out, (ROWS, ROWS)), 3), "sm_90")


@pytest.mark.parametrize("form", FORMS)
def test_two_loads_of_one_tile_take_one_stage_and_two_tiles_take_two(form):
    """The ring's full barriers (one a stage of each tile) and its shared memory count tiles: a
    stage of 64 x 64 halves takes 8 KiB."""
    one, two = _compiled(same_tile_twice, form), _compiled(next_tile, form)
    stages = 2                                  # the default loop_stages
    per_tile = (2 if form == "ws" else 1) * stages      # ws: an empty barrier beside each full one
    assert one.ptx.count("mbarrier.init") == per_tile
    assert two.ptx.count("mbarrier.init") == 2 * per_tile
    assert two.dynamic_smem - one.dynamic_smem >= stages * ROWS * ROWS * 2


@pytest.mark.slow
@pytest.mark.parametrize("landing", ["issue", "wait"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kern", [same_tile_twice, next_tile], ids=["same tile", "next tile"])
def test_the_shared_stage_matches_float64_whenever_the_copies_land(kern, form, landing, monkeypatch):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    got, want = _run(kern, form)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 * np.abs(want).max())


@pytest.mark.slow
def test_a_stage_released_after_its_first_read_is_caught(monkeypatch):
    """Mutation: the stage is released (and, under tma, refilled with iteration n + 2) after the first
    product, while the second still has to read it. Copies landing at issue overwrite it at once: the
    second product multiplies the wrong tile."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "issue")
    got, want = _run(same_tile_twice, "tma")
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-2 * np.abs(want).max())
    monkeypatch.setattr(P.Pipeline, "last_use", lambda self, i: (self.seen or []).count(i) == 1)
    got, want = _run(same_tile_twice, "tma")
    assert np.abs(got - want).max() > 0.1 * np.abs(want).max()


# ------------------------------------------- a closing TMA store in the ring's stages (same_tile_twice's own)
@tile.kernel
def store_then_loop(a: tile.Array[E, 2], w: tile.Array[E, 2], early: tile.Partition[f32, 2],
                    out: tile.Partition[f32, 2], n: i32):
    """A store before the loop: the ring is not drained there, so that store stages on its own."""
    wt = tile.load(w, (0, 0), (ROWS, ROWS))
    early.store(tile.matmul(wt, tile.transpose(wt)))
    acc = tile.zeros((ROWS, ROWS), f32)
    for j in range(n):
        s = tile.matmul(wt, tile.transpose(tile.load(a, (j, 0), (ROWS, ROWS))))
        acc = acc + tile.matmul(s.astype(a.dtype), tile.load(a, (j, 0), (ROWS, ROWS)))
    out.store(acc)


TMA_STORE = {"tma_store": True}
BULK_STORE = "cp.async.bulk.tensor.2d.global.shared::cta"


def _smem(kern, lowering: dict, tmp_path) -> tuple[int, str]:
    """(shared bytes a block takes: dynamic + static as ptxas counts them, the PTX)."""
    a, w = _inputs(3, 0)
    outs = [tile.partition(np.zeros((ROWS, ROWS), np.float32), (ROWS, ROWS)) for _ in range(2 if kern is store_then_loop else 1)]
    ck = tile.kernel(kern.pyfunc, lowering=lowering).compile((a, w, *outs, 3), "sm_90")
    static = int(re.findall(r"(\d+) bytes smem", ptxas_verbose(ck.ptx, "sm_90a", tmp_path))[-1])
    return ck.dynamic_smem + static, ck.ptx


@pytest.mark.parametrize("form", FORMS)
def test_a_closing_tma_store_stages_in_the_drained_rings_stages(form, tmp_path):
    """The 64 x 64 f32 tile (16 KiB) fits the ring's two 8 KiB stages side by side: the kernel needs no
    more shared memory with the TMA store than without; a store before the loop has its own."""
    plain, _ = _smem(same_tile_twice, FORMS[form], tmp_path)
    closing, ptx = _smem(same_tile_twice, {**FORMS[form], **TMA_STORE}, tmp_path)
    assert BULK_STORE in ptx and closing == plain
    early_plain, _ = _smem(store_then_loop, FORMS[form], tmp_path)
    early, ptx = _smem(store_then_loop, {**FORMS[form], **TMA_STORE}, tmp_path)
    assert ptx.count(BULK_STORE) == 2 * (ROWS * 4 // 128) and early >= early_plain + ROWS * ROWS * 4   # 2 slabs a store


@pytest.mark.slow
@pytest.mark.parametrize("landing", ["issue", "wait"])
@pytest.mark.parametrize("form", FORMS)
def test_the_closing_store_from_the_ring_stages_matches_float64(form, landing, monkeypatch):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    n = 5
    a, w = _inputs(n, 2)
    out = np.full((ROWS, ROWS), np.nan, np.float32)
    k = tile.kernel(same_tile_twice.pyfunc, lowering={**FORMS[form], **TMA_STORE})
    k.simulate_lowered(a, w, tile.partition(out, (ROWS, ROWS)), n, tensor_cores=True, arch="sm_90")
    want = _want(a, w, n, 0)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-2 * np.abs(want).max())
