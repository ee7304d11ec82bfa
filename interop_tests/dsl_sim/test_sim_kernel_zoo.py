"""Every kernel of the zoo (real @simt.kernel functions) simulates to its NumPy reference, plus
end-to-end faults, C-semantics division and undefined-behaviour reports through the front end."""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from kernels_zoo import ZOO, check_outputs

from bridge.errors import KernelFault
from dsl import f32, i32, i64, simt
from dsl.sim import SimulationError


@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
@pytest.mark.parametrize("which", [0, 1])
def test_zoo_kernel_simulates_to_its_numpy_reference(rng, case, which):
    launch = case.make(rng, case.sizes[which])
    expected = case.reference(launch)
    case.kernel.simulate(*launch.args, grid=launch.grid, block=launch.block,
                         shared_mem=launch.shared_mem)
    check_outputs(case, launch, expected)


@simt.kernel(block=(64, 1, 1))
def gather(a: simt.Array[f32], idx: simt.Array[i64], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[idx[i]]


def test_fault_through_a_real_kernel_names_its_source_line(rng):
    a = rng.standard_normal(90).astype(np.float32)
    idx = rng.integers(0, 90, 200)
    idx[123] = 90 + 7
    out = np.full(200, 5.0, np.float32)
    with pytest.raises(KernelFault) as ei:
        gather.simulate(a, idx, out, grid=4, block=64)
    src, first = inspect.getsourcelines(gather.pyfunc)
    line = first + next(k for k, s in enumerate(src) if "out[i] = a[idx[i]]" in s)
    f = ei.value
    assert (f.kernel, f.array, f.index, f.extent, f.line) == ("gather", "a", 97, 90, line)
    assert f.file.endswith("test_sim_kernel_zoo.py") and "out[i] = a[idx[i]]" in str(f)
    keep = np.arange(200) != 123
    np.testing.assert_array_equal(out[keep], a[idx[keep]])
    assert out[123] == 5.0


@simt.kernel(block=(128, 1, 1))
def c_divmod(a: simt.Array[i32], b: simt.Array[i32], q: simt.DisjointSlice[i32],
             r: simt.DisjointSlice[i32]):
    i = simt.thread.index_1d()
    q[i] = a[i] // b[i]
    r[i] = a[i] % b[i]


def test_real_kernel_int_division_truncates_toward_zero(rng):
    n = 3001
    a = rng.integers(-2**31, 2**31 - 1, n).astype(np.int32)
    b = rng.integers(-1000, 1000, n).astype(np.int32)
    b[b == 0] = -3
    q, r = np.zeros(n, np.int32), np.zeros(n, np.int32)
    c_divmod.simulate(a, b, q, r, grid=24, block=128)
    ref_q = [(abs(x) // abs(y)) * (1 if (x >= 0) == (y >= 0) else -1)
             for x, y in zip(a.tolist(), b.tolist())]
    assert q.tolist() == ref_q
    assert r.tolist() == [x - qq * y for x, qq, y in zip(a.tolist(), ref_q, b.tolist())]


@simt.kernel(block=(64, 1, 1))
def divergent_barrier(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        t = simt.threadIdx.x
        if t < 20:
            simt.sync_threads()
        out[t] = a[t]


def test_real_kernel_barrier_in_divergent_branch_is_reported():
    with pytest.raises(SimulationError, match=r"reached by only 20 of 64 running threads of block"):
        divergent_barrier.simulate(np.ones(64, np.float32), np.zeros(64, np.float32), grid=1, block=64)
