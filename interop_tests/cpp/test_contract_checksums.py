"""Every contract a module carries has its FNV-1a 64 checksum beside it (KB_CONTRACT emits
`__kb_checksum_<k>`), and bridge.fatbin verifies it: flipping any bit of a contract's bytes or of its
checksum in a cubin or PTX never yields a different contract, and a contract without a checksum
(a module built before checksums) is refused with a message that says to rebuild."""
from __future__ import annotations

import json
import struct

import pytest

from bridge.fatbin import (CHECKSUM_SYMBOL_PREFIX, CONTRACT_SYMBOL_PREFIX, ContractIntegrityError,
                           ModuleFormatError, contract_checksum, embedded_contracts)

HEADER = '#include "kernelbridge/kernel_contract.cuh"\n'
KERNEL = r'''
extern "C" __global__ void __launch_bounds__(64) fill(float* y, float v, int n) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) y[i] = v;
}
'''
SOURCE = HEADER + KERNEL + r'''
KB_CONTRACT(fill, KB_BLOCK(64), KB_ARGS(KB_ARRAY(y, f32, 1, write), KB_SCALAR(v, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(y) == n", "n >= 1"), KB_GRID_FROM(y));
'''
JSON = ('{"version":1,"kernel":"fill","block":{"exact":[64,1,1]},"args":[{"name":"y","kind":"array",'
        '"dtype":"f32","ndim":1,"layout":"C","align":0,"access":"write","abi":"pointer"},{"name":"v",'
        '"kind":"scalar","dtype":"f32"},{"name":"n","kind":"scalar","dtype":"i32"}],"requires":["len(y) '
        '== n","n >= 1"],"grid_from":{"arg":"y","per_thread":[1,1,1]}}')

# Published FNV-1a 64 test vectors (Fowler/Noll/Vo): the checksum is that function, nothing else.
FNV1A64_VECTORS = {"": 0xCBF29CE484222325, "a": 0xAF63DC4C8601EC8C, "foobar": 0x85944171F73967E8}


def _fnv1a64(data: bytes) -> int:
    """An independent copy for the test, so expected bytes are not computed by the code under test."""
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % (1 << 64)
    return h


@pytest.fixture(scope="module")
def cubin(compile_cu) -> bytes:
    rc, data, diag = compile_cu(SOURCE, "-cubin", "sm_90")
    assert rc == 0, diag
    return data


@pytest.fixture(scope="module")
def ptx(compile_cu) -> bytes:
    rc, data, diag = compile_cu(SOURCE, "-ptx", "sm_90")
    assert rc == 0, diag
    return data


def test_checksum_is_fnv1a64_in_python_and_in_constexpr_cpp(compile_cu):
    for text, want in FNV1A64_VECTORS.items():
        assert contract_checksum(text) == want == _fnv1a64(text.encode())
    asserts = "".join(f'static_assert(kb::contract_checksum("{t}") == 0x{v:016x}ull, "fnv {t}");\n'
                      for t, v in FNV1A64_VECTORS.items())
    rc, _, diag = compile_cu('#include "kernelbridge/contract_checksum.hpp"\n' + asserts + KERNEL, "-cubin")
    assert rc == 0, diag


def test_macro_stores_the_checksum_of_its_json_beside_it(cubin, ptx):
    assert embedded_contracts(cubin) == embedded_contracts(ptx) == {"fill": JSON}
    assert cubin.count(JSON.encode() + b"\0") == 1
    assert cubin.count(struct.pack("<Q", _fnv1a64(JSON.encode()))) == 1
    signed = _fnv1a64(JSON.encode()) - (1 << 64) if _fnv1a64(JSON.encode()) >= 1 << 63 else _fnv1a64(JSON.encode())
    assert f".u64 {CHECKSUM_SYMBOL_PREFIX}fill = {signed};".encode() in ptx


def _flips(data: bytes, start: int, stop: int):
    for at in range(start, stop):
        for bit in range(8):
            m = bytearray(data)
            m[at] ^= 1 << bit
            yield at, bit, bytes(m)


def test_every_bit_flip_of_a_cubins_contract_or_checksum_is_refused_naming_the_kernel(cubin):
    json_at = cubin.index(JSON.encode() + b"\0")
    sum_at = cubin.index(struct.pack("<Q", _fnv1a64(JSON.encode())))
    spans = [(json_at, json_at + len(JSON) + 1), (sum_at, sum_at + 8)]
    flips = 0
    for start, stop in spans:
        for at, bit, mutant in _flips(cubin, start, stop):
            with pytest.raises(ContractIntegrityError, match="^fill: the contract in the cubin fails its "
                                                             "checksum") as e:
                embedded_contracts(mutant)
            assert e.value.kernel == "fill", (at, bit)
            flips += 1
    assert flips == 8 * (len(JSON) + 1 + 8)


def test_every_bit_flip_of_the_ptx_contract_lines_never_yields_a_different_contract(ptx):
    text = ptx.decode()
    lines = [ln for ln in text.splitlines(keepends=True)
             if CONTRACT_SYMBOL_PREFIX in ln or CHECKSUM_SYMBOL_PREFIX in ln]
    assert len(lines) == 2
    refused = unchanged = 0
    for line in lines:
        start = ptx.index(line.encode())
        for at, bit, mutant in _flips(ptx, start, start + len(line)):
            try:
                got = embedded_contracts(mutant)
            except ModuleFormatError:
                refused += 1
                continue
            assert got == {"fill": JSON}, f"bit {bit} of byte {at}: a different contract {got}"
            unchanged += 1   # e.g. `.align 1` -> `.align 3`, `[N]` digits: the bytes are the same
    assert refused + unchanged == 8 * sum(len(ln) for ln in lines)
    assert refused > 0.9 * (refused + unchanged)


def test_contract_without_checksum_from_an_older_build_is_refused_with_rebuild_advice(compile_cu):
    old_style = HEADER + KERNEL + ('extern "C" __device__ const char __kb_contract_fill[] = '
                                   f'{json.dumps(JSON)};\n')
    for mode in ("-cubin", "-ptx"):
        rc, data, diag = compile_cu(old_style, mode, "sm_90")
        assert rc == 0, diag
        where = "cubin" if mode == "-cubin" else "PTX"
        with pytest.raises(ContractIntegrityError,
                           match=rf"^fill: the contract in the {where} has no checksum \(__kb_checksum_fill\).*"
                                 r"rebuild it with the current kernelbridge/kernel_contract.cuh"):
            embedded_contracts(data)


def test_checksum_without_contract_is_refused(compile_cu):
    rc, data, diag = compile_cu(HEADER + KERNEL + 'extern "C" __device__ const unsigned long long '
                                '__kb_checksum_fill = 12345;\n', "-cubin", "sm_90")
    assert rc == 0, diag
    with pytest.raises(ContractIntegrityError, match=r"^fill: the cubin carries a contract checksum "
                                                     r"\(__kb_checksum_fill\) but no contract"):
        embedded_contracts(data)


def test_contract_stored_under_another_kernels_name_is_refused(ptx):
    # a damaged name shared by both symbols (what a flipped LZ4/zstd back-reference does)
    moved = ptx.replace(b"__kb_contract_fill", b"__kb_contract_film").replace(b"__kb_checksum_fill",
                                                                              b"__kb_checksum_film")
    with pytest.raises(ContractIntegrityError, match="^film: the contract stored for kernel 'film' in the PTX "
                                                     "names kernel 'fill'"):
        embedded_contracts(moved)


@pytest.mark.gpu
def test_load_module_refuses_a_module_whose_contract_fails_its_checksum(cubin, tmp_path):
    import bridge
    at = cubin.index(b'"n >= 1"')
    damaged = bytearray(cubin)
    damaged[at + 3] = ord("<")                 # "n >= 1" -> "n <= 1": valid JSON, valid relation
    path = tmp_path / "damaged.cubin"
    path.write_bytes(bytes(damaged))
    with pytest.raises(ContractIntegrityError, match="^fill: the contract in the cubin fails its checksum"):
        bridge.load_module(str(path))
    assert bridge.load_module(cubin).fill.contract.kernel == "fill"   # the intact module loads
