"""Intrinsics lower to their IR nodes with the documented types: warp ops, atomics, registers, math
(also from Python's math module), shared memory; and the kernels compile to PTX."""
from __future__ import annotations

import math

import numpy as np

from dsl import f32, i32, simt, u32
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from interop_tests.dsl_frontend.frontend_helpers import f32v, nodes_of


@simt.kernel(block=128)
def k_warp(a: simt.Array[f32], hist: simt.DisjointSlice[i32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    v = a[i] if i < len(a) else f32(0)
    s = simt.warp.sum(v)
    m = simt.warp.ballot(v > 1.0)
    up = simt.warp.shfl_down(v, 16)
    x = simt.warp.shfl(v, 0) + simt.warp.shfl_xor(v, 1) + simt.warp.shfl_up(v, 2)
    ok = simt.warp.any(v > 2.0) and simt.warp.all(v > 0.0)
    lane = simt.lane_id()
    with simt.unsafe():
        old = simt.atomic.add(hist, i32(lane) % 4, 1)
        simt.atomic.cas(hist, 0, 5, 6)
        simt.atomic.max(hist, 1, i32(m & u32(7)))
    out[i] = s + up + x + math.sqrt(v) + simt.rsqrt(v + 1.0) + math.fabs(v) + f32(old)


def test_warp_and_atomic_nodes_have_documented_types():
    a = f32v(200)
    fn = k_warp.build(a, np.arange(1, 5, dtype=np.int32), a.copy())
    warps = {w.op: w for w in nodes_of(fn, ir.Warp)}
    assert set(warps) == {"sum", "ballot", "shfl_down", "shfl", "shfl_xor", "shfl_up", "any", "all"}
    assert warps["sum"].type == irt.F32 and warps["ballot"].type == irt.U32
    assert warps["any"].type == irt.BOOL and warps["shfl_down"].args[1].type == irt.I32
    atomics = {a.op: a for a in nodes_of(fn, ir.Atomic)}
    assert set(atomics) == {"add", "cas", "max"}
    assert len(atomics["cas"].args) == 2 and all(x.type == irt.I32 for x in atomics["cas"].args)
    assert atomics["add"].check == "fault"          # `lane % 4` is not proven below len(hist)
    maths = {m.fn for m in nodes_of(fn, ir.Math)}
    assert {"sqrt", "rsqrt", "fabs"} <= maths       # math.fabs is the math table's fabs row
    assert any(s.name == "laneid" for s in nodes_of(fn, ir.Special))


def test_intrinsics_compile_to_ptx():
    a = f32v(200)
    ptx = k_warp.ptx(a, np.arange(1, 5, dtype=np.int32), a.copy(), arch="sm_90")
    assert "shfl.sync" in ptx and "atom" in ptx and "vote" in ptx


@simt.kernel(domain=3, launch_bounds=512)
def k_registers(out: simt.DisjointSlice[i32, 3]):
    idx = simt.thread.index_3d()
    d, r, c = idx
    out[idx] = i32(simt.threadIdx.z + simt.blockIdx.y * simt.blockDim.x + simt.gridDim.x
                   + simt.warp_size + d * 0)


def test_registers_and_3d_index():
    fn = k_registers.build(np.ones((2, 3, 4), np.int32))
    names = {s.name for s in nodes_of(fn, ir.Special)}
    assert names == {"tid.z", "ctaid.y", "ntid.x", "nctaid.x", "warpsize"}
    (region,) = [s for s in fn.body if isinstance(s, ir.GuardedRegion)]
    assert [e.k for e in region.indices] == [0, 1, 2]
    assert fn.max_threads == 512 and fn.exact_block is None


@simt.kernel
def k_int_pow(a: simt.Array[i32], out: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    out[i] = a[i] ** 3 + abs(a[i]) + min(a[i], 4, 9) + max(a[i], 2)


def test_integer_power_multiplies_out_and_min_max_chain():
    fn = k_int_pow.build(np.arange(1, 9, dtype=np.int32), np.ones(8, np.int32))
    muls = [b for b in nodes_of(fn, ir.BinOp) if b.op == "mul"]
    assert len(muls) == 3
    assert [b.op for b in nodes_of(fn, ir.BinOp)].count("min") == 2
    out = np.full(8, -1, np.int32)
    a = np.arange(1, 9, dtype=np.int32)
    k_int_pow.simulate(a, out)
    np.testing.assert_array_equal(out, a ** 3 + a + np.minimum(a, 4) + np.maximum(a, 2))
