"""bridge.fatbin reads contracts from fatbins (plain, LZ4- and zstd-compressed), cubins and PTX, and
refuses malformed data with a clear error."""
from __future__ import annotations

import importlib.util
import json
import struct
import subprocess

import pytest

from bridge.fatbin import (CompressedEntryError, ContractIntegrityError, ModuleFormatError, embedded_contracts,
                           fatbin_entries, module_format)

from interop_tests.cpp.contract_kernel_sources import BARE, FILL, HEADER
from interop_tests.cpp.lz4_support import require_lz4_package

SOURCE = HEADER + FILL + BARE


@pytest.fixture(scope="module")
def build(nvcc, include_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("fatbin")
    (root / "k.cu").write_text(SOURCE)

    def run(*flags: str) -> bytes:
        out = root / f"out{abs(hash(flags))}.bin"
        cmd = [nvcc, *flags, "-std=c++17", f"-I{include_dir}", str(root / "k.cu"), "-o", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return out.read_bytes()

    return run


GENCODE = ("-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=compute_90")


def _fill(contracts: dict[str, str]) -> dict:
    assert set(contracts) == {"fill"}, "a kernel without KB_CONTRACT has no contract"
    return json.loads(contracts["fill"])


def test_plain_fatbin_cubin_and_ptx_agree(build):
    fat = build("-fatbin", "-compress-mode=none", *GENCODE)
    cubin = build("-cubin", "-arch=sm_90")
    ptx = build("-ptx", "-arch=sm_90")
    assert (module_format(fat), module_format(cubin), module_format(ptx)) == ("fatbin", "cubin", "ptx")
    c = _fill(embedded_contracts(fat))
    assert c["block"] == {"exact": [64, 1, 1]} and c["grid_from"]["arg"] == "y"
    assert embedded_contracts(cubin) == embedded_contracts(fat) == embedded_contracts(ptx)
    assert embedded_contracts(ptx.decode()) == embedded_contracts(ptx)


def test_lz4_compressed_ptx_entry_decodes(build):
    require_lz4_package()
    plain = {e.kind: e for e in fatbin_entries(build("-fatbin", "-compress-mode=none", *GENCODE))}
    packed = {e.kind: e for e in fatbin_entries(build("-fatbin", "-compress-mode=speed", *GENCODE))}
    assert packed["ptx"].compression == "lz4"
    assert packed["ptx"].data().rstrip(b"\0") == plain["ptx"].data().rstrip(b"\0")
    only_ptx = build("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_90,code=compute_90")
    assert _fill(embedded_contracts(only_ptx))["kernel"] == "fill"


def test_zstd_compressed_fatbin_decodes_or_says_how_to_fix(build):
    data = build("-fatbin", "-compress-mode=size", *GENCODE)
    assert {e.compression for e in fatbin_entries(data)} == {"zstd"}
    have_zstd = any(importlib.util.find_spec(m) for m in ("zstandard", "pyzstd")) or \
        importlib.util.find_spec("compression") is not None and \
        importlib.util.find_spec("compression.zstd") is not None
    if have_zstd:
        assert _fill(embedded_contracts(data))["kernel"] == "fill"
    else:
        with pytest.raises(CompressedEntryError, match="zstd-compressed.*-compress-mode=none"):
            embedded_contracts(data)


def test_module_without_contracts_reads_as_empty(nvcc, tmp_path):
    (tmp_path / "b.cu").write_text('extern "C" __global__ void bare(float* y) { y[0] = 1.0f; }\n')
    subprocess.run([nvcc, "-fatbin", "-arch=sm_90", str(tmp_path / "b.cu"), "-o", str(tmp_path / "b.fatbin")],
                   check=True, capture_output=True, timeout=300)
    assert embedded_contracts((tmp_path / "b.fatbin").read_bytes()) == {}


def test_malformed_data_is_refused(build):
    fat = build("-fatbin", "-compress-mode=none", *GENCODE)
    with pytest.raises(ModuleFormatError, match="expected a fatbin .* an ELF cubin or PTX text"):
        embedded_contracts(b"\x01\x02\x03\x04 not a module")
    with pytest.raises(ModuleFormatError, match="runs past the end"):
        embedded_contracts(fat[: len(fat) // 2])
    # an ELF with a section table pointing outside the file
    cubin = bytearray(build("-cubin", "-arch=sm_90"))
    struct.pack_into("<Q", cubin, 0x28, len(cubin) + 4096)
    with pytest.raises(ModuleFormatError, match="section header table runs past the end"):
        embedded_contracts(bytes(cubin))


ARCH_CONDITIONAL = r'''#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void __launch_bounds__(64) fill(float* y, float v, int n) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) y[i] = v;
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
KB_CONTRACT(fill, KB_BLOCK(64), KB_ARGS(KB_ARRAY(y, f32, 1, write), KB_SCALAR(v, f32), KB_SCALAR(n, i32)));
#else
KB_CONTRACT(fill, KB_BLOCK(64), KB_ARGS(KB_ARRAY(y, f32, 1, write), KB_SCALAR(v, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(y) == n"));
#endif
'''


@pytest.mark.parametrize("compress", ["none", "speed"])
def test_entries_that_disagree_are_refused(nvcc, include_dir, tmp_path, compress):
    # an arch-conditional contract: the sm_80 cubin and the compute_90 PTX (which the driver JITs on
    # sm_90+) carry different, individually valid contracts; neither may be picked silently
    if compress == "speed":
        require_lz4_package()           # the LZ4 PTX entry must be decoded to be compared
    (tmp_path / "c.cu").write_text(ARCH_CONDITIONAL)
    out = tmp_path / "c.fatbin"
    subprocess.run([nvcc, "-fatbin", f"-compress-mode={compress}", "-std=c++17", f"-I{include_dir}", *GENCODE,
                    str(tmp_path / "c.cu"), "-o", str(out)], check=True, capture_output=True, timeout=300)
    with pytest.raises(ModuleFormatError,
                       match="fill: the fatbin ptx entry for arch 90 carries a different contract than another"):
        embedded_contracts(out.read_bytes())


def test_edited_ptx_copy_of_a_contract_fails_its_checksum(build):
    fat = bytearray(build("-fatbin", "-compress-mode=none", *GENCODE))
    ptx = next(e for e in fatbin_entries(fat) if e.kind == "ptx")
    at = bytes(fat).index(ptx.raw)
    # one digit of the PTX copy of the contract ("64" -> "65" in the block) — same length
    digits = ptx.raw.replace(b"123, 34, 101, 120, 97, 99, 116, 34, 58, 91, 54, 52",
                             b"123, 34, 101, 120, 97, 99, 116, 34, 58, 91, 54, 53", 1)
    assert digits != ptx.raw
    fat[at: at + len(digits)] = digits
    with pytest.raises(ContractIntegrityError,
                       match=r"fill: the contract in the fatbin ptx entry for arch 90 fails its checksum") as e:
        embedded_contracts(bytes(fat))
    assert e.value.kernel == "fill"
