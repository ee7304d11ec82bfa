"""The tensor-core GEMM loops run in the SIMT simulator through the CPU semantics of their PTX: the
sm_80/89 loop (cp.async stages, XOR swizzle, ldmatrix fragments, mma.sync; dsl/tile/ptx/sm80.py) and the
sm_90 loop (TMA boxes on mbarriers into swizzled stages, wgmma from matrix descriptors, one group in
flight; dsl/tile/ptx/sm90.py), for row-major B and for B stored N x K (K-major,
`tile.transpose(tile.load(bt, ...))`), f16/bf16/tf32/f8, against float64 NumPy on shapes that are not
multiples of the tile. The sm_90 model reproduces the bf16 TMA + wgmma GEMM proven on the H200. The
simulator runs the asynchronous parts as the hardware does, so a too-weak cp.async or wgmma wait, a
wrong swizzle or a copy that never lands fails here too."""
from __future__ import annotations

import collections
import json

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

import dsl.sim.interp as interp
import dsl.tile.lower.matmul.mma_sync as lower_mma
import dsl.tile.lower.matmul.wgmma as lower_wgmma
from dsl.tile.ptx import sm80 as ptx_sim
from dsl.tile.ptx import table as ptx_table
from dsl.tile.ptx.table import SemanticsRef
from dsl import tile
from dsl.backend.ptxas import find_ptxas
from dsl.types import f32
from dsl.sim.addresses import AddressSpace
from dsl.sim.faults import SimulationError
from dsl.sim.memory import MemRef, SharedSpace

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 60 s of a full run on 2 cores: simulated GEMM loops, ptxas

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "tf32": np.float32}


def tf32(x: np.ndarray) -> np.ndarray:
    """Round to nearest tf32 (ties away), as cvt.rna.tf32.f32 does; written here, not imported."""
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == np.float32:
        return tf32(a) @ tf32(b)
    return a.astype(np.float64) @ b.astype(np.float64)


class PtxCounter:
    """Counts the inline PTX statements the simulator executes, by their first word."""

    def __init__(self, monkeypatch) -> None:
        self.seen: collections.Counter = collections.Counter()
        original = interp.Machine.e_InlinePtx

        def spy(mach, e, sel):
            if "wgmma.mma_async" in e.asm:
                self.seen["wgmma.mma_async"] += 1
            else:
                text = e.asm.split(";")[-3] if e.asm.startswith("{") else e.asm
                self.seen[text.split()[0]] += 1
            return original(mach, e, sel)
        monkeypatch.setattr(interp.Machine, "e_InlinePtx", spy)


def run_gemm(kernel, a, b, tshape, bk):
    c = np.full((a.shape[0], b.shape[1]), np.nan, np.float32)
    bb = np.ascontiguousarray(b.T) if kernel is K.gemm_nt else b
    kernel.simulate_lowered(a, bb, tile.partition(c, tshape), bk, tensor_cores=True)
    return c


@pytest.mark.parametrize("kernel", [K.gemm, K.gemm_nt], ids=["b-row-major", "b-k-major"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("tshape,bk,mkn", [((64, 64), 32, (136, 200, 72)),      # 7 k tiles, ragged M and N
                                           ((128, 128), 32, (136, 24, 136)),    # fewer k tiles than stages
                                           ((64, 128), 16, (72, 104, 200))])
def test_the_tensor_core_gemm_loop_matches_numpy_in_the_simulator(monkeypatch, rng, kernel, dtype, tshape, bk, mkn):
    m, k, n = mkn
    a = rng.standard_normal((m, k)).astype(DTYPES[dtype])
    b = rng.standard_normal((k, n)).astype(DTYPES[dtype])
    ptx = PtxCounter(monkeypatch)
    c = run_gemm(kernel, a, b, tshape, bk)
    mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" if dtype == "tf32" else \
        f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32"
    assert ptx.seen[mma] > 0 and ptx.seen["cp.async.cg.shared.global"] > 0
    assert ptx.seen["ldmatrix.sync.aligned.m8n8.x4.shared.b16"] > 0
    if dtype == "tf32":
        assert ptx.seen["cvt.rna.tf32.f32"] > 0
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-4)


def test_a_b_operand_shorter_than_a_reads_zeros_past_its_end(rng):
    """The loop runs over a's k extent; B's copies are bounded by B's own rows (a tile.load reads
    padding outside its array), never by a's."""
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((40, 64)).astype(np.float16)
    c = np.full((64, 64), np.nan, np.float32)
    K.gemm.simulate_lowered(a, b, tile.partition(c, (64, 64)), 32, tensor_cores=True)
    np.testing.assert_allclose(c, a[:, :40].astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    c_nt = np.full((64, 64), np.nan, np.float32)
    bt = np.ascontiguousarray(rng.standard_normal((64, 40)).astype(np.float16))     # N x K with K = 40
    K.gemm_nt.simulate_lowered(a, bt, tile.partition(c_nt, (64, 64)), 32, tensor_cores=True)
    np.testing.assert_allclose(c_nt, a[:, :40].astype(np.float64) @ bt.T.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_too_weak_copy_wait_reads_stale_shared_memory_in_the_simulator(monkeypatch, rng):
    """cp.async lands only when a wait_group completes its group: a lowering that waits for one group
    too few computes from shared memory not yet written (the simulator fills it with NaN). The landing
    is pinned to the wait: KB_SIM_CP_ASYNC_LANDING=issue lands copies at once (its own tests)."""
    monkeypatch.setenv("KB_SIM_CP_ASYNC_LANDING", "wait")
    a = rng.standard_normal((64, 96)).astype(np.float16)
    b = rng.standard_normal((96, 64)).astype(np.float16)
    assert np.isfinite(run_gemm(K.gemm, a, b, (64, 64), 32)).all()
    weaker = lower_mma.cp_async_wait
    monkeypatch.setattr(lower_mma, "cp_async_wait", lambda L, keep: weaker(L, keep + 1))
    assert np.isnan(run_gemm(K.gemm, a, b, (64, 64), 32)).any()


def test_a_raw_address_outside_its_allocation_is_a_simulation_error():
    shared = SharedSpace(nblocks=1, dynamic=0)
    space = AddressSpace(shared)
    arr = MemRef("b", np.arange(8, dtype=np.float32), np.float32, shared=False)
    base = space.global_base(arr)
    assert space.global_read(np.array([base + 16]), 16).view(np.float32).tolist() == [[4.0, 5.0, 6.0, 7.0]]
    with pytest.raises(SimulationError, match="access outside argument .b."):
        space.global_read(np.array([base + 20]), 16)
    with pytest.raises(SimulationError, match="names no kernel argument"):
        space.global_read(np.array([base * 5]), 16)
    with pytest.raises(SimulationError, match="never allocated"):
        space.shared_bytes(np.array([0]), 16)


def run_sm90(kernel, a, b, tshape, bk, persistent=False, scale=None, out=np.float32):
    c = np.full((a.shape[0], b.shape[0] if kernel is not K.gemm else b.shape[1]), np.nan, out)
    k = tile.kernel(kernel.pyfunc, persistent=True) if persistent else kernel
    args = (a, b, tile.partition(c, tshape), bk) if scale is None else (a, b, np.float32(scale), tile.partition(c, tshape), bk)
    k.simulate_lowered(*args, tensor_cores=True, arch="sm_90", **({"blocks": 2} if persistent else {}))
    return c


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("tshape,bk", [((128, 128), 64), ((128, 256), 32)])
def test_the_h200_proven_tma_wgmma_gemm_matches_numpy_in_the_simulator(monkeypatch, rng, dtype, tshape, bk):
    """Row-major B: A one TMA box [128, BK], B BN/64 MN-major swizzle atoms, wgmma imm-trans-b 1 (the
    GPU-proven path that calibrates the sm_90 model); ragged M, N and K, more k tiles than stages."""
    m, k, n = 136, 456, 264
    a = rng.standard_normal((m, k)).astype(DTYPES[dtype])
    b = rng.standard_normal((k, n)).astype(DTYPES[dtype])
    ptx = PtxCounter(monkeypatch)
    c = run_sm90(K.gemm, a, b, tshape, bk)
    assert ptx.seen["cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"] > 0
    assert ptx.seen["wgmma.mma_async"] > 0 and ptx.seen["wgmma.wait_group.sync.aligned"] > 0
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", ["bf16", "f16", "tf32"])
@pytest.mark.parametrize("tshape,bk", [((128, 128), 32), ((128, 256), 16)])
@pytest.mark.parametrize("persistent", [False, True], ids=["tma", "persistent-cp.async"])
def test_a_k_major_b_feeds_wgmma_correctly_in_the_simulator(rng, dtype, tshape, bk, persistent):
    if dtype != "tf32" and bk == 16:
        bk = 32                       # 16-bit operands need 64-byte rows for wgmma
    m, k, n = 136, 200, 264
    a = rng.standard_normal((m, k)).astype(DTYPES[dtype])
    b = rng.standard_normal((k, n)).astype(DTYPES[dtype])
    c = run_sm90(K.gemm_nt, a, np.ascontiguousarray(b.T), tshape, bk, persistent)
    if dtype == "tf32":                # wgmma reads tf32 by dropping the low mantissa bits
        trunc = (lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64))
        ref = trunc(a) @ trunc(b)
    else:
        ref = reference(a, b)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tshape,bk", [((128, 256), 32), ((128, 128), 32)])
def test_f32_nn_through_a_transposing_pass_matches_float64_in_the_simulator(rng, tshape, bk):
    """benchmarks/gemm.py's "transpose + NT" f32 NN candidate: a row-major B copied to N x K by
    K.transpose (64 x 64 tiles, ragged edges), then the tf32 wgmma NT GEMM reading it K-major."""
    m, k, n = 136, 200, 264
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bt = np.full((n, k), np.nan, np.float32)
    K.transpose.simulate_lowered(b, tile.partition(bt, (64, 64)), tensor_cores=True, arch="sm_90")
    np.testing.assert_array_equal(bt, b.T)
    c = run_sm90(K.gemm_nt, a, bt, tshape, bk)
    trunc = (lambda x: (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64))
    np.testing.assert_allclose(c, trunc(a) @ trunc(b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("ta,tb", [(ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
                                   (ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fn)], ids=["e4m3", "e5m2-e4m3"])
@pytest.mark.parametrize("tshape,bk", [((128, 128), 64), ((128, 256), 128)])
def test_the_f8_wgmma_gemm_matches_numpy_in_the_simulator(rng, ta, tb, tshape, bk):
    m, k, n = 136, 272, 264
    a, bt = rng.standard_normal((m, k)).astype(ta), rng.standard_normal((n, k)).astype(tb)
    c = run_sm90(K.gemm_f8, a, bt, tshape, bk, scale=0.5)
    np.testing.assert_allclose(c, 0.5 * (a.astype(np.float64) @ bt.astype(np.float64).T), rtol=1e-5, atol=1e-4)


def test_a_too_weak_wgmma_wait_lets_a_stage_be_overwritten_while_it_is_read(monkeypatch, rng):
    """wait_group 2 where 1 is needed: the stage still read by the group in flight is refilled first,
    and the simulator (which reads a group's operands when its wait completes it) sees the new data
    when that copy lands at once (KB_SIM_TMA_LANDING=issue, the earliest the hardware may)."""
    monkeypatch.setenv("KB_SIM_TMA_LANDING", "issue")
    a = rng.standard_normal((136, 512)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 136)).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(run_sm90(K.gemm, a, b, (128, 128), 64), reference(a, b), rtol=1e-5, atol=1e-4)
    weaker = lower_wgmma.wait_wgmma
    monkeypatch.setattr(lower_wgmma, "wait_wgmma", lambda L, pending, acc: weaker(L, 2 if pending == 1 else pending, acc))
    assert np.abs(run_sm90(K.gemm, a, b, (128, 128), 64) - reference(a, b)).max() > 1.0


def test_an_mbarrier_wait_whose_copies_never_land_is_a_simulated_deadlock(monkeypatch, rng):
    a = rng.standard_normal((136, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 136)).astype(ml_dtypes.bfloat16)
    monkeypatch.setitem(ptx_table._RESOLVED, SemanticsRef("cp.async.bulk.tensor.2d"), ptx_sim.no_op)  # never land
    with pytest.raises(SimulationError, match="never completes"):
        run_sm90(K.gemm, a, b, (128, 128), 64)


@pytest.mark.parametrize("arch", ["sm_89", "sm_90"])
def test_interior_tiles_store_pairs_and_edge_tiles_store_checked_elements(monkeypatch, rng, arch):
    """The epilogue (dsl/tile/lower/store.py): tiles entirely inside C store each lane's column pair with
    one st.global.v2.f32 (no bounds checks); edge tiles store element by element, only inside C."""
    m, k, n = 200, 64, 136                        # 128x128 tiles: one interior tile, three edge tiles
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    ptx = PtxCounter(monkeypatch)
    c = np.full((m + 3, n), np.nan, np.float32)[:m]   # rows past C stay NaN if an edge store overran
    K.gemm.simulate_lowered(a, b, tile.partition(c, (128, 128)), 64, tensor_cores=True, arch=arch)
    assert ptx.seen["st.global.v2.f32"] > 0
    np.testing.assert_allclose(c, reference(a, b), rtol=1e-5, atol=1e-4)
    assert np.isnan(c.base[m:]).all()


def test_a_bf16_output_tile_stores_swapped_packed_pairs(monkeypatch, rng):
    """A 16-bit C: the lanes of a pair swap one packed word (shfl.xor 1) so each stores 4 consecutive
    columns (8 bytes); ragged edges keep the checked per-element stores."""
    m, k, n = 136, 64, 136
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    bt = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
    ptx = PtxCounter(monkeypatch)
    c = np.zeros((m, n), ml_dtypes.bfloat16)
    K.gemm_f8.simulate_lowered(a, bt, np.float32(1.0), tile.partition(c, (64, 64)), 64, tensor_cores=True)
    assert ptx.seen["st.global.v2.b32"] > 0 and ptx.seen["st.global.b32"] == 0
    ref = (a.astype(np.float64) @ bt.astype(np.float64).T).astype(np.float32).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(c.astype(np.float32), ref.astype(np.float32))


@pytest.mark.parametrize("mode,persistent", [("sync", False), ("ws", True)])
def test_a_16_bit_c_from_the_tma_gemm_is_rounded_once_and_stored_8_bytes_a_lane(monkeypatch, rng, mode, persistent):
    """gemm_cast into a bf16 C on sm_90 (TMA + wgmma, sync and persistent ws): the accumulators are
    rounded once into C's dtype, interior tiles go out through the pair-swapped 8-byte stores, ragged
    edge tiles element by element; nothing outside C is written."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", mode)
    m, k, n = 300, 136, 520
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    kernel = tile.kernel(K.gemm_cast.pyfunc, persistent=persistent)
    args = (a, b, tile.partition(c, (128, 256)), 64)
    ptx = PtxCounter(monkeypatch)
    kernel.simulate_lowered(*args, tensor_cores=True, arch="sm_90", **({"blocks": 2} if persistent else {}))
    assert ptx.seen["st.global.v2.b32"] > 0
    ck = kernel.compile(args, "sm_90")
    assert "cp.async.bulk.tensor" in ck.ptx and ck.threads == (384 if mode == "ws" else 256)
    ref = reference(a, b)
    np.testing.assert_allclose(c.astype(np.float32), ref, rtol=2 ** -8, atol=1e-2)


@pytest.mark.parametrize("landing", ["issue", "wait"])
@pytest.mark.parametrize("mode", ["sync", "ws"])
def test_both_tma_pipelines_match_numpy_whenever_the_copies_land(monkeypatch, rng, mode, landing):
    """The TMA copies landing at issue and at the first wait on their barrier (KB_SIM_TMA_LANDING):
    neither pipeline reads a stage before its wait or refills one still being read."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", mode)
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)
    a = rng.standard_normal((136, 520)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((520, 264)).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(run_sm90(K.gemm, a, b, (128, 256), 64), reference(a, b), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", ["sync", "ws"])
def test_both_tma_pipelines_match_numpy_and_only_sync_has_a_barrier_in_its_loop(monkeypatch, rng, mode):
    """sync (default): a block-wide barrier per k tile, copies S - 2 ahead; ws
    (KB_TILE_GEMM_PIPELINE=ws): each compute warpgroup arrives on the stage's empty mbarrier after its
    wgmma of it is done and the producer waits on it before refilling, no block-wide barrier."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", mode)
    a = rng.standard_normal((136, 520)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((520, 264)).astype(ml_dtypes.bfloat16)
    np.testing.assert_allclose(run_sm90(K.gemm, a, b, (128, 256), 64), reference(a, b), rtol=1e-5, atol=1e-4)
    ptx = K.gemm.compile((a, b, tile.partition(np.zeros((136, 264), np.float32), (128, 256)), 64), "sm_90").ptx
    body = ptx[ptx.index("wgmma.fence"):]           # from the first wgmma: the loop, then the epilogue
    loop = body[:body.index("wgmma.wait_group.sync.aligned 0;")]
    assert ("bar.sync" in loop) == (mode == "sync")
    assert ("mbarrier.arrive.shared::cta.b64" in ptx) == (mode == "ws")


def library_gemm_args(rng, which, m, k, n, tshape):
    """Operands, output and float64 reference of one of the library GEMMs."""
    f8 = which == "gemm_f8"
    dt = ml_dtypes.float8_e4m3fn if f8 else ml_dtypes.bfloat16
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    ref = reference(a, b)
    c = np.full((m, n), np.nan, np.float32)
    part = tile.partition(c, tshape)
    if which == "gemm_bias_relu":
        bias = rng.standard_normal(n).astype(np.float32)
        return (a, b, bias, part, 64), np.maximum(ref + bias, 0), c
    if which == "gemm":
        return (a, b, part, 64), ref, c
    bt = np.ascontiguousarray(b.T)
    return ((a, bt, np.float32(1.0), part, 128) if f8 else (a, bt, part, 64)), ref, c


@pytest.mark.parametrize("which", ["gemm", "gemm_bias_relu", "gemm_nt", "gemm_f8"])
def test_the_warp_specialised_gemm_matches_numpy_in_the_simulator(monkeypatch, rng, which):
    """KB_TILE_GEMM_PIPELINE=ws: a third warpgroup (tid.x < 128; thread 0) issues every TMA copy and
    refills a stage once both compute warpgroups released it; the compute warpgroups only wait, multiply
    and release, then run the epilogue alone (their barriers are a named barrier of 256 threads)."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    args, ref, c = library_gemm_args(rng, which, 300, 208, 264, (128, 256))
    kernel = getattr(K, which)
    kernel.simulate_lowered(*args, tensor_cores=True, arch="sm_90")
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)
    ck = kernel.compile(args, "sm_90")
    assert json.loads(ck.contract_json)["block"] == {"exact": [384, 1, 1]} and ".reqntid 384, 1, 1" in ck.ptx
    loop = ck.ptx[ck.ptx.index("wgmma.fence"):ck.ptx.index("wgmma.wait_group.sync.aligned 0;")]
    assert "bar.sync" not in loop and "bar.sync 1, 256;" in ck.ptx


def _gemm_plus_row(a: tile.Array[K.E, 2], b: tile.Array[K.E, 2], r: tile.Array[f32, 1],
                   c: tile.Partition[f32, 2], bk: K.T):
    """A GEMM that loads (a row of r) before its GEMM loop: the producers cannot run that part. (The row
    is reduced there: a load used only after the loop would be moved after it, dsl/tile/forward.py.)"""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    row = tile.load(r, j, (bn,))
    scale = tile.sum(row)                # the load stays before the loop, in this statement
    acc = tile.zeros((bm, bn), f32)
    for kk in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, kk), (bm, bk)), tile.load(b, (kk, j), (bk, bn)), acc)
    c.store(acc * scale)


def _tile_sums(r: np.ndarray, bn: int) -> np.ndarray:
    """Per column, the float64 sum of r over that column's tile of `bn` (the kernel's `scale`)."""
    sums = np.add.reduceat(r.astype(np.float64), np.arange(0, len(r), bn))
    return np.repeat(sums, bn)[:len(r)]


def _assert_gemm_plus_row(c: np.ndarray, a: np.ndarray, b: np.ndarray, r: np.ndarray, bn: int) -> None:
    """c against float64 within f32 rounding of its sums: 2^-20 of sum_k |a||b| times the tile's sum of
    |r| (the f32 accumulation and the f32 row sum both round; where the dot product cancels, its result
    is far smaller than its terms, so a bound relative to c alone fails on some seeds)."""
    want = reference(a, b) * _tile_sums(r, bn)
    bound = 2.0 ** -20 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))) * _tile_sums(np.abs(r), bn)
    err = np.abs(c.astype(np.float64) - want)
    assert np.all(err <= bound + 1e-6 * np.abs(want)), float((err - bound).max())


def test_a_kernel_that_loads_before_its_gemm_loop_is_not_warp_specialised(monkeypatch, rng):
    """The producers run what precedes the split, so only scalar and constant-tile assignments may."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    gemm_plus_row = tile.kernel(_gemm_plus_row)
    a = rng.standard_normal((136, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 264)).astype(ml_dtypes.bfloat16)
    r = rng.standard_normal(264).astype(np.float32)
    c = np.full((136, 264), np.nan, np.float32)
    gemm_plus_row.simulate_lowered(a, b, r, tile.partition(c, (128, 256)), 64, tensor_cores=True, arch="sm_90")
    _assert_gemm_plus_row(c, a, b, r, 256)
    ck = gemm_plus_row.compile((a, b, r, tile.partition(c, (128, 256)), 64), "sm_90")
    assert json.loads(ck.contract_json)["block"] == {"exact": [256, 1, 1]}


def test_consumers_that_never_release_a_stage_deadlock_the_simulated_producer(monkeypatch, rng):
    """With the roles as coroutines, a producer waiting on an empty barrier nobody arrives on, while
    the consumers wait on a copy it never issues, is a deadlock the simulator reports."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    monkeypatch.setitem(ptx_table._RESOLVED, SemanticsRef("mbarrier.arrive"), ptx_sim.no_op)
    a = rng.standard_normal((136, 640)).astype(ml_dtypes.bfloat16)      # 10 k tiles > the stages
    b = rng.standard_normal((640, 264)).astype(ml_dtypes.bfloat16)
    with pytest.raises(SimulationError, match="every role of the block waits"):
        run_sm90(K.gemm, a, b, (128, 256), 64)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("mode,persistent", [("sync", False), ("ws", False), ("ws", True)])
def test_ptxas_neither_serialises_the_wgmmas_nor_injects_warpgroup_syncs(monkeypatch, mode, persistent):
    """ptxas -v reports C7518 (wgmmas serialised) or C7517/C7519 (warpgroup wait/arrive injected) when
    accumulator registers are touched between the fence and the wgmmas or the wgmmas sit in a path it
    cannot prove uniform; any of them costs the tensor cores' overlap."""
    import subprocess
    import tempfile
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", mode)
    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    for kernel, args in ((K.gemm, (a, a)), (K.gemm_bias_relu, (a, a, np.zeros(256, np.float32)))):
        kernel = tile.kernel(kernel.pyfunc, persistent=True) if persistent else kernel
        ck = kernel.compile((*args, tile.partition(np.zeros((256, 256), np.float32), (128, 256)), 64), "sm_90")
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.ptx", "w") as f:
                f.write(ck.ptx)
            log = subprocess.run([find_ptxas(), "-arch=sm_90a", "-v", f"{tmp}/k.ptx", "-o", f"{tmp}/k.cubin"],
                                 capture_output=True, text=True, timeout=120)
        assert log.returncode == 0, log.stderr
        text = log.stdout + log.stderr
        assert not any(code in text for code in ("C7517", "C7518", "C7519")), text


@pytest.mark.parametrize("which,blocks", [("gemm", 2), ("gemm", 4), ("gemm_bias_relu", 3), ("gemm_nt", 2),
                                          ("gemm_f8", 2)])
def test_the_persistent_warp_specialised_tma_gemm_matches_numpy_in_the_simulator(monkeypatch, rng, which, blocks):
    """@tile.kernel(persistent=True) with KB_TILE_GEMM_PIPELINE=ws: the mbarriers are set up once
    before the tile loop, the block's k-tile count runs on across its tiles (stages and phases carry
    over), the consumers release a tile's last stage, and the producer walks the same tiles, running
    ahead into the next tile while the consumers store this one. 9 tiles on 2-4 blocks (uneven),
    ragged M, N, K."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    args, ref, c = library_gemm_args(rng, which, 300, 208, 264, (128, 128))
    kernel = tile.kernel(getattr(K, which).pyfunc, persistent=True)
    ck = kernel.compile(args, "sm_90")
    assert ck.threads == 384 and "cp.async.bulk.tensor" in ck.ptx
    stages = (ck.dynamic_smem - 1024) // (32 * 1024)              # 32 KiB a stage for every kernel here
    assert ck.ptx.count("mbarrier.init") == 2 * stages              # once, before the tile loop
    assert json.loads(ck.contract_json)["grid_from"]["max_blocks_per_sm"] == 1    # 193 KiB of stages
    kernel.simulate_lowered(*args, tensor_cores=True, arch="sm_90", blocks=blocks)
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-4)


def test_a_persistent_tma_gemm_that_cannot_be_warp_specialised_carries_its_phases_too(monkeypatch, rng):
    """Persistent, ws asked for, but a load before the GEMM loop: the TMA loop without a producer
    warpgroup (a barrier per k tile), its k-tile count still running on across the block's tiles."""
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    gemm_plus_row = tile.kernel(_gemm_plus_row, persistent=True)
    a = rng.standard_normal((300, 456)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((456, 264)).astype(ml_dtypes.bfloat16)
    r = rng.standard_normal(264).astype(np.float32)
    c = np.full((300, 264), np.nan, np.float32)
    args = (a, b, r, tile.partition(c, (128, 128)), 64)
    ck = gemm_plus_row.compile(args, "sm_90")
    assert ck.threads == 256 and "cp.async.bulk.tensor" in ck.ptx
    gemm_plus_row.simulate_lowered(*args, tensor_cores=True, arch="sm_90", blocks=2)
    _assert_gemm_plus_row(c, a, b, r, 128)
    assert json.loads(ck.contract_json)["grid_from"]["max_blocks_per_sm"] == 1


def test_a_persistent_gemm_on_the_default_pipeline_keeps_cp_async_and_two_blocks_per_sm(monkeypatch):
    """Without ws, a persistent sm_90 GEMM keeps the GPU-proven cp.async + wgmma loop and its grid of
    two blocks per SM (only TMA-fed persistent blocks run one per SM)."""
    monkeypatch.delenv("KB_TILE_GEMM_PIPELINE", raising=False)
    a = np.zeros((256, 256), ml_dtypes.bfloat16)
    ck = tile.kernel(K.gemm.pyfunc, persistent=True).compile(
        (a, a, tile.partition(np.zeros((256, 256), np.float32), (128, 128)), 64), "sm_90")
    assert "cp.async.bulk.tensor" not in ck.ptx and "cp.async.cg" in ck.ptx and "wgmma" in ck.ptx
    assert json.loads(ck.contract_json)["grid_from"]["max_blocks_per_sm"] == 2
