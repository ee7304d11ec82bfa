"""The simulator and the GPU agree: every zoo kernel runs on the device (CuPy arrays) and in the
simulator on the same random inputs; both match the NumPy reference, and each other bit for bit where
the case is exact (+ - * / sqrt, integer ops, casts, shuffles are exact on both)."""
from __future__ import annotations

import copy

import minmax_cases as M
import numpy as np
import pytest
from kernels_zoo import ZOO, check_outputs

import bridge
from bridge.errors import KernelFault
from dsl import f32, i64, simt, tile


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


def _differ(names: list[str], device: list[int], simulated: list[int]) -> list[str]:
    return [f"{n}: device {d:#x}, simulator {s:#x}" for n, d, s in zip(names, device, simulated) if d != s]


@pytest.mark.gpu
@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16"])
def test_float_min_max_fmin_fmax_give_the_simulators_bits_on_the_device(dt):
    """min/max/fmin/fmax (PTX min/max) on signed zeros and NaN operands, bit for bit, in SIMT and tile
    kernels and tile reductions: if the device disagrees, the semantics to change are the settings of
    dsl/vocab/minmax.py (NEGATIVE_ZERO_IS_LESS, TWO_NANS). Passed on the H200, 2026-12-03."""
    a, b = M.operands(dt)
    sim = [np.zeros_like(a) for _ in range(4)]
    M.simt_minmax.simulate(a, b, *sim, grid=1, block=32)
    dev = [bridge.from_host(np.zeros_like(a)) for _ in range(4)]
    M.simt_minmax(bridge.from_host(a), bridge.from_host(b), *dev, grid=1, block=32)
    bridge.synchronize()
    wrong = []
    for what, d, s in zip(("min", "max", "simt.fmin", "simt.fmax"), dev, sim):
        wrong += [f"SIMT {what} " + w for w in _differ(M.PAIR_NAMES, M.bits_of(d.to_host()), M.bits_of(s))]
    out_sim = np.zeros(M.PAIRS_TILE, a.dtype)
    M.tile_minmax_pairs.simulate(a, b, tile.partition(out_sim, M.PAIRS_TILE))
    out_dev = bridge.from_host(np.zeros(M.PAIRS_TILE, a.dtype))
    M.tile_minmax_pairs(bridge.from_host(a), bridge.from_host(b), tile.partition(out_dev, M.PAIRS_TILE))
    for what, d, s in zip(("minimum", "maximum", "fmin", "fmax"), out_dev.to_host(), out_sim):
        wrong += [f"tile.{what} " + w for w in _differ(M.PAIR_NAMES, M.bits_of(d), M.bits_of(s))]
    rows = np.stack([M.values(dt, row) for row, _, _ in M.ROWS])
    red_sim = np.zeros((2, 4), a.dtype)
    M.tile_minmax_rows.simulate(rows, tile.partition(red_sim, (2, 4)))
    red_dev = bridge.from_host(np.zeros((2, 4), a.dtype))
    M.tile_minmax_rows(bridge.from_host(rows), tile.partition(red_dev, (2, 4)))
    names = [",".join(row) for row, _, _ in M.ROWS]
    for what, d, s in zip(("max", "min"), red_dev.to_host(), red_sim):
        wrong += [f"tile.{what}(axis=1) of row " + w for w in _differ(names, M.bits_of(d), M.bits_of(s))]
    assert not wrong, f"{dt}: the device and the simulator differ:\n" + "\n".join(wrong)
