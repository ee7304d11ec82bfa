"""The validator header compiles alone in plain C++17/20 (g++) and in CUDA translation units (nvcc), and works there."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 7 s of a full run on 2 cores: nvcc and g++ builds

INCLUDE = Path(__file__).resolve().parents[2] / "cpp" / "include"

PROGRAM = r'''
#include "kernelbridge/contract.hpp"
#include <cstdio>
#include <cstring>

static const char* kJson = R"J({"kernel":"vecadd","block":{"exact":[128]},"args":[
  {"name":"a","kind":"array","dtype":"f32","ndim":1,"abi":"pointer"},
  {"name":"out","kind":"array","dtype":"f32","ndim":1,"access":"write","layout":"C"},
  {"name":"s","kind":"scalar","dtype":"f16"}],
  "requires":["len(a) == len(out)"],"grid_from":{"arg":"out","per_thread":[2]}})J";

int main() {
  kb::LaunchContract c;
  kb::Error e = kb::parse_contract(kJson, c);
  if (e) { std::printf("parse: %s\n", e.message.c_str()); return 1; }
  kb::LaunchContract again;
  if (kb::parse_contract(kb::contract_to_json(c), again) || kb::contract_to_json(again) != kb::contract_to_json(c)) {
    std::printf("round trip\n"); return 2;
  }
  kb::ArgValue v[3];
  for (int k = 0; k < 2; ++k) {
    v[k].kind = kb::ArgKind::array;
    kb::ArrayView& a = v[k].array;
    a.ptr = 0x10000 + 0x10000 * k; a.ndim = 1; a.shape[0] = 1001; a.strides[0] = 4;
    a.dtype = kb::DType::f32; a.device_type = kb::DeviceType::cuda;
  }
  v[2].scalar_kind = kb::ArgValue::ScalarKind::floating; v[2].f = 1.5;
  kb::LaunchConfig cfg; kb::DeviceLimits dev; dev.cc = 90; kb::FuncAttrs fn;
  e = kb::validate(c, v, 3, cfg, dev, fn);
  if (e || cfg.grid[0] != 4 || cfg.block[0] != 128) { std::printf("validate: %s\n", e.message.c_str()); return 3; }
  unsigned char bytes[8];
  if (kb::pack_scalar(v[2], kb::DType::f16, bytes) != 2 || bytes[0] != 0x00 || bytes[1] != 0x3E) return 4;
  v[1].array.shape[0] = 1000;
  e = kb::validate(c, v, 3, cfg, dev, fn);
  std::printf("%d|%s\n", static_cast<int>(e.code), e.message.c_str());
  return 0;
}
'''


@pytest.mark.parametrize("std", ["c++17", "c++20"])
def test_header_compiles_and_validates_with_gxx(tmp_path, std):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    src = tmp_path / "contract_check.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "contract_check"
    subprocess.run([gxx, f"-std={std}", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{INCLUDE}", str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.strip()
    assert out == "5|vecadd: argument 'out' (#1): expected len(a) == len(out), got len(a) = 1001, len(out) = 1000"


def test_header_compiles_in_a_cuda_translation_unit(tmp_path):
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    src = tmp_path / "contract_check.cu"
    src.write_text(PROGRAM.replace("int main()", "__global__ void touch(float* p) { p[threadIdx.x] = 1.0f; }\n"
                                                "int main()"))
    obj = tmp_path / "contract_check.o"
    res = subprocess.run([nvcc, "-std=c++17", "-x", "cu", "-c", f"-I{INCLUDE}", str(src), "-o", str(obj)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert obj.stat().st_size > 0
