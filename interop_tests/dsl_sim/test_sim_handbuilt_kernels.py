"""The simulator runs hand-built typed IR (no front end) with GPU semantics: guarded stores, any strides,
shared memory + barriers, loops with per-lane trip counts, break/continue, lazy IfExp, device calls."""
from __future__ import annotations

import numpy as np
import pytest
from sim_irkit import (BOOL, F32, I64, C, P, R, arr, bop, cmp, gid, guarded, kernel, load, params, sp,
                       store)

from dsl.ir import nodes as N
from dsl.ir.types import I32, ArrayType, SlotType
from dsl.sim import SimulationError, run


def vecadd_ir() -> N.Function:
    a, b, out = params(("a", arr(F32)), ("b", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)
    return kernel("vecadd", [a, b, out], [
        N.Assign(i, gid()),
        guarded(out, [R(i)], [
            store(out, [R(i)], bop("add", load(a, [R(i)]), load(b, [R(i)]), F32), mode="guarded")]),
    ])


@pytest.mark.parametrize("n,block", [(1000, 256), (1, 32), (4097, 128), (77, 1000)])
def test_vecadd_guarded_store_matches_numpy(rng, n, block):
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.full(n, np.nan, np.float32)
    run(vecadd_ir(), [a, b, out], grid=-(-n // block) + 1, block=block)   # one extra block: guarded
    np.testing.assert_array_equal(out, a + b)


def test_vecadd_reads_negative_and_zero_strided_views(rng):
    n = 333
    base = rng.standard_normal(2 * n).astype(np.float32)
    a = base[::-2]                                        # negative stride
    b = np.broadcast_to(np.float32(rng.standard_normal()), (n,))  # zero stride
    out_base = np.zeros(3 * n, np.float32)
    out = out_base[::3]                                   # strided output
    run(vecadd_ir(), [a, b, out], grid=3, block=128)
    np.testing.assert_array_equal(out, a + b)
    assert not out_base[1::3].any()                       # nothing written between the elements


def test_block_reverse_through_shared_memory_and_barrier(rng):
    """Each block reverses its 64-element tile: needs the barrier between writes and reads."""
    B = 64
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    tile = N.SharedAlloc("tile", ArrayType(F32, 1, writable=True, space="shared", shape=(B,)))
    i, t = N.Var("i", I64), N.Var("t", I64)
    sh = N.SharedArray(tile)
    body = [
        N.Assign(i, gid()), N.Assign(t, sp("tid.x")),
        store(sh, [R(t)], load(a, [R(i)])),
        N.SyncThreads(),
        store(out, [R(i)], load(sh, [bop("sub", C(B - 1), R(t))])),
    ]
    fn = kernel("rev", [a, out], body, shared=[tile])
    n = B * 37
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    run(fn, [x, y], grid=37, block=B)
    np.testing.assert_array_equal(y, x.reshape(37, B)[:, ::-1].reshape(-1))


def test_dynamic_shared_memory_length_comes_from_launch(rng):
    a, out = params(("a", arr(I64)), ("out", arr(I64, writable=True)))
    dyn = N.SharedAlloc("dyn", ArrayType(I64, 1, writable=True, space="shared", shape=(-1,)))
    t = N.Var("t", I64)
    body = [N.Assign(t, sp("tid.x")),
            store(out, [R(t)], N.ArrayLen(N.SharedArray(dyn), 0)),
            N.If(cmp("lt", R(t), N.ArrayLen(N.SharedArray(dyn), 0)), [
                store(N.SharedArray(dyn), [R(t)], load(a, [R(t)], I64))], [])]
    fn = kernel("dyn", [a, out], body, shared=[dyn])
    x = rng.integers(1, 100, 40)
    y = np.zeros(40, np.int64)
    run(fn, [x, y], grid=1, block=40, shared_mem=8 * 13 + 5)
    assert (y == 13).all()


def test_barrier_in_divergent_branch_is_reported():
    a, = params(("a", arr(F32, writable=True)))
    body = [N.If(cmp("lt", sp("tid.x"), C(10)), [N.SyncThreads(loc=N.Loc("k.py", 7, 9, "sync()"))], [])]
    with pytest.raises(SimulationError, match=r"sync_threads\(\) reached by only 10 of 32 .*k.py:7:9"):
        run(kernel("bad", [a], body), [np.zeros(4, np.float32)], grid=2, block=32)


def test_barrier_in_uniform_branch_per_block_is_fine(rng):
    """Whole blocks taking different branches is legal: the check is per block. (Thread 0 of each
    block writes: every thread writing a[b] would be a write-write race, which the simulator reports.)"""
    a, = params(("a", arr(I64, writable=True)))
    first = cmp("eq", sp("tid.x"), C(0))
    body = [N.If(cmp("eq", sp("ctaid.x"), C(1)), [N.SyncThreads(), N.If(first, [store(a, [sp("ctaid.x")], C(5))], [])],
                 [N.SyncThreads(), N.If(first, [store(a, [sp("ctaid.x")], C(7))], [])])]
    x = np.zeros(3, np.int64)
    run(kernel("ok", [a], body), [x], grid=3, block=64)
    assert x.tolist() == [7, 5, 7]


def _collatz_ir():
    """while n != 1: n = n/2 or 3n+1; steps += 1; with `continue` on even and a `break` cap."""
    a, out = params(("a", arr(I64)), ("out", arr(I64, writable=True)))
    i, n, s = N.Var("i", I64), N.Var("n", I64), N.Var("s", I64)
    loop = N.While(cmp("ne", R(n), C(1)), [
        N.Assign(s, bop("add", R(s), C(1))),
        N.If(cmp("ge", R(s), C(100)), [N.Break()], []),
        N.If(cmp("eq", bop("mod", R(n), C(2)), C(0)), [
            N.Assign(n, bop("floordiv", R(n), C(2))), N.Continue()], []),
        N.Assign(n, bop("add", bop("mul", R(n), C(3)), C(1))),
    ])
    body = [N.Assign(i, gid()), guarded(out, [R(i)], [
        N.Assign(n, load(a, [R(i)], I64)), N.Assign(s, C(0)), loop,
        store(out, [R(i)], R(s), mode="guarded")])]
    return kernel("collatz", [a, out], body)


def _collatz_ref(n: int) -> int:
    s = 0
    while n != 1:
        s += 1
        if s >= 100:
            break
        n = n // 2 if n % 2 == 0 else 3 * n + 1
    return s


def test_while_break_continue_have_per_lane_trip_counts(rng):
    x = rng.integers(1, 5000, 300)
    y = np.zeros(300, np.int64)
    run(_collatz_ir(), [x, y], grid=3, block=128)
    assert y.tolist() == [_collatz_ref(int(v)) for v in x]


def test_for_range_with_negative_and_per_lane_bounds(rng):
    """out[i] = sum(range(a[i], -3, -2)) : per-lane start, negative step."""
    a, out = params(("a", arr(I64)), ("out", arr(I64, writable=True)))
    i, k, acc = N.Var("i", I64), N.Var("k", I64), N.Var("acc", I64)
    body = [N.Assign(i, gid()), guarded(out, [R(i)], [
        N.Assign(acc, C(0)),
        N.ForRange(k, load(a, [R(i)], I64), C(-3), C(-2), [N.Assign(acc, bop("add", R(acc), R(k)))]),
        store(out, [R(i)], R(acc), mode="guarded")])]
    x = rng.integers(-10, 40, 200)
    y = np.zeros(200, np.int64)
    run(kernel("sumrange", [a, out], body), [x, y], grid=4, block=64)
    assert y.tolist() == [sum(range(int(v), -3, -2)) for v in x]


def test_ifexp_and_logical_are_lazy_per_lane(rng):
    """`a[i] if i < n else 0` with a fault-checked load: lanes that did not choose it never load."""
    a, n, out = params(("a", arr(F32)), ("n", I64), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)
    guard = N.Logical("and", cmp("ge", R(i), C(0)), cmp("lt", R(i), N.ArrayLen(P(a), 0)))
    value = N.IfExp(guard, load(a, [R(i)], check="fault", site=1), N.Const(-1.0, F32), F32)
    body = [N.Assign(i, bop("sub", gid(), P(n))), store(out, [gid()], value)]
    x = rng.standard_normal(50).astype(np.float32)
    y = np.zeros(96, np.float32)
    run(kernel("shift", [a, n, out], body), [x, np.int64(20), y], grid=3, block=32)
    ref = np.full(96, -1.0, np.float32)
    ref[20:70] = x
    np.testing.assert_array_equal(y, ref)


def test_device_function_with_early_return_masks_lanes_until_its_end(rng):
    """clamp(x, lo) returns early for x < lo; the rest continue to `return x * 2`."""
    xp, lop = N.Param("x", F32, 0), N.Param("lo", F32, 1)
    dev = N.Function("clamp2", [xp, lop], F32, [
        N.If(cmp("lt", P(xp), P(lop)), [N.Return(P(lop))], []),
        N.Return(bop("mul", P(xp), N.Const(2.0, F32), F32)),
    ], False)
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)
    body = [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], N.Call(dev, [load(a, [R(i)]), N.Const(0.25, F32)], F32), mode="guarded")])]
    x = rng.standard_normal(500).astype(np.float32)
    y = np.zeros(500, np.float32)
    run(kernel("k", [a, out], body, callees=[dev]), [x, y], grid=8, block=64)
    np.testing.assert_array_equal(y, np.where(x < 0.25, np.float32(0.25), x * np.float32(2)))


def test_2d_thread_index_rows_from_y_cols_from_x(rng):
    out, = params(("out", arr(I32, 2, writable=True)))
    r, c = N.Var("r", I64), N.Var("c", I64)
    val = N.Cast(bop("add", bop("mul", R(r), C(1000)), R(c)), I32)
    body = [N.Assign(r, gid(0, 2)), N.Assign(c, gid(1, 2)),
            guarded(out, [R(r), R(c)], [store(out, [R(r), R(c)], val, mode="guarded")])]
    y = np.zeros((37, 53), np.int32)
    run(kernel("coords", [out], body), [y], grid=(4, 3), block=(16, 16))
    rr, cc = np.indices(y.shape)
    np.testing.assert_array_equal(y, rr * 1000 + cc)


def test_bool_parameters_and_arrays(rng):
    m, flag, out = params(("m", arr(BOOL)), ("flag", BOOL), ("out", arr(BOOL, writable=True)))
    i = N.Var("i", I64)
    body = [N.Assign(i, gid()), guarded(out, [R(i)], [
        store(out, [R(i)], bop("xor", load(m, [R(i)], BOOL), P(flag), BOOL), mode="guarded")])]
    x = rng.random(70) < 0.5
    y = np.zeros(70, bool)
    run(kernel("flip", [m, flag, out], body), [x, True, y], grid=3, block=32)
    np.testing.assert_array_equal(y, ~x)


def test_chunk_loop_owns_n_elements_per_thread_and_guards_the_tail(rng):
    """for k in chunk_1d(4): out[k] = a[k] * 2  — 4 elements per thread, the tail chunk partial."""
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    k = N.Var("k", I64)
    body = [N.ChunkLoop(k, N.ChunkValue(4), P(out), [
        store(out, [R(k)], bop("mul", load(a, [R(k)]), N.Const(2.0, F32), F32), mode="guarded")])]
    n = 1001
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n + 3, np.float32)[:n]
    run(kernel("chunk2", [a, out], body), [x, y], grid=2, block=128)
    np.testing.assert_array_equal(y, x * 2)


def test_get_mut_slot_is_set_only_when_in_range(rng):
    """slot = out.get_mut(i + 3); if slot is not None: slot.set(a[i])."""
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    s, i = N.Var("s", SlotType(arr(F32, writable=True))), N.Var("i", I64)
    body = [N.Assign(i, gid()), N.Assign(s, N.GetMut(P(out), [bop("add", R(i), C(3))])),
            N.If(N.SlotCheck(R(s)), [N.SlotSet(R(s), load(a, [N.Cast(bop("mod", R(i), C(50)), I64)]))], [])]
    x = rng.standard_normal(50).astype(np.float32)
    y = np.full(40, -1.0, np.float32)
    run(kernel("slots", [a, out], body), [x, y], grid=2, block=32)
    np.testing.assert_array_equal(y[:3], -1.0)
    np.testing.assert_array_equal(y[3:], x[:37])


def test_vecadd_2_pow_16_speed_is_printed(rng):
    """Not a timed assertion (benchmarks/simulator_speed.py tracks speed): prints the time taken."""
    import time
    n = 1 << 16
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    t0 = time.perf_counter()
    run(vecadd_ir(), [a, b, out], grid=n // 256, block=256)
    print(f"\nsimulated 2^16 vecadd in {(time.perf_counter() - t0) * 1e3:.1f} ms")
    np.testing.assert_array_equal(out, a + b)


def test_a_region_marked_proven_that_a_lane_leaves_is_reported_not_skipped(rng):
    # The backend emits no test for a proven GuardedRegion; the simulator still tests it, so a wrong
    # proof shows up as an error here instead of an out-of-range write on the GPU.
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", I64)

    def ir(proven: bool) -> N.Function:
        return kernel("copy", [a, out], [
            N.Assign(i, gid()),
            N.GuardedRegion(P(out), [R(i)], [
                N.Store(P(out), [R(i)], load(a, [R(i)]), "guarded", 0, proven=proven)], proven=proven)])

    x = rng.standard_normal(100).astype(np.float32)
    y = np.zeros(100, np.float32)
    run(ir(False), [x, y], grid=1, block=128)                 # lanes 100..127 silently skip
    np.testing.assert_array_equal(y, x)
    with pytest.raises(SimulationError, match="outside extent 100"):
        run(ir(True), [x, np.zeros(100, np.float32)], grid=1, block=128)
    y = np.zeros(128, np.float32)
    run(ir(True), [rng.standard_normal(128).astype(np.float32), y], grid=1, block=128)   # the proof holds
