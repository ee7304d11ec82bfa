"""`python -m dsl.aot`: the generated header compiles with nvcc; its launchers validate (CPU) and
launch correctly / refuse violations leaving the output untouched (GPU)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SRC = HERE / "aot_kernels_src.py"
HOST = HERE / "aot_host.cpp"
INCLUDE = ROOT / "cpp" / "include"


def _aot(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dsl.aot", str(SRC), "--arch", "sm_90", "-o", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True)


def test_aot_cli_writes_header_and_images(tmp_path, nvcc):
    r = _aot(tmp_path)
    assert r.returncode == 0, r.stderr
    header = (tmp_path / "aot_kernels_src_kernels.h").read_text()
    assert '#include "kernelbridge/contract.hpp"' in header
    assert "kb::parse_contract" in header and "kb::validate" in header and "cuLaunchKernel" in header
    for name in ("scale_add", "clamp2d", "offset_i32"):
        assert (tmp_path / f"aot_kernels_src.{name}.ptx").exists()
        assert (tmp_path / f"aot_kernels_src.{name}.fatbin").exists()
    # typed signatures: const inputs, writable outputs, sizes per dimension, a stream
    assert re.search(r"Status scale_add\(const float\* x, int64_t x_shape0, const float\* y, int64_t y_shape0, "
                     r"float a, float\* out, int64_t out_shape0, CUstream stream = nullptr, ::kb_aot::Grid grid = \{\}\)", header)
    assert re.search(r"Status offset_i32\(const int32_t\* x, int64_t x_shape0, int32_t k, int32_t\* out", header)


@pytest.mark.parametrize("mode", ["--fatbin", "--ptx-only"])
@pytest.mark.slow
def test_aot_header_compiles_with_nvcc(tmp_path, nvcc, mode):
    assert _aot(tmp_path, mode).returncode == 0
    obj = tmp_path / "host.o"
    r = subprocess.run([nvcc, "-std=c++17", f"-I{INCLUDE}", f"-I{tmp_path}", "-c", str(HOST), "-o", str(obj)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert obj.stat().st_size > 0


def test_aot_header_compiles_with_host_compiler_warnings_as_errors(tmp_path, nvcc):
    import shutil
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    assert _aot(tmp_path, "--ptx-only").returncode == 0
    r = subprocess.run([cxx, "-std=c++17", "-Wall", "-Wextra", "-Werror", "-fsyntax-only", f"-I{INCLUDE}",
                        f"-I{tmp_path}", "-I/usr/local/cuda/include", str(HOST)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_aot_rejects_a_module_without_kernels(tmp_path):
    empty = tmp_path / "nothing.py"
    empty.write_text("x = 1\n")
    r = subprocess.run([sys.executable, "-m", "dsl.aot", str(empty), "-o", str(tmp_path / "o")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no @simt.kernel" in r.stderr


def test_aot_generic_kernel_needs_dtypes(tmp_path):
    mod = tmp_path / "generic.py"
    mod.write_text("from dsl import simt, TypeVar\nT = TypeVar('T')\n"
                   "@simt.kernel\ndef cp(x: simt.Array[T], out: simt.DisjointSlice[T]):\n"
                   "    i = simt.thread.index_1d()\n    out[i] = x[i]\n")
    r = subprocess.run([sys.executable, "-m", "dsl.aot", str(mod), "--ptx-only", "-o", str(tmp_path / "o")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "__aot__" in r.stderr
    mod.write_text(mod.read_text() + "from dsl import f64\n__aot__ = {'cp': [f64, f64]}\n")
    r = subprocess.run([sys.executable, "-m", "dsl.aot", str(mod), "--ptx-only", "-o", str(tmp_path / "o")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Status cp(const double* x" in (tmp_path / "o" / "generic_kernels.h").read_text()


@pytest.mark.gpu
def test_aot_launcher_runs_and_refuses_violation_gpu(tmp_path, nvcc):
    assert _aot(tmp_path).returncode == 0
    exe = tmp_path / "aot_host"
    stubs = Path(nvcc).resolve().parents[1] / "lib64" / "stubs"   # libcuda.so when the driver has no dev link
    r = subprocess.run([nvcc, "-std=c++17", f"-I{INCLUDE}", f"-I{tmp_path}", str(HOST), "-o", str(exe),
                        f"-L{stubs}", "-lcuda"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    run = subprocess.run([str(exe), "1000"], capture_output=True, text=True, timeout=120)
    out = run.stdout
    assert run.returncode == 0, out + run.stderr
    assert "launch code=0" in out and "faults code=0" in out
    maxerr = float(re.search(r"maxerr=(\S+)", out).group(1))
    assert maxerr < 1e-5
    code = int(re.search(r"shape_relation_code=(\d+)", out).group(1))
    m = re.search(r"violation code=(\d+) arg=(\S*) msg=(.*)", out)
    assert m and int(m.group(1)) == code, out
    assert "scale_add" in m.group(3) and "out" in m.group(3)
    assert "poison_unchanged=1" in out
    assert "fault_launch code=0" in out
    m = re.search(r"fault code=(\d+) arg=(\S*) msg=(.*)", out)
    assert m and int(m.group(1)) == 2000 and m.group(2) == "x", out
    assert "offset_i32" in m.group(3) and "out[i] = x[i] + k" in m.group(3)
    assert "fault_cleared code=0" in out


def _fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h


def test_aot_modules_carry_their_verified_contracts(tmp_path, nvcc):
    """Each written PTX and fatbin embeds its kernel's contract + checksum in KB_CONTRACT's format."""
    import json

    from bridge.fatbin import embedded_contracts, fatbin_entries
    assert _aot(tmp_path, "--fatbin").returncode == 0
    header = (tmp_path / "aot_kernels_src_kernels.h").read_text()
    for name in ("scale_add", "clamp2d", "offset_i32"):
        declared = re.search(rf"^// {name}: contract (.*)$", header, re.MULTILINE).group(1)
        ptx = (tmp_path / f"aot_kernels_src.{name}.ptx").read_bytes()
        fat = (tmp_path / f"aot_kernels_src.{name}.fatbin").read_bytes()
        assert embedded_contracts(ptx) == embedded_contracts(fat) == {name: declared}
        assert json.loads(declared)["kernel"] == name
        assert {e.kind for e in fatbin_entries(fat)} == {"elf", "ptx"}   # SASS carries it too
        total = _fnv1a64(declared.encode())
        signed = total - (1 << 64) if total >= 1 << 63 else total
        assert f".global .align 8 .u64 __kb_checksum_{name} = {signed};".encode() in ptx


CONTRACT_PROBE = r'''
#include <cstdio>
#include "aot_kernels_src_kernels.h"
int main() {
  const kb::LaunchContract* c = aot_kernels_src_kernels::detail::contracts();
  for (int k = 0; k < 3; ++k) std::printf("contract %d: %s\n", k, c[k].kernel.c_str());
  return 0;
}
'''


@pytest.mark.slow
def test_aot_header_refuses_a_contract_text_that_fails_its_checksum(tmp_path, nvcc):
    """The header's own copy of each contract is checked before kb::parse_contract (no GPU needed)."""
    assert _aot(tmp_path, "--ptx-only").returncode == 0
    (tmp_path / "probe.cpp").write_text(CONTRACT_PROBE)

    def probe() -> str:
        exe = tmp_path / "probe"
        r = subprocess.run([nvcc, "-std=c++17", f"-I{INCLUDE}", f"-I{tmp_path}", str(tmp_path / "probe.cpp"),
                            "-o", str(exe)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout

    assert probe() == "contract 0: scale_add\ncontract 1: clamp2d\ncontract 2: offset_i32\n"
    header = tmp_path / "aot_kernels_src_kernels.h"
    text = header.read_text()
    table = text.index("kContractJson[3] = {")
    at = text.index('\\"kernel\\":\\"clamp2d\\",\\"domain\\":2', table)
    header.write_text(text[:at] + text[at:].replace('\\"domain\\":2', '\\"domain\\":3', 1))
    out = probe().splitlines()
    assert out[0] == "contract 0: scale_add" and out[2] == "contract 2: offset_i32"
    assert out[1] == ("contract 1: <invalid contract: the contract text of clamp2d in this header fails its "
                      "checksum; regenerate it with python -m dsl.aot>")


@pytest.mark.gpu
def test_load_module_of_an_aot_fatbin_finds_the_contract_gpu(tmp_path, nvcc):
    import bridge
    assert _aot(tmp_path, "--fatbin").returncode == 0
    mod = bridge.load_module(str(tmp_path / "aot_kernels_src.scale_add.fatbin"))
    contract = mod.scale_add.contract
    assert contract is not None and contract.kernel == "scale_add"
    assert [a["name"] for a in contract.args] == ["x", "y", "a", "out"]
