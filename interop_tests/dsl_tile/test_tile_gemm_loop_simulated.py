"""The sm_80 tensor-core GEMM loop (cp.async stages, XOR swizzle, ldmatrix fragments, mma.sync) runs
in the SIMT simulator through the CPU semantics of its PTX (dsl/tile/ptx_sim.py), for row-major B and
for B stored N x K (K-major, `tile.transpose(tile.load(bt, ...))`), f16/bf16/tf32, against float64
NumPy on shapes that are not multiples of the tile. The simulator models cp.async as the hardware
runs it, so a lowering with too weak a wait reads stale shared memory there too."""
from __future__ import annotations

import collections

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

import dsl.sim.interp as interp
import dsl.tile.lower_mma as lower_mma
from dsl import tile
from dsl.sim.addresses import AddressSpace
from dsl.sim.faults import SimulationError
from dsl.sim.memory import MemRef, SharedSpace

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
    too few computes from shared memory not yet written (the simulator fills it with NaN)."""
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
    with pytest.raises(SimulationError, match="outside argument 'b'"):
        space.global_read(np.array([base + 20]), 16)
    with pytest.raises(SimulationError, match="names no kernel argument"):
        space.global_read(np.array([base * 5]), 16)
    with pytest.raises(SimulationError, match="never allocated"):
        space.shared_bytes(np.array([0]), 16)
