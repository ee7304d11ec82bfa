"""bridge.testing on the GPU: the package's C++ kernels against their DSL ports, a planted bug in a
port, GPU kernels against the simulator, generated launches on bridge/CuPy/torch arrays, and the
guard zone catching a C++ kernel that writes past the end of its output."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import bridge
from bridge import testing as T
from dsl import f32, simt
from interop_tests.dsl_tile import tile_kernels_lib as tiles
from interop_tests.kernels_zoo import ZOO_BY_NAME
from interop_tests.porting.cpp_ports import PORTS

pytestmark = pytest.mark.gpu

TOL = {"block_reduce_sum": {"rtol": 1e-4, "atol": 5e-2}, "legacy_softmax": {"ulps": 4}}
# Neither legacy_softmax's contract derives a grid: a block per row, as the C++ application launches
# it. block_reduce_sum's port derives none either, so it runs with the grid the C++ contract derives.
GRIDS = {"legacy_softmax": lambda s: (max(1, s["x"][0]),)}
# zoo kernels whose contracts derive no grid (unsafe stores): the grids their makers launch with
ZOO_GRIDS = {"block_scan": lambda s: (max(1, -(-s["out"][0] // 128)),),
             "sgemm_tiled": lambda s: (max(1, -(-s["c"][1] // 16)), max(1, -(-s["c"][0] // 16)))}
BUG_AT = 4097


def cpp(name: str):
    return getattr(bridge.cpp_kernels.load(name), name)


@pytest.mark.parametrize("name", sorted(PORTS))
def test_cpp_kernels_match_their_dsl_ports_on_the_gpu(name):
    report = T.assert_equivalent(cpp(name), PORTS[name][0], trials=4, seed=2024, size=(20000, 4099, 777),
                                 grid=GRIDS.get(name), **TOL.get(name, {}))
    assert len(report.launches) == 6, str(report)
    assert report.full_coverage, str(report)


@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_cpp_saxpy_matches_its_port_with_foreign_arrays(library):
    pytest.importorskip(library)
    T.assert_equivalent(cpp("saxpy"), PORTS["saxpy"][0], trials=2, seed=5, library=library)


@simt.kernel(launch_bounds=1024, min_cc=80, requires=["len(x) == len(y)"])
def saxpy_planted(a: f32, x: simt.Array[f32], y: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    y[i] = simt.fma(a, x[i], y[i]) + (f32(0.5) if i == BUG_AT else f32(0))


def test_a_planted_bug_in_a_port_is_found_against_the_cpp_kernel():
    with pytest.raises(T.EquivalenceError) as info:
        T.assert_equivalent(cpp("saxpy"), saxpy_planted, trials=3, seed=31, size=20000)
    e = info.value
    assert e.argument == "y" and e.index == (BUG_AT,) and e.seed == 31
    assert abs(float(e.actual) - float(e.expected) - 0.5) < 1e-3
    assert "candidate saxpy_planted (@simt.kernel) differs from the reference saxpy (bridge.Kernel)" in str(e)
    assert f"first at index ({BUG_AT},)" in str(e) and "seed=31" in str(e)


@pytest.mark.parametrize("name", ["vecadd", "stencil5", "sgemm_tiled", "block_scan", "smoothstep"])
def test_gpu_kernels_match_the_simulator(name):
    k = ZOO_BY_NAME[name].kernel
    report = T.assert_equivalent(T.simulated(k), k, device=True, trials=2, seed=8, size=3000, grid=ZOO_GRIDS.get(name),
                                 **({"rtol": 1e-5, "atol": 1e-5} if name == "sgemm_tiled" else {}))
    assert report.full_coverage, str(report)


def test_tile_kernel_on_the_gpu_matches_the_simt_kernel_on_the_simulator():
    T.assert_equivalent(T.simulated(ZOO_BY_NAME["vecadd"].kernel), tiles.add, device=True, trials=2, seed=3,
                        size=50000)


@pytest.mark.parametrize("library", ["bridge", "cupy", "torch"])
def test_generated_launches_run_on_every_array_library(library):
    if library != "bridge":
        pytest.importorskip(library)
    k = cpp("saxpy")
    args = T.arguments(k, size=5000, seed=12, library=library)
    x, y0 = T._arrays.to_host(args["x"]), T._arrays.to_host(args["y"])
    k(*args)
    bridge.synchronize()
    expect = (np.float64(args["a"]) * x + y0).astype(np.float32)
    np.testing.assert_array_equal(T._arrays.to_host(args["y"]), expect)


OVERRUN_CU = r'''#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void __launch_bounds__(256) copy_overrun(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = i < n ? x[i] : 7.0f;           // off by one: writes y[n]
}
KB_CONTRACT(copy_overrun, KB_BLOCK_MAX(256),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n"), KB_GRID_FROM(y));
'''


def test_the_guard_zone_catches_a_cpp_kernel_writing_past_the_end(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    cc = bridge.current_device().cc
    src, out = tmp_path / "overrun.cu", tmp_path / "overrun.cubin"
    src.write_text(OVERRUN_CU)
    subprocess.run([nvcc, "-cubin", f"-arch=sm_{cc[0]}{cc[1]}", "-std=c++17",
                    f"-I{bridge.cpp_kernels.include_dir()}", str(src), "-o", str(out)], check=True)
    k = bridge.load_module(str(out)).copy_overrun
    with pytest.raises(T.EquivalenceError,
                       match=r"candidate copy_overrun \(bridge.Kernel\) wrote outside argument 'y'"):
        T.assert_equivalent(lambda x, y, n: x, k, trials=1, seed=1, size=1000, edges=False)
