"""Write-write races on global memory are KernelFaults in the simulator (dsl/sim/races.py), naming both
threads, the element and both source lines — a race that safe code cannot write (the compiler refuses
it, dsl_frontend/test_ownership_one_form_per_slice.py) is still caught when `unsafe` code or hand-built
IR runs it. Writes ordered by a sync_threads() of one block, one thread rewriting its own element, and
atomics are not races."""
from __future__ import annotations

import numpy as np
import pytest
from sim_irkit import I64, C, R, arr, bop, cmp, kernel, loc, params, sp, store

import bridge
from dsl import f32, i32, simt
from dsl.ir import nodes as N
from dsl.sim import run


@simt.kernel(block=64, requires=["len(a) == len(out)"])
def vouched_race(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i]
    with simt.unsafe():
        for q in simt.thread.chunk_1d(4):
            out[q] = a[q] + 1.0


def test_a_deliberately_unsafe_race_is_a_kernel_fault_naming_both_threads():
    a = np.arange(256, dtype=np.float32)
    out = np.zeros(256, np.float32)
    with pytest.raises(bridge.KernelFault) as info:
        vouched_race.simulate(a, out, grid=4, block=64)
    msg = str(info.value)
    assert "vouched_race: data race on 'out': out[4] was written by thread (4, 0, 0) of block (0, 0, 0) at " in msg
    assert "out[i] = a[i]" in msg and "and by thread (1, 0, 0) of block (0, 0, 0) at " in msg
    assert "out[q] = a[q] + 1.0" in msg and "with no sync_threads() of one block between them" in msg
    assert info.value.array == "out" and info.value.index == 4 and info.value.kernel == "vouched_race"


@simt.kernel(launch_bounds=256)
def every_thread_writes_its_block(out: simt.DisjointSlice[i32]):
    with simt.unsafe():
        out[simt.blockIdx.x] = i32(7)


def test_threads_of_one_store_hitting_one_element_race_even_with_equal_values():
    out = np.zeros(3, np.int32)
    with pytest.raises(bridge.KernelFault, match=r"out\[0\] was written by thread \(0, 0, 0\) of block "
                                                 r"\(0, 0, 0\) at .* and by thread \(1, 0, 0\) of block \(0, 0, 0\)"):
        every_thread_writes_its_block.simulate(out, grid=3, block=32)


@simt.kernel(launch_bounds=256)
def barrier_then_rewrite(out: simt.DisjointSlice[i32]):
    with simt.unsafe():
        b = simt.blockIdx.x
        if simt.threadIdx.x == 0:
            out[b] = i32(1)
        simt.sync_threads()
        if simt.threadIdx.x == 5:
            out[b] = out[b] + i32(1)


@simt.kernel(launch_bounds=256)
def no_barrier_rewrite(out: simt.DisjointSlice[i32]):
    with simt.unsafe():
        b = simt.blockIdx.x
        if simt.threadIdx.x == 0:
            out[b] = i32(1)
        if simt.threadIdx.x == 5:
            out[b] = i32(2)


def test_a_barrier_between_two_writers_of_one_block_orders_them_and_its_absence_is_a_race():
    out = np.zeros(3, np.int32)
    barrier_then_rewrite.simulate(out, grid=3, block=32)
    assert out.tolist() == [2, 2, 2]
    out = np.zeros(3, np.int32)
    with pytest.raises(bridge.KernelFault, match=r"out\[0\] was written by thread \(0, 0, 0\) .* and by thread "
                                                 r"\(5, 0, 0\) of block \(0, 0, 0\)"):
        no_barrier_rewrite.simulate(out, grid=3, block=32)


def test_a_race_between_blocks_of_different_simulation_batches_is_found():
    """Blocks run in batches of 2**17 lanes: the writer record lives for the whole launch. Block 0 and
    the last block (128 blocks of 1024 lanes later, so in the next batch) both write out[0]."""
    out_p, = params(("out", arr(I64, writable=True)))
    first_thread = cmp("eq", sp("tid.x"), C(0))
    edge = N.Logical("or", cmp("eq", sp("ctaid.x"), C(0)), cmp("eq", sp("ctaid.x"), C(199)))
    body = [N.If(N.Logical("and", first_thread, edge), [store(out_p, [C(0)], sp("ctaid.x"),
                                                                at=loc(7, "out[0] = blockIdx.x"))], [])]
    out = np.zeros(2, np.int64)
    with pytest.raises(bridge.KernelFault, match=r"out\[0\] was written by thread \(0, 0, 0\) of block \(0, 0, 0\) "
                                                 r"at kernels.py:7:5: out\[0\] = blockIdx.x and by thread \(0, 0, 0\) "
                                                 r"of block \(199, 0, 0\)"):
        run(kernel("edges", [out_p], body), [out], grid=200, block=1024)


def test_one_thread_rewriting_its_own_element_and_atomics_are_not_races():
    out_p, = params(("out", arr(I64, writable=True)))
    i = N.Var("i", I64)
    body = [N.Assign(i, bop("add", bop("mul", sp("ctaid.x"), sp("ntid.x")), sp("tid.x"))),
            store(out_p, [R(i)], C(1)), store(out_p, [R(i)], bop("add", R(i), C(1))),
            N.ExprStmt(N.Atomic("add", N.ParamRef(out_p), [C(0)], [C(5)], "none", 0, I64))]
    out = np.zeros(70, np.int64)
    run(kernel("own", [out_p], body), [out], grid=2, block=35)
    assert out[1:].tolist() == list(range(2, 71)) and out[0] == 1 + 70 * 5
