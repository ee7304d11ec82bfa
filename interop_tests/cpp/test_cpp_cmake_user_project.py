"""kernelbridge_add_cuda_module from a user's own CMake project, through find_package and through
include(): the fatbin holds SASS for every listed arch, PTX of the highest, and both sources' contracts."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import bridge
from bridge.fatbin import embedded_contracts, fatbin_entries

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 5 s of a full run on 2 cores: CMake builds

SCALE_CU = r'''#include "kernelbridge/kernel_contract.cuh"
#include "user_config.h"
extern "C" __global__ void __launch_bounds__(128)
user_scale(const float* __restrict__ x, float* __restrict__ y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = USER_FACTOR * s * x[i];
}
KB_CONTRACT(user_scale, KB_BLOCK(128),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write), KB_SCALAR(s, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n"), KB_GRID_FROM(y));
'''

ADD_CU = r'''#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void __launch_bounds__(256) user_add(const int* a, int* b, long long n) {
  long long i = blockIdx.x * 256ll + threadIdx.x;
  if (i < n) b[i] += a[i];
}
KB_CONTRACT(user_add, KB_BLOCK_MAX(256),
            KB_ARGS(KB_ARRAY(a, i32, 1, read), KB_ARRAY(b, i32, 1, readwrite), KB_SCALAR(n, i64)));
'''


def _project(root: Path, how: str) -> Path:
    src = root / "src"
    (src / "kernels").mkdir(parents=True)
    (src / "inc").mkdir()
    (src / "kernels" / "scale.cu").write_text(SCALE_CU)
    (src / "kernels" / "add.cu").write_text(ADD_CU)
    (src / "inc" / "user_config.h").write_text("#pragma once\n#ifndef USER_FACTOR\n#error USER_FACTOR unset\n#endif\n")
    if how == "find_package":
        locate = "find_package(kernelbridge CONFIG REQUIRED)\n"
    else:
        locate = f'include("{bridge.cmake_dir() / "kernelbridge.cmake"}")\n'
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\n"
        "project(user_kernels LANGUAGES NONE)\n" + locate +
        "kernelbridge_add_cuda_module(user_mod SOURCES kernels/scale.cu kernels/add.cu ARCHS 80 90\n"
        "    INCLUDE_DIRS inc DEFINES USER_FACTOR=2.0f OUTPUT_DIR ${CMAKE_BINARY_DIR}/out)\n"
        "kernelbridge_add_cuda_module(solo SOURCES kernels/add.cu ARCHS 86)\n")
    return src


@pytest.mark.parametrize("how", ["find_package", "include"])
def test_user_project_builds_fatbin_with_contracts(cmake, nvcc, tmp_path, how):
    src = _project(tmp_path, how)
    build = tmp_path / "build"
    configure = [cmake, "-S", str(src), "-B", str(build), f"-DKERNELBRIDGE_NVCC={nvcc}"]
    if how == "find_package":
        configure.append(f"-Dkernelbridge_DIR={bridge.cmake_dir()}")
    for cmd in (configure, [cmake, "--build", str(build)]):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    data = (build / "out" / "user_mod.fatbin").read_bytes()
    entries = {(e.kind, e.arch) for e in fatbin_entries(data)}
    assert entries == {("elf", 80), ("elf", 90), ("ptx", 90)}
    contracts = {k: json.loads(v) for k, v in embedded_contracts(data).items()}
    assert set(contracts) == {"user_scale", "user_add"}
    assert contracts["user_scale"]["block"] == {"exact": [128, 1, 1]}
    assert [a["name"] for a in contracts["user_add"]["args"]] == ["a", "b", "n"]
    # the DEFINES reached the compiler (the header #errors without it) and the PTX is the real kernel
    ptx = next(e for e in fatbin_entries(data) if e.kind == "ptx").data().decode(errors="replace")
    assert ".entry user_scale" in ptx and ".entry user_add" in ptx

    solo = fatbin_entries((build / "solo.fatbin").read_bytes())
    assert {(e.kind, e.arch) for e in solo} == {("elf", 86), ("ptx", 86)}


def test_bad_arch_is_a_configure_error(cmake, nvcc, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text(ADD_CU)
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(p LANGUAGES NONE)\n"
        f'include("{bridge.cmake_dir() / "kernelbridge.cmake"}")\n'
        "kernelbridge_add_cuda_module(m SOURCES k.cu ARCHS sm_90)\n")
    proc = subprocess.run([cmake, "-S", str(src), "-B", str(tmp_path / "b"), f"-DKERNELBRIDGE_NVCC={nvcc}"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "ARCHS entry 'sm_90' is not an SM number like 80, 90 or 90a" in " ".join(proc.stderr.split())
