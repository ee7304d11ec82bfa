"""The simulator and the GPU agree: every zoo kernel runs on the device (CuPy arrays) and in the
simulator on the same random inputs; both match the NumPy reference, and each other bit for bit where
the case is exact (+ - * / sqrt, integer ops, casts, shuffles are exact on both)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from kernels_zoo import ZOO, check_outputs

import bridge
from bridge.errors import KernelFault
from dsl import f32, i64, simt


def _run_on_gpu(case, launch):
    import cupy as cp  # the GPU machine has CuPy; this test is skipped without a device
    dev = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in launch.args]
    case.kernel(*dev, grid=launch.grid, block=launch.block, shared_mem=launch.shared_mem)
    bridge.synchronize()            # waits, then raises KernelFault for recorded faults
    out = copy.copy(launch)
    out.args = [d.get() if isinstance(d, cp.ndarray) else d for d in dev]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_kernel_on_gpu_matches_simulator_and_reference(rng, case):
    launch = case.make(rng, case.sizes[-1])
    expected = case.reference(launch)
    simulated = copy.copy(launch)
    simulated.args = [a.copy() if isinstance(a, np.ndarray) else a for a in launch.args]
    case.kernel.simulate(*simulated.args, grid=launch.grid, block=launch.block,
                         shared_mem=launch.shared_mem)
    on_gpu = _run_on_gpu(case, launch)
    check_outputs(case, on_gpu, expected)
    check_outputs(case, simulated, expected)
    if case.exact:
        for name in expected:
            np.testing.assert_array_equal(on_gpu.arg(name), simulated.arg(name),
                                          err_msg=f"{case.name}: GPU and simulator differ on '{name}'")


@simt.kernel(block=(64, 1, 1))
def gather_gpu(a: simt.Array[f32], idx: simt.Array[i64], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[idx[i]]


@pytest.mark.gpu
def test_gpu_fault_and_simulated_fault_report_the_same_site(rng):
    import cupy as cp
    a = rng.standard_normal(90).astype(np.float32)
    idx = rng.integers(0, 90, 200)
    idx[77] = 1000
    faults = []
    for where in ("sim", "gpu"):
        out = np.full(200, 5.0, np.float32)
        if where == "sim":
            with pytest.raises(KernelFault) as ei:
                gather_gpu.simulate(a, idx, out, grid=4, block=64)
        else:
            d_out = cp.asarray(out)
            with pytest.raises(KernelFault) as ei:
                gather_gpu(cp.asarray(a), cp.asarray(idx), d_out, grid=4, block=64)
                bridge.synchronize()            # waits, then raises KernelFault for recorded faults
            out = d_out.get()                   # the other threads finished their work
        faults.append((ei.value.array, ei.value.index, ei.value.extent, ei.value.line))
        keep = np.arange(200) != 77
        np.testing.assert_array_equal(out[keep], a[idx[keep]])
    assert faults[0] == faults[1] == ("a", 1000, 90, faults[0][3])
