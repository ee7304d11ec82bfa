"""A kernel whose threads range over no array it could derive its grid from (a block sum through
atomics, a histogram) is refused when launched without `grid=`: a GridSizeError naming the kernel and
saying to pass grid=, nothing run, nothing written. Under the old rule the grid came from the first
DisjointSlice (`total`, one element), so one block ran and the sum of 100 000 ones was 256.

Checked on the launch path's native validator without a GPU (a Launcher over the compiled contract,
device arrays stood in for by CUDA Array Interface objects), in simulate() and under KB_SIMULATE=1,
and on the GPU."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.errors import GridSizeError, NoDeviceError
from bridge.contract import native_contract
from dsl import f32, i32, simt

PORTING = Path(__file__).resolve().parents[2] / "examples" / "porting" / "dsl_kernels.py"
N_SUM, N_HIST = 100_000, 10_000
REFUSED = (r"{k}: grid: expected an explicit grid \(the contract has no grid_from.*"
           r"pass grid=, e\.g\. {k}\(\.\.\., grid=n\)")


def porting_kernels():
    spec = importlib.util.spec_from_file_location("porting_dsl_kernels_for_grid_tests", PORTING)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


HIST = porting_kernels().histogram256


@simt.kernel(block=256)
def block_sum(a: simt.Array[f32], total: simt.DisjointSlice[f32]):
    g = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if g < len(a):
        with simt.unsafe():
            simt.atomic.add(total, 0, a[g])


@simt.kernel(block=128, grid_from="data")
def histogram_over_data(data: simt.Array[i32], hist: simt.DisjointSlice[i32]):
    i = simt.blockIdx.x * simt.blockDim.x + simt.threadIdx.x
    if i < len(data):
        with simt.unsafe():
            simt.atomic.add(hist, data[i], 1)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def hist_input(rng, n: int = N_HIST) -> np.ndarray:
    return rng.random(n, dtype=np.float32)


def hist_reference(v: np.ndarray) -> np.ndarray:
    bins = np.clip((v * np.float32(256)).astype(np.int32), 0, 255)
    return np.bincount(bins, minlength=256).astype(np.uint32)


# ------------------------------------------------------------------------------- the simulator
def test_simulated_block_sum_without_a_grid_is_refused_and_writes_nothing():
    a = np.ones(N_SUM, np.float32)
    total = np.full(1, -3.0, np.float32)
    with pytest.raises(GridSizeError, match=REFUSED.format(k="block_sum")):
        block_sum.simulate(a, total)
    assert total[0] == -3.0


def test_simulated_block_sum_with_a_grid_counts_every_element():
    a = np.ones(N_SUM, np.float32)
    total = np.zeros(1, np.float32)
    block_sum.simulate(a, total, grid=cdiv(N_SUM, 256))
    assert total[0] == np.float32(N_SUM)          # exact: integers below 2**24


def test_simulated_porting_histogram_without_a_grid_is_refused(rng):
    v = hist_input(rng)
    hist = np.full(256, 7, np.uint32)
    with pytest.raises(GridSizeError, match=REFUSED.format(k="histogram256")):
        HIST.simulate(v, hist)
    assert (hist == 7).all()


def test_simulated_porting_histogram_with_a_grid_matches_numpy(rng):
    v = hist_input(rng)
    hist = np.zeros(256, np.uint32)
    HIST.simulate(v, hist, grid=cdiv(N_HIST, 256))
    np.testing.assert_array_equal(hist, hist_reference(v))
    assert hist.sum() == N_HIST


def test_kb_simulate_calls_are_refused_the_same_way(monkeypatch):
    monkeypatch.setenv("KB_SIMULATE", "1")
    total = np.zeros(1, np.float32)
    with pytest.raises(GridSizeError, match=REFUSED.format(k="block_sum")):
        block_sum(np.ones(1000, np.float32), total)
    assert total[0] == 0.0


def test_an_explicit_grid_from_derives_a_grid_that_covers_the_data(rng):
    data = rng.integers(0, 37, 5003).astype(np.int32)
    hist = np.zeros(37, np.int32)
    histogram_over_data.simulate(data, hist)                      # grid from len(data)
    np.testing.assert_array_equal(hist, np.bincount(data, minlength=37))


# ----------------------------------------------------------- the GPU launch path, validator only
class DeviceStandIn:
    """A CUDA Array Interface v3 producer (its pointer is never dereferenced)."""

    def __init__(self, n: int, ptr: int, typestr: str) -> None:
        self.__cuda_array_interface__ = {"version": 3, "shape": (n,), "typestr": typestr,
                                         "data": (ptr, False), "strides": None}


def launch_validator(kernel, *host_args):
    """The native Launcher a GPU launch would build from the compiled contract (no driver use)."""
    ck = kernel.compile(*host_args, arch="sm_90")
    limits = _native.DeviceLimits()
    limits.device_id = -1          # CAI views report device -1 without a driver: make them "this" device
    limits.cc = 90
    return _native.Launcher(0, native_contract(ck.contract_json, ck.name), limits, _native.FuncAttrs(), 0)


def test_the_launch_validator_refuses_a_block_sum_without_a_grid():
    launcher = launch_validator(block_sum, np.ones(N_SUM, np.float32), np.zeros(1, np.float32))
    args = (DeviceStandIn(N_SUM, 1 << 20, "<f4"), DeviceStandIn(1, 1 << 24, "<f4"))
    with pytest.raises(GridSizeError, match=REFUSED.format(k="block_sum")):
        launcher(*args)
    with pytest.raises(GridSizeError, match=REFUSED.format(k="block_sum")):
        launcher.validate_only(args, grid=None, block=None, shared_mem=None)
    grid, block, _smem, skip = launcher.validate_only(args, grid=cdiv(N_SUM, 256), block=None, shared_mem=None)
    assert tuple(grid) == (cdiv(N_SUM, 256), 1, 1) and tuple(block) == (256, 1, 1) and not skip


def test_the_launch_validator_refuses_the_porting_histogram_without_a_grid(rng):
    launcher = launch_validator(HIST, hist_input(rng), np.zeros(256, np.uint32))
    args = (DeviceStandIn(N_HIST, 1 << 20, "<f4"), DeviceStandIn(256, 1 << 24, "<u4"))
    with pytest.raises(GridSizeError, match=REFUSED.format(k="histogram256")):
        launcher(*args)
    grid, _block, _smem, _skip = launcher.validate_only(args, grid=cdiv(N_HIST, 256), block=None,
                                                        shared_mem=None)
    assert tuple(grid) == (cdiv(N_HIST, 256), 1, 1)


@pytest.mark.skipif(bridge.gpu_available(), reason="checks where a valid launch stops without a GPU")
def test_with_a_grid_the_launch_passes_validation_and_stops_at_the_missing_driver():
    launcher = launch_validator(block_sum, np.ones(N_SUM, np.float32), np.zeros(1, np.float32))
    args = (DeviceStandIn(N_SUM, 1 << 20, "<f4"), DeviceStandIn(1, 1 << 24, "<f4"))
    with pytest.raises(NoDeviceError):
        launcher[cdiv(N_SUM, 256), 256](*args)


def test_the_validator_derives_the_named_grid_from_the_data_array():
    data = np.zeros(5003, np.int32)
    launcher = launch_validator(histogram_over_data, data, np.zeros(37, np.int32))
    args = (DeviceStandIn(5003, 1 << 20, "<i4"), DeviceStandIn(37, 1 << 24, "<i4"))
    grid, _block, _smem, _skip = launcher.validate_only(args, grid=None, block=None, shared_mem=None)
    assert tuple(grid) == (cdiv(5003, 128), 1, 1)


# ---------------------------------------------------------------------------------- on the GPU
@pytest.mark.gpu
def test_gpu_block_sum_without_a_grid_is_refused_and_with_one_is_exact():
    d_a = bridge.from_host(np.ones(N_SUM, np.float32))
    d_total = bridge.from_host(np.full(1, -3.0, np.float32))
    with pytest.raises(GridSizeError, match=REFUSED.format(k="block_sum")):
        block_sum(d_a, d_total)
    bridge.synchronize()
    assert d_total.to_host()[0] == -3.0
    d_total = bridge.from_host(np.zeros(1, np.float32))
    block_sum(d_a, d_total, grid=cdiv(N_SUM, 256))
    bridge.synchronize()
    assert d_total.to_host()[0] == np.float32(N_SUM)


@pytest.mark.gpu
def test_gpu_porting_histogram_without_a_grid_is_refused_and_with_one_matches_numpy(rng):
    v = hist_input(rng)
    d_v = bridge.from_host(v)
    d_hist = bridge.from_host(np.full(256, 7, np.uint32))
    with pytest.raises(GridSizeError, match=REFUSED.format(k="histogram256")):
        HIST(d_v, d_hist)
    bridge.synchronize()
    assert (d_hist.to_host() == 7).all()
    d_hist = bridge.from_host(np.zeros(256, np.uint32))
    HIST[cdiv(N_HIST, 256), 256](d_v, d_hist)
    bridge.synchronize()
    np.testing.assert_array_equal(d_hist.to_host(), hist_reference(v))


@pytest.mark.gpu
def test_gpu_explicit_grid_from_covers_all_the_data(rng):
    data = rng.integers(0, 37, 100_003).astype(np.int32)
    d_hist = bridge.from_host(np.zeros(37, np.int32))
    histogram_over_data(bridge.from_host(data), d_hist)
    bridge.synchronize()
    np.testing.assert_array_equal(d_hist.to_host(), np.bincount(data, minlength=37))
