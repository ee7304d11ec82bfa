"""Mutation test of bridge.fatbin: truncations, bit flips and byte overwrites of real modules (the
package's installed fatbins, and a cubin, PTX, LZ4 and zstd fatbins built here by nvcc) never raise
anything but ModuleFormatError, and never yield a contract other than the module's own."""
from __future__ import annotations

import random
import subprocess

import pytest

import bridge.fatbin as fatbin
from bridge.fatbin import ModuleFormatError, embedded_contracts, fatbin_entries

from interop_tests.cpp.lz4_support import hide_lz4_package, require_lz4_package

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 7 s of a full run on 2 cores: nvcc builds, mutation sweeps

SOURCE = r'''#include "kernelbridge/kernel_contract.cuh"
extern "C" __global__ void __launch_bounds__(128) scale(const float* __restrict__ x, float* y, float a, int n) {
  int i = blockIdx.x * 128 + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}
KB_CONTRACT(scale, KB_BLOCK(128), KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write),
            KB_SCALAR(a, f32), KB_SCALAR(n, i32)), KB_REQUIRES("len(x) == n", "len(y) == n"), KB_GRID_FROM(y));
extern "C" __global__ void plain(int* out) { out[0] = 7; }
'''

BUILDS = {
    "cubin": ("-cubin", "-arch=sm_90"),
    "ptx": ("-ptx", "-arch=sm_90"),
    "fatbin_lz4_ptx_only": ("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_90,code=compute_90"),
    "fatbin_lz4_mixed": ("-fatbin", "-compress-mode=speed", "-gencode", "arch=compute_80,code=sm_80",
                         "-gencode", "arch=compute_90,code=compute_90"),
    "fatbin_zstd": ("-fatbin", "-compress-mode=size", "-gencode", "arch=compute_80,code=sm_80",
                    "-gencode", "arch=compute_90,code=compute_90"),
}


@pytest.fixture(scope="module")
def built(nvcc, include_dir, tmp_path_factory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("mut")
    (root / "m.cu").write_text(SOURCE)
    out = {}
    for name, flags in BUILDS.items():
        dest = root / f"{name}.bin"
        proc = subprocess.run([nvcc, *flags, "-std=c++17", f"-I{include_dir}", str(root / "m.cu"), "-o", str(dest)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        out[name] = dest.read_bytes()
    return out


def _mutants(data: bytes, seed: int):
    """(description, bytes): every truncation of the first 256 bytes and 256 more spread over the
    file, 1500 single-bit flips and 500 random byte overwrites at seeded random offsets."""
    rng = random.Random(seed)
    n = len(data)
    cuts = sorted(set(range(min(n, 256))) | {rng.randrange(n) for _ in range(256)})
    for cut in cuts:
        yield f"truncated to {cut} bytes", data[:cut]
    for _ in range(1500):
        at, bit = rng.randrange(n), rng.randrange(8)
        m = bytearray(data)
        m[at] ^= 1 << bit
        yield f"bit {bit} of byte {at} flipped", bytes(m)
    for _ in range(500):
        at, value = rng.randrange(n), rng.randrange(256)
        m = bytearray(data)
        m[at] = value
        yield f"byte {at} set to {value}", bytes(m)


def _assert_only_typed_errors(data: bytes, label: str, reader=embedded_contracts,
                              original: dict[str, str] | None = None) -> dict[str, int]:
    original = embedded_contracts(data) if original is None else original
    tally = {"refused": 0, "same": 0, "fewer": 0}
    for what, mutant in _mutants(data, seed=len(data)):
        try:
            got = reader(mutant)
        except ModuleFormatError:
            tally["refused"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the point of the test
            pytest.fail(f"{label}, {what}: raised {type(exc).__name__}: {exc}")
        for name, text in got.items():
            assert original.get(name) == text, f"{label}, {what}: a different contract for {name!r}: {text}"
        tally["same" if got == original else "fewer"] += 1
    return tally


@pytest.mark.parametrize("name", ["saxpy", "transpose", "block_reduce_sum", "legacy_softmax"])
def test_mutated_installed_fatbins_raise_only_module_format_errors(installed_fatbins, name):
    data = installed_fatbins[name].read_bytes()
    assert name in embedded_contracts(data)
    tally = _assert_only_typed_errors(data, f"installed {name}.fatbin")
    assert tally["refused"] > 0   # the mutations do reach the parser


@pytest.mark.parametrize("name", ["cubin", "ptx", "fatbin_zstd"])
def test_mutated_cubin_ptx_and_zstd_fatbin_raise_only_module_format_errors(built, name):
    data = built[name]
    if name == "fatbin_zstd" and not fatbin.zstd_available():
        with pytest.raises(fatbin.CompressedEntryError):
            embedded_contracts(data)
        original: dict[str, str] = {}       # no mutant may yield any contract then
    else:
        original = embedded_contracts(data)
        assert set(original) == {"scale"}
    tally = _assert_only_typed_errors(data, name, original=original)
    assert tally["refused"] > 0


@pytest.mark.parametrize("name", ["fatbin_lz4_ptx_only", "fatbin_lz4_mixed"])
def test_mutated_lz4_fatbins_raise_only_module_format_errors(built, name):
    require_lz4_package()
    data = built[name]
    assert {e.compression for e in fatbin_entries(data) if e.kind == "ptx"} == {"lz4"}
    assert set(embedded_contracts(data)) == {"scale"}
    tally = _assert_only_typed_errors(data, f"{name} (lz4 package)")
    assert tally["refused"] > 0


@pytest.mark.parametrize("name", ["fatbin_lz4_ptx_only", "fatbin_lz4_mixed"])
def test_mutated_lz4_fatbins_without_the_lz4_package_raise_only_module_format_errors(built, monkeypatch, name):
    """Without the package an LZ4 entry is a typed refusal (CompressedEntryError), never decoded here: the
    PTX-only module yields nothing, the mixed one only its cubin's contracts."""
    hide_lz4_package(monkeypatch)
    data = built[name]
    if name == "fatbin_lz4_ptx_only":
        with pytest.raises(fatbin.CompressedEntryError, match="LZ4-compressed.*pip install lz4"):
            embedded_contracts(data)
        original: dict[str, str] = {}       # no mutant may yield any contract then
    else:
        original = embedded_contracts(data)
        assert set(original) == {"scale"}
    tally = _assert_only_typed_errors(data, f"{name} (lz4 hidden)", original=original)
    assert tally["refused"] > 0


def test_mutation_harness_reports_a_raw_parser_error(built):
    """The harness itself can fail: a reader that leaks struct.error on some mutants is reported."""
    import struct

    def leaky(data: bytes) -> dict[str, str]:
        if len(data) < 100:
            raise struct.error("unpack_from requires a buffer of at least 64 bytes")
        return embedded_contracts(data)

    with pytest.raises(pytest.fail.Exception, match="truncated to 0 bytes: raised error: unpack_from"):
        _assert_only_typed_errors(built["cubin"], "cubin", reader=leaky)
