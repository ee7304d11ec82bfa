"""Run-time bounds faults (first fault wins, the faulting thread exits, others finish), warp ops with
PTX source-lane rules, and atomics that return old values of one serial order."""
from __future__ import annotations

import numpy as np
import pytest
from sim_irkit import C, P, R, arr, bop, cmp, gid, guarded, kernel, load, loc, params, sp, store

from bridge.errors import (AliasingError, ArgumentKindError, BlockSizeError, DTypeError, GridSizeError,
                           KernelFault, ScalarRangeError)
from dsl.ir import nodes as N
from dsl.ir.types import F32, I32, I64, U32, ArrayType
from dsl.sim import SimulationError, run, simulate


def gather_ir(check: str = "fault") -> N.Function:
    """out[i] = a[idx[i]] with a fault-checked load of `a`."""
    a, idx, out = params(("a", arr(F32)), ("idx", arr(I64)), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)
    site = N.FaultSite(3, "a", loc(12, "    out[i] = a[idx[i]]"))
    ld = load(a, [load(idx, [R(i)], I64)], check=check, site=3, at=site.loc)
    return kernel("gather", [a, idx, out], [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], ld, mode="guarded")])], fault_sites=[site])


def test_fault_names_kernel_array_index_extent_and_line_after_the_launch(rng):
    x = rng.standard_normal(100).astype(np.float32)
    idx = rng.integers(0, 100, 300)
    idx[[17, 250]] = [100, -5]                      # lane 17 faults first
    out = np.full(300, -7.0, np.float32)
    with pytest.raises(KernelFault) as ei:
        run(gather_ir(), [x, idx, out], grid=3, block=128)
    f = ei.value
    assert (f.kernel, f.array, f.index, f.extent, f.file, f.line) == ("gather", "a", 100, 100,
                                                                       "kernels.py", 12)
    assert str(f).startswith("gather: index 100 out of bounds for array 'a' with extent 100 at "
                             "kernels.py:12: out[i] = a[idx[i]] (simulated; first fault by thread (17, 0, 0) "
                             "of block (0, 0, 0))")
    ok = np.ones(300, bool)
    ok[[17, 250]] = False
    np.testing.assert_array_equal(out[ok], x[idx[ok]])      # every other thread completed
    assert out[17] == -7.0 and out[250] == -7.0             # the faulting threads exited


def test_unchecked_out_of_range_access_is_a_simulation_error(rng):
    idx = np.array([0, 1, 2, 500])
    with pytest.raises(SimulationError, match="unchecked access to 'a' with index 500 outside extent 10"):
        run(gather_ir("none"), [np.ones(10, np.float32), idx, np.zeros(4, np.float32)], grid=1, block=32)


def test_checked_store_faults(rng):
    out, = params(("out", arr(I64, writable=True)))
    body = [store(out, [bop("mul", gid(), C(2))], C(1), mode="checked", site=1,
                  at=loc(4, "out[2*i] = 1"))]
    y = np.zeros(50, np.int64)
    with pytest.raises(KernelFault) as ei:
        run(kernel("st", [out], body), [y], grid=1, block=64)
    assert (ei.value.index, ei.value.extent, ei.value.line) == (50, 50, 4)
    assert y[::2].tolist() == [1] * 25 and not y[1::2].any()


def warp_ir(op: str, vt, rt, operand=None) -> N.Function:
    a, out = params(("a", arr(vt)), ("out", arr(rt, writable=True)))
    i = N.Var("i", I64)
    args = [load(a, [R(i)], vt)] + ([operand] if operand is not None else [])
    return kernel("w", [a, out], [N.Assign(i, gid()), store(out, [R(i)], N.Warp(op, args, rt))])


def run_warp(op, x, rt, operand=None, block=64):
    out = np.zeros(len(x), rt and {I32: np.int32, F32: np.float32, U32: np.uint32}[rt])
    vt = {np.dtype(np.int32): I32, np.dtype(np.float32): F32}[x.dtype]
    run(warp_ir(op, vt, rt, operand), [x, out], grid=len(x) // block, block=block)
    return out


def test_warp_shuffles_follow_ptx_source_lane_rules(rng):
    x = rng.integers(-1000, 1000, 128).astype(np.int32)
    w = x.reshape(-1, 32)
    lane = np.arange(32)
    got = run_warp("shfl", x, I32, bop("add", sp("laneid"), C(35))).reshape(-1, 32)
    np.testing.assert_array_equal(got, w[:, (lane + 35) & 31])          # idx wraps modulo 32
    got = run_warp("shfl_down", x, I32, C(5)).reshape(-1, 32)
    np.testing.assert_array_equal(got, np.where(lane + 5 < 32, w[:, np.minimum(lane + 5, 31)], w))
    got = run_warp("shfl_up", x, I32, C(3)).reshape(-1, 32)
    np.testing.assert_array_equal(got, np.where(lane >= 3, w[:, np.maximum(lane - 3, 0)], w))
    got = run_warp("shfl_xor", x, I32, C(6)).reshape(-1, 32)
    np.testing.assert_array_equal(got, w[:, lane ^ 6])


def test_warp_sum_is_the_butterfly_and_votes_cover_the_warp(rng):
    x = rng.standard_normal(96).astype(np.float32)
    m = x.reshape(-1, 32).copy()
    for k in (16, 8, 4, 2, 1):
        m = m + m[:, np.arange(32) ^ k]
    np.testing.assert_array_equal(run_warp("sum", x, F32, block=32), m.reshape(-1))
    p = (rng.random(64) < 0.5).astype(np.int32)
    p[32:] = 1
    bits = run_warp("ballot", p, U32).reshape(-1, 32)
    assert bits[0, 0] == sum(int(v) << k for k, v in enumerate(p[:32])) and bits[1, 5] == 0xFFFFFFFF


def test_warp_op_in_divergent_code_is_reported():
    a, out = params(("a", arr(I32)), ("out", arr(I32, writable=True)))
    body = [N.If(cmp("lt", sp("laneid"), C(16)), [
        store(out, [sp("tid.x")], N.Warp("sum", [load(a, [sp("tid.x")], I32)], I32))], [])]
    with pytest.raises(SimulationError, match="warp op 'sum' executed by only part of warp 0"):
        run(kernel("wd", [a, out], body), [np.ones(32, np.int32), np.zeros(32, np.int32)],
            grid=1, block=32)


def hist_ir(op: str = "add") -> N.Function:
    data, hist, old = params(("data", arr(I64)), ("hist", arr(I32, writable=True)),
                             ("old", arr(I32, writable=True)))
    i = N.Var("i", I64)
    at = N.Atomic(op, P(hist), [load(data, [R(i)], I64)], [N.Const(1, I32)], "fault", 1, I32)
    return kernel("hist", [data, hist, old], [N.Assign(i, gid()), guarded(old, [R(i)], [
        store(old, [R(i)], at, mode="guarded")])])


@pytest.mark.parametrize("bins,n", [(7, 5000), (300, 4000), (1, 3000)])
def test_atomic_add_histogram_and_old_values_of_a_serial_order(rng, bins, n):
    data = rng.integers(0, bins, n)
    hist = rng.integers(0, 5, bins).astype(np.int32)
    start = hist.copy()
    old = np.zeros(n, np.int32)
    run(hist_ir(), [data, hist, old], grid=-(-n // 256), block=256)
    np.testing.assert_array_equal(hist, start + np.bincount(data, minlength=bins))
    for b in range(bins):   # the old values of one bin are exactly start, start+1, ... in some order
        assert sorted(old[data == b].tolist()) == list(range(start[b], start[b] + (data == b).sum()))


def test_atomic_float_add_single_counter_matches_sequential_sum(rng):
    vals, acc = params(("vals", arr(F32)), ("acc", arr(F32, writable=True)))
    at = N.Atomic("add", P(acc), [C(0)], [load(vals, [gid()])], "none", 0, F32)
    x = rng.standard_normal(2000).astype(np.float32)
    got = np.zeros(1, np.float32)
    run(kernel("fsum", [vals, acc], [N.ExprStmt(at)]), [x, got], grid=8, block=250)
    ref = np.float32(0)
    for v in x:
        ref = np.float32(ref + v)
    assert got[0] == ref


def test_atomic_cas_lets_exactly_one_lane_per_element_win(rng):
    slots, winner = params(("slots", arr(I32, writable=True)), ("winner", arr(I32, writable=True)))
    i = N.Var("i", I64)
    cas = N.Atomic("cas", P(slots), [bop("mod", R(i), C(10))], [N.Const(-1, I32), N.Cast(R(i), I32)],
                   "none", 0, I32)
    body = [N.Assign(i, gid()), store(winner, [R(i)], cas)]
    s = np.full(10, -1, np.int32)
    w = np.zeros(300, np.int32)
    run(kernel("cas", [slots, winner], body), [s, w], grid=3, block=100)
    for k in range(10):
        olds = w[k::10]
        assert (olds == -1).sum() == 1                     # one lane saw the initial value
        assert s[k] in range(k, 300, 10) and (olds[olds != -1] == s[k]).all()


def test_shared_memory_block_reduction_with_atomic(rng):
    """Tree reduction in shared memory with barriers in a loop, one atomic per block."""
    a, total = params(("a", arr(I64)), ("total", arr(I64, writable=True)))
    buf = N.SharedAlloc("buf", ArrayType(I64, 1, writable=True, space="shared", shape=(128,)))
    sh = N.SharedArray(buf)
    t, i, s = N.Var("t", I64), N.Var("i", I64), N.Var("s", I64)
    in_range = cmp("lt", R(i), N.ArrayLen(P(a), 0))
    body = [
        N.Assign(t, sp("tid.x")), N.Assign(i, gid()),
        store(sh, [R(t)], N.IfExp(in_range, load(a, [R(i)], I64), C(0), I64)),
        N.SyncThreads(), N.Assign(s, C(64)),
        N.While(cmp("gt", R(s), C(0)), [
            N.If(cmp("lt", R(t), R(s)), [store(sh, [R(t)], bop("add", load(sh, [R(t)], I64),
                                                               load(sh, [bop("add", R(t), R(s))], I64)))],
                 []),
            N.SyncThreads(), N.Assign(s, bop("floordiv", R(s), C(2)))]),
        N.If(cmp("eq", R(t), C(0)), [N.ExprStmt(N.Atomic("add", P(total), [C(0)], [load(sh, [C(0)], I64)],
                                                         "none", 0, I64))], []),
    ]
    x = rng.integers(-10**6, 10**6, 10_001)
    tot = np.zeros(1, np.int64)
    run(kernel("reduce", [a, total], body, shared=[buf]), [x, tot], grid=79, block=128)
    assert tot[0] == x.sum()


def test_launch_arguments_of_hand_built_ir_are_validated_by_the_native_validator():
    """dsl.sim.simulate validates through the one validator (over the IR-level contract), so
    hand-built kernels get the GPU's error classes and texts; nothing runs on a refusal."""
    fn = gather_ir()
    good = [np.ones(4, np.float32), np.zeros(4, np.int64), np.full(4, -7.0, np.float32)]
    with pytest.raises(DTypeError, match=r"gather: argument 'idx' \(#1\): expected 1-D int64 array, got int32"):
        simulate(fn, [good[0], np.zeros(4, np.int32), good[2]], grid=1, block=32)
    with pytest.raises(BlockSizeError, match=r"block \(64, 32, 1\): expected at most 1024 threads"):
        simulate(fn, good, grid=1, block=(64, 32))
    with pytest.raises(GridSizeError, match="expected an explicit grid"):
        simulate(fn, good, block=32)
    with pytest.raises(AliasingError, match=r"argument 'out' \(#2\): expected memory disjoint from argument 'a'"):
        simulate(fn, [good[2], good[1], good[2]], grid=1, block=32)
    n, = params(("n", I32))
    with pytest.raises(ScalarRangeError, match=r"argument 'n' \(#0\): expected int32 scalar in"):
        simulate(kernel("s", [n], []), [2**40], grid=1, block=1)
    assert (good[2] == -7.0).all()
    simulate(fn, good, grid=1, block=32)
    assert (good[2] == 1.0).all()


def test_run_takes_a_validated_launch_and_only_converts():
    """run() keeps conversion (NumPy arrays to its memory, scalars to their dtype) and no second set of
    checks: what it cannot convert is a typed refusal, an unvalidated launch an assertion."""
    fn = gather_ir()
    good = [np.ones(4, np.float32), np.zeros(4, np.int64), np.zeros(4, np.float32)]
    with pytest.raises(ArgumentKindError, match=r"gather: argument 'a' \(#0\): the simulator needs a NumPy array, "
                                                r"got list"):
        run(fn, [[1.0] * 4, good[1], good[2]], (1, 1, 1), (32, 1, 1))
    with pytest.raises(AssertionError, match="unvalidated 'idx'"):
        run(fn, [good[0], np.zeros(4, np.int32), good[2]], 1, 32)
    with pytest.raises(AssertionError, match="not a validated launch dimension"):
        run(fn, good, 0, 32)
    n, out = params(("n", I32), ("out", arr(I32, writable=True)))
    k = kernel("put", [n, out], [store(out, [C(0)], N.ParamRef(n))])
    o = np.zeros(1, np.int32)
    run(k, [7, o], 1, 1)                        # a Python int becomes the i32 the kernel declares
    assert o[0] == 7
