"""The JSON/relation parser survives thousands of mangled contracts under ASan + UBSan, in plain C++."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 5 s of a full run on 2 cores: a sanitizer build

INCLUDE = Path(__file__).resolve().parents[2] / "cpp" / "include"

HARNESS = r'''
#include "kernelbridge/contract.hpp"
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

// Each input ends with a NUL byte (so an empty last input still counts). Prints "<ok count> <error count>"; exits 1 on a broken round trip.
int main(int argc, char** argv) {
  std::ifstream f(argv[1], std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t start = 0, ok = 0, bad = 0;
  while (start < all.size()) {
    size_t end = all.find('\0', start);
    if (end == std::string::npos) return 3;
    std::string text = all.substr(start, end - start);
    start = end + 1;
    kb::LaunchContract c;
    kb::Error e = kb::parse_contract(text, c);
    if (e) {
      if (e.code != kb::ErrorCode::contract_definition || e.message.empty()) return 2;
      ++bad;
      continue;
    }
    ++ok;
    std::string once = kb::contract_to_json(c);
    kb::LaunchContract again;
    if (kb::parse_contract(once, again) || kb::contract_to_json(again) != once) {
      std::printf("round trip broke for: %s\n", text.c_str());
      return 1;
    }
  }
  std::printf("%zu %zu\n", ok, bad);
  return 0;
}
'''

SEED = {
    "kernel": "k", "domain": 2, "block": {"max_threads": 256}, "dynamic_smem": {"max": 1024}, "min_cc": 70,
    "args": [{"name": "a", "kind": "array", "dtype": "f32", "ndim": 2, "layout": "C", "align": 16,
              "access": "read", "abi": "view"},
             {"name": "out", "kind": "array", "dtype": "bf16", "ndim": 2, "access": "write", "abi": "view"},
             {"name": "n", "kind": "scalar", "dtype": "i64"}],
    "requires": ["a.shape == out.shape and n <= a.size", "(len(a) + n) // 2 % 3 >= -1"],
    "inplace": [["a", "out"]], "grid_from": {"arg": "out", "per_thread": [2, 1]},
    "fault_sites": [{"id": 3, "array": "a", "file": "k\u00e9.py", "line": 9, "text": "x = a[i]  # \"q\""}],
}
ALPHABET = list(b'{}[]",:0123456789-+.eE \\utrufalsn()<>=!/*%_abcdefghijklmnopqrstuvwxyz\x00\x01\xff')


def mangled(rng: np.random.Generator, count: int) -> list[bytes]:
    base = json.dumps(SEED).encode()
    out = [base]
    for _ in range(count):
        b = bytearray(base)
        for _ in range(int(rng.integers(1, 4))):
            op = int(rng.integers(0, 4))
            pos = int(rng.integers(0, len(b) + 1))
            if op == 0 and pos < len(b):
                b[pos] = ALPHABET[int(rng.integers(0, len(ALPHABET)))]
            elif op == 1:
                del b[pos:pos + int(rng.integers(1, 8))]
            elif op == 2:
                b[pos:pos] = bytes(ALPHABET[int(rng.integers(0, len(ALPHABET)))] for _ in range(int(rng.integers(1, 4))))
            else:
                b = b[:pos]
        out.append(bytes(b).replace(b"\0", b" "))
    out.append(b"")      # a contract cut to nothing, last: a separator-joined file once dropped it (CI, 2026-12-06)
    return out


def test_mangled_contracts_never_crash_and_successes_round_trip(tmp_path, rng):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    src, exe = tmp_path / "fuzz.cpp", tmp_path / "fuzz"
    src.write_text(HARNESS)
    # -O0: the sanitizers see at least as much unoptimised (the optimiser cannot remove a checked access),
    # the 4000 inputs still run in well under a second, and the build takes 2 s instead of 5 s (-O1)
    build = subprocess.run([gxx, "-std=c++17", "-O0", "-g", "-fsanitize=address,undefined",
                            "-fno-sanitize-recover=all", f"-I{INCLUDE}", str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"sanitizer runtime unavailable: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr
    inputs = mangled(rng, 4000)
    data = tmp_path / "inputs.bin"
    data.write_bytes(b"".join(text + b"\0" for text in inputs))
    res = subprocess.run([str(exe), str(data)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    ok, bad = map(int, res.stdout.split())
    assert ok + bad == len(inputs) and ok >= 1 and bad >= len(inputs) // 2
