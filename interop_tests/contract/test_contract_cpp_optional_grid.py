"""The header-only validator (plain g++, no Python) parses the new spellings — optional arrays and grid
relations — writes them back, lets None through only where declared, skips relations naming a None array
and checks grid relations against the resolved grid, refusing with the relation's text and values."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow      # a g++ build

INCLUDE = Path(__file__).resolve().parents[2] / "cpp" / "include"

PROGRAM = r'''
#include "kernelbridge/contract.hpp"
#include <cstdio>

static const char* kJson = R"J({"kernel":"reduce","block":{"exact":[128]},"args":[
  {"name":"x","kind":"array","dtype":"f32","ndim":1},
  {"name":"bias","kind":"array","dtype":"f32","ndim":1,"optional":true},
  {"name":"partials","kind":"array","dtype":"f32","ndim":1,"access":"write"}],
  "requires":["len(bias) == len(x)","grid.x == len(partials)"]})J";

static void arr(kb::ArgValue& v, uint64_t ptr, int64_t n) {
  v = kb::ArgValue();
  v.kind = kb::ArgKind::array;
  v.array.ptr = ptr; v.array.ndim = 1; v.array.shape[0] = n; v.array.strides[0] = 4;
  v.array.dtype = kb::DType::f32; v.array.device_type = kb::DeviceType::cuda;
}

static void run(const kb::LaunchContract& c, kb::ArgValue* v, int64_t grid) {
  kb::LaunchConfig cfg; cfg.grid[0] = grid; cfg.grid[1] = cfg.grid[2] = 1;
  kb::DeviceLimits dev; dev.cc = 90; kb::FuncAttrs fn;
  kb::Error e = kb::validate(c, v, 3, cfg, dev, fn);
  std::printf("%d|%s\n", static_cast<int>(e.code), e.message.c_str());
}

int main() {
  kb::LaunchContract c;
  kb::Error e = kb::parse_contract(kJson, c);
  if (e) { std::printf("parse: %s\n", e.message.c_str()); return 1; }
  kb::LaunchContract again;
  if (kb::parse_contract(kb::contract_to_json(c), again) || kb::contract_to_json(again) != kb::contract_to_json(c) ||
      !again.args[1].optional || again.args[0].optional || !again.relations[1]->uses_launch) return 2;
  kb::ArgValue v[3];
  arr(v[0], 0x10000, 1000); arr(v[1], 0x20000, 10); arr(v[2], 0x30000, 8);
  run(c, v, 8);                                   // given bias of the wrong length: refused
  v[1] = kb::ArgValue(); v[1].kind = kb::ArgKind::array; v[1].none = true;
  run(c, v, 8);                                   // None: its relation skipped, grid relation holds
  run(c, v, 9);                                   // grid relation broken
  v[0] = v[1];
  run(c, v, 8);                                   // None where not optional
  return 0;
}
'''


def test_header_parses_and_validates_optional_arrays_and_grid_relations(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    src = tmp_path / "check.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "check"
    subprocess.run([gxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{INCLUDE}", str(src), "-o",
                    str(exe)], check=True, capture_output=True, text=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.strip().splitlines()
    assert out == [
        "5|reduce: argument 'bias' (#1): expected len(bias) == len(x), got len(bias) = 10, len(x) = 1000",
        "0|",
        "5|reduce: argument 'partials' (#2): expected grid.x == len(partials), got grid.x = 9, len(partials) = 8",
        "2|reduce: argument 'x' (#0): expected 1-D float32 array (not optional: declare it optional to allow None), "
        "got None",
    ]
