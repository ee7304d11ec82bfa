"""tf32 GEMM loops whose operands are not K-major run on sm_90 warpgroup MMA through a transposing
register stage (dsl/tile/lower/matmul/transposing.py): a row-major B ("NN", behind
KB_TILE_TF32_TRANSPOSE=1 until the H200 measures it) and an A stored K x M ("TN", by default: it
used to take the portable FMA path). Each thread loads 16-byte runs of the operand's rows with
ld.global.nc.v4 and stores them transposed into the K-major swizzled stage tf32 wgmma reads; a
K-major operand still comes by TMA.

The simulator runs the LOWERED kernel (TMA boxes, mbarriers, wgmma from matrix descriptors, the
shared stores) against float64 NumPy on shapes that are not multiples of the tile; ptxas assembles the
ladder's tile shapes for sm_90a without spills; the GPU twin checks against torch float64.

GPU part: python -m pytest -q -p no:cacheprovider -n 0 -m gpu interop_tests/dsl_tile/test_tile_tf32_transposing_stage.py
"""
from __future__ import annotations

import collections
import re

import numpy as np
import pytest
import tile_kernels_lib as K

import dsl.sim.interp as interp
from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.perf import from_metadata
from dsl.types import f32

pytestmark = pytest.mark.slow      # simulated 128-row GEMM loops and ptxas: seconds each on 2 cores

SWITCH = "KB_TILE_TF32_TRANSPOSE"


@tile.kernel
def gemm_tn(at: tile.Array[K.E, 2], b: tile.Array[K.E, 2], c: tile.Partition[f32, 2], bk: K.T):
    """c = at.T @ b: A stored K x M (M contiguous), B row-major."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((at.shape[0] + bk - 1) // bk):
        acc = tile.mma(tile.transpose(tile.load(at, (k, i), (bk, bm))), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)


@tile.kernel
def gemm_tt(at: tile.Array[K.E, 2], bt: tile.Array[K.E, 2], c: tile.Partition[f32, 2], bk: K.T):
    """c = at.T @ bt.T: A stored K x M, B stored N x K (K-major, by TMA)."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((at.shape[0] + bk - 1) // bk):
        acc = tile.mma(tile.transpose(tile.load(at, (k, i), (bk, bm))),
                       tile.transpose(tile.load(bt, (j, k), (bn, bk))), acc)
    c.store(acc)


KERNELS = {"NN": K.gemm, "TN": gemm_tn, "TT": gemm_tt}


def trunc_tf32(x: np.ndarray) -> np.ndarray:
    """tf32 as wgmma reads an f32 register or shared word: the low 13 mantissa bits dropped; written
    here from the PTX ISA, not imported."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def operands(rng, layout: str, m: int, n: int, k: int):
    """A (M x K) and B (K x N) as values, and the arrays the layout's kernel takes."""
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    first = np.ascontiguousarray(a.T) if layout in ("TN", "TT") else a
    second = np.ascontiguousarray(b.T) if layout == "TT" else b
    return a, b, first, second


class Seen:
    """Counts the simulated inline PTX statements containing each of `words`, and keeps the order in
    which they ran."""

    def __init__(self, monkeypatch, words: tuple[str, ...]) -> None:
        self.count: collections.Counter = collections.Counter()
        self.order: list[str] = []
        original = interp.Machine.e_InlinePtx

        def spy(mach, e, sel):
            for w in words:
                if w in e.asm:
                    self.count[w] += 1
                    self.order.append(w)
            return original(mach, e, sel)
        monkeypatch.setattr(interp.Machine, "e_InlinePtx", spy)


LOAD, COMMIT, WAIT1 = "ld.global.nc.v4.f32", "wgmma.commit_group", "wgmma.wait_group.sync.aligned 1"
WORDS = ("wgmma.mma_async", LOAD, "cp.async.bulk.tensor", "mma.sync", COMMIT, WAIT1)


def loads_between_commit_and_wait(order: list[str]) -> int:
    """How many groups had staged loads issued after their commit and before their wait_group 1."""
    text = " ".join("C" if w == COMMIT else "W" if w == WAIT1 else "L" if w == LOAD else "" for w in order)
    return len(re.findall(r"C[ L]*L[ L]*W", text.replace("  ", " ")))
SIM_CASES = [("NN", (128, 128), 32, (200, 136, 72)), ("NN", (128, 256), 32, (200, 136, 456)),
             ("NN", (128, 256), 16, (136, 264, 72)), ("TN", (128, 128), 32, (200, 136, 72)),
             ("TN", (128, 256), 16, (200, 264, 200)), ("TT", (128, 128), 32, (136, 200, 456))]


@pytest.mark.parametrize("layout,tshape,bk,mnk", SIM_CASES,
                         ids=[f"{c[0]}-{c[1][0]}x{c[1][1]}x{c[2]}-{c[3][2]}k" for c in SIM_CASES])
def test_a_transposing_stage_feeds_tf32_wgmma_correctly_in_the_simulator(monkeypatch, rng, layout, tshape, bk, mnk):
    """Ragged M, N and K; 72 k rows are fewer k tiles than stages, 456 many more (the steady state)."""
    monkeypatch.setenv(SWITCH, "1")
    m, n, k = mnk
    a, b, first, second = operands(rng, layout, m, n, k)
    c = np.full((m, n), np.nan, np.float32)
    seen = Seen(monkeypatch, WORDS)
    KERNELS[layout].simulate_lowered(first, second, tile.partition(c, tshape), bk, tensor_cores=True, arch="sm_90")
    assert seen.count["wgmma.mma_async"] > 0 and seen.count["ld.global.nc.v4.f32"] > 0
    assert seen.count["mma.sync"] == 0
    if k > 2 * 4 * bk:      # steady state: the next tile's loads go out while the tensor cores work
        assert loads_between_commit_and_wait(seen.order) > 0
    # A comes by TMA unless it is the staged one; a K-major B by TMA too
    assert (seen.count["cp.async.bulk.tensor"] > 0) == (layout != "TN")
    np.testing.assert_allclose(c, trunc_tf32(a) @ trunc_tf32(b), rtol=1e-5, atol=1e-4)


def test_a_split_k_range_reads_the_k_tiles_of_its_own_split(monkeypatch, rng):
    """gemm_split_k's loop starts past k tile 0: the staged B rows follow the loop's start as A's TMA
    boxes do."""
    monkeypatch.setenv(SWITCH, "1")
    m, n, k, splits = 136, 136, 520, 3
    a, b, _, _ = operands(rng, "NN", m, n, k)
    partial = np.full((K.split_k_rows(m, 128, splits), n), np.nan, np.float32)
    K.gemm_split_k.simulate_lowered(a, b, tile.partition(partial, (128, 128)), 32, tensor_cores=True, arch="sm_90")
    got = partial.reshape(splits, -1, n)[:, :m].sum(axis=0)
    np.testing.assert_allclose(got, trunc_tf32(a) @ trunc_tf32(b), rtol=1e-5, atol=1e-4)


def compiled(layout: str, tshape: tuple[int, int], bk: int, arch: str = "sm_90"):
    z = np.zeros((256, 256), np.float32)
    return KERNELS[layout].compile((z, z, tile.partition(np.zeros((256, 256), np.float32), tshape), bk), arch)


def test_row_major_b_keeps_mma_sync_unless_the_switch_asks(monkeypatch):
    """Unmeasured, so not the default for NN: off, the tf32 NN loop is the mma.sync one; on, tf32
    wgmma, B through 16-byte global loads and 4-byte shared stores."""
    monkeypatch.delenv(SWITCH, raising=False)
    ptx = compiled("NN", (128, 256), 32).ptx
    assert "mma.sync.aligned.m16n8k8" in ptx and "wgmma" not in ptx
    monkeypatch.setenv(SWITCH, "1")
    ptx = compiled("NN", (128, 256), 32).ptx
    assert "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32" in ptx and "mma.sync" not in ptx
    assert "st.shared.b32" in ptx and "ld.global.nc.v4.f32" in ptx


def test_an_a_stored_k_by_m_leaves_the_fma_path_by_default(monkeypatch):
    """TN used to be a `fma-product` slow path on every arch; on sm_90 it now takes tf32 wgmma without
    the switch. sm_80 keeps the portable path (the mma.sync loop reads A K-major)."""
    monkeypatch.delenv(SWITCH, raising=False)
    ck = compiled("TN", (128, 128), 32)
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in ck.ptx
    assert not [s for s in from_metadata(ck.metadata) if s.kind == "fma-product"]
    old = compiled("TN", (128, 128), 32, "sm_80")
    assert "wgmma" not in old.ptx and [s for s in from_metadata(old.metadata) if s.kind == "fma-product"]


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("layout", ["NN", "TN"])
@pytest.mark.parametrize("tshape", [(128, 256), (128, 128)], ids=["128x256x32", "128x128x32"])
def test_ptxas_assembles_the_ladder_tiles_without_spills_or_serialised_wgmmas(monkeypatch, layout, tshape):
    monkeypatch.setenv(SWITCH, "1")
    ck = compiled(layout, tshape, 32)
    assert ck.metadata["arch"] == "sm_90a" and f"m64n{tshape[1]}k8.f32.tf32.tf32" in ck.ptx
    usage, log = assemble(ck.ptx, ck.metadata["arch"])
    assert usage and usage[0].spill_stores == 0 and usage[0].spill_loads == 0, usage
    assert not any(code in log for code in ("C7517", "C7518", "C7519")), log


GPU_CASES = [("NN", (128, 256), 32, (1000, 776, 1048)), ("NN", (128, 128), 32, (300, 200, 176)),
             ("TN", (128, 256), 32, (1000, 776, 1048)), ("TT", (128, 128), 32, (304, 200, 176))]


@pytest.mark.gpu
@pytest.mark.parametrize("layout,tshape,bk,mnk", GPU_CASES,
                         ids=[f"{c[0]}-{c[1][0]}x{c[1][1]}x{c[2]}-{c[3][2]}k" for c in GPU_CASES])
def test_the_transposing_stage_matches_torch_float64_on_the_gpu(monkeypatch, rng, layout, tshape, bk, mnk):
    import bridge
    torch = pytest.importorskip("torch")
    if bridge.current_device().arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"tf32 wgmma needs sm_90, this device is {bridge.current_device().arch}")
    monkeypatch.setenv(SWITCH, "1")
    kernel = tile.kernel(KERNELS[layout].pyfunc)          # a fresh dispatcher: compiled with the switch on
    m, n, k = mnk
    a, b, first, second = operands(rng, layout, m, n, k)
    c = bridge.full((m, n), np.nan, "float32")
    args = (bridge.from_host(first), bridge.from_host(second), tile.partition(c, tshape), bk)
    assert "wgmma.mma_async" in kernel.compile(args, bridge.current_device().arch).ptx
    kernel(*args)
    ref = (torch.from_numpy(a).cuda().double() @ torch.from_numpy(b).cuda().double()).cpu().numpy()
    np.testing.assert_allclose(c.to_host(), ref, rtol=5e-3, atol=5e-3 * np.sqrt(k))
