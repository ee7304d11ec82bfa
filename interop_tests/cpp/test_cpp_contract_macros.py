"""KB_CONTRACT (cpp/include/kernelbridge/kernel_contract.cuh): the JSON it embeds, and the compile-time
checks against the kernel's real parameter list — each misuse pinned with its compiler message."""
from __future__ import annotations

import json

import pytest

from bridge.fatbin import elf_contracts, embedded_contracts, ptx_contracts

pytestmark = pytest.mark.slow      # the long tail (pyproject.toml): 8 s of a full run on 2 cores: an nvcc run a test

HEADER = '#include "kernelbridge/kernel_contract.cuh"\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n'

FULL = HEADER + r'''
extern "C" __global__ void __launch_bounds__(256)
full(bool flag, long long count, unsigned char bias, __half h, __nv_bfloat16 g,
     const unsigned char* __restrict__ src, double* dst, long offset) {}

KB_CONTRACT(full,
            KB_DOMAIN(2),
            KB_BLOCK(16, 16),
            KB_SMEM_MAX(4096),
            KB_MIN_CC(90),
            KB_ARGS(KB_SCALAR(flag, bool), KB_SCALAR(count, i64), KB_SCALAR(bias, u8),
                    KB_SCALAR(h, f16), KB_SCALAR(g, bf16),
                    KB_ARRAY(src, u8, -1, read),
                    KB_ARRAY_EX(dst, f64, 2, readwrite, any, 16),
                    KB_SCALAR(offset, i64)),
            KB_REQUIRES("dst.shape[0] * dst.shape[1] <= src.size", "count == src.size"),
            KB_INPLACE((src, dst)),
            KB_GRID_FROM(dst, 2, 1));

#define PLAIN_THREADS 64
extern "C" __global__ void plain(int* out) {}
KB_CONTRACT(plain, KB_BLOCK_MAX(PLAIN_THREADS), KB_ARGS(KB_ARRAY(out, i32, 1, write)));

extern "C" __global__ void owned(float* out) {}
KB_CONTRACT(owned, KB_STRICT_DOMAIN(1), KB_ARGS(KB_ARRAY(out, f32, 1, write)), KB_GRID_FROM(out));
'''

FULL_EXPECTED = {
    "version": 1, "kernel": "full", "domain": 2, "block": {"exact": [16, 16, 1]},
    "dynamic_smem": {"max": 4096}, "min_cc": 90,
    "args": [
        {"name": "flag", "kind": "scalar", "dtype": "bool"},
        {"name": "count", "kind": "scalar", "dtype": "i64"},
        {"name": "bias", "kind": "scalar", "dtype": "u8"},
        {"name": "h", "kind": "scalar", "dtype": "f16"},
        {"name": "g", "kind": "scalar", "dtype": "bf16"},
        {"name": "src", "kind": "array", "dtype": "u8", "ndim": -1, "layout": "C", "align": 0,
         "access": "read", "abi": "pointer"},
        {"name": "dst", "kind": "array", "dtype": "f64", "ndim": 2, "layout": "any", "align": 16,
         "access": "readwrite", "abi": "pointer"},
        {"name": "offset", "kind": "scalar", "dtype": "i64"},
    ],
    "requires": ["dst.shape[0] * dst.shape[1] <= src.size", "count == src.size"],
    "inplace": [["src", "dst"]],
    "grid_from": {"arg": "dst", "per_thread": [2, 1, 1]},
}


@pytest.fixture(scope="module")
def full_cubin(compile_cu) -> bytes:
    rc, data, diag = compile_cu(FULL, "-cubin")
    assert rc == 0, diag
    return data


def test_contract_json_in_cubin_is_the_declaration(full_cubin):
    got = elf_contracts(full_cubin)
    assert set(got) == {"full", "plain", "owned"}
    assert json.loads(got["full"]) == FULL_EXPECTED
    assert json.loads(got["owned"]) == {
        "version": 1, "kernel": "owned", "domain": 1, "strict_domain": True,
        "args": [{"name": "out", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0,
                  "access": "write", "abi": "pointer"}],
        "grid_from": {"arg": "out", "per_thread": [1, 1, 1]}}
    assert json.loads(got["plain"]) == {
        "version": 1, "kernel": "plain", "block": {"max_threads": 64},
        "args": [{"name": "out", "kind": "array", "dtype": "i32", "ndim": 1, "layout": "C", "align": 0,
                  "access": "write", "abi": "pointer"}]}


def test_contract_json_in_ptx_matches_cubin(compile_cu, full_cubin):
    rc, data, diag = compile_cu(FULL, "-ptx")
    assert rc == 0, diag
    assert ptx_contracts(data.decode()) == elf_contracts(full_cubin)
    assert embedded_contracts(data) == elf_contracts(full_cubin)


def test_contract_parses_in_native_validator(full_cubin):
    native = pytest.importorskip("bridge._native")
    contract = native.Contract(elf_contracts(full_cubin)["full"])
    assert contract.kernel == "full"
    assert contract.block_exact == (16, 16, 1)
    assert [a["name"] for a in contract.args] == [a["name"] for a in FULL_EXPECTED["args"]]
    assert contract.grid_from == "dst"
    assert contract.inplace == [("src", "dst")]


KERNEL4 = 'extern "C" __global__ void k(float a, const float* x, float* y, int n) {}\n'

MISUSES = {
    "too_few_args": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), "
                  "KB_ARRAY(y, f32, 1, readwrite)));",
        "k: KB_ARGS declares 3 argument(s) but the kernel's parameter list has a different count"),
    "too_many_args": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), "
                  "KB_ARRAY(y, f32, 1, readwrite), KB_SCALAR(n, i32), KB_SCALAR(m, i32)));",
        "k: KB_ARGS declares 5 argument(s) but the kernel's parameter list has a different count"),
    "read_array_on_mutable_pointer": (
        'extern "C" __global__ void k(float* x) {}\nKB_CONTRACT(k, KB_ARGS(KB_ARRAY(x, f32, 1, read)));',
        "k: argument 'x' (#0) is declared a read f32 array, so the kernel parameter must be a pointer "
        "to const f32 (const T*)"),
    "writable_array_on_const_pointer": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), "
                  "KB_ARRAY(y, f32, 1, read), KB_SCALAR(n, i32)));",
        "k: argument 'y' (#2) is declared a read f32 array, so the kernel parameter must be a pointer "
        "to const f32 (const T*)"),
    "array_dtype_mismatch": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f64, 1, read), "
                  "KB_ARRAY(y, f32, 1, write), KB_SCALAR(n, i32)));",
        "k: argument 'x' (#1) is declared a read f64 array, so the kernel parameter must be a pointer "
        "to const f64 (const T*)"),
    "scalar_dtype_mismatch": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), "
                  "KB_ARRAY(y, f32, 1, write), KB_SCALAR(n, i64)));",
        "k: argument 'n' (#3) is declared KB_SCALAR(n, i64) but the kernel parameter is not a i64 value"),
    "array_declared_as_scalar": (
        KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_SCALAR(x, u64), "
                  "KB_ARRAY(y, f32, 1, write), KB_SCALAR(n, i32)));",
        "k: argument 'x' (#1) is declared KB_SCALAR(x, u64) but the kernel parameter is not a u64 value"),
    "complex_scalar": (
        'extern "C" __global__ void k(float2 c) {}\nKB_CONTRACT(k, KB_ARGS(KB_SCALAR(c, c64)));',
        "k: argument 'c' (#0) KB_SCALAR dtype must be bool, an integer, f16, bf16, f32 or f64, not c64"),
    "kernel_without_c_linkage": (
        '__global__ void k(float* y) {}\nKB_CONTRACT(k, KB_ARGS(KB_ARRAY(y, f32, 1, write)));',
        'linkage specification is incompatible with previous "k"'),
    "unknown_dtype": (
        'extern "C" __global__ void k(float* y) {}\nKB_CONTRACT(k, KB_ARGS(KB_ARRAY(y, f33, 1, write)));',
        'identifier "KB__DT_f33" is undefined'),
    "quote_in_relation": (
        'extern "C" __global__ void k(float* y) {}\n'
        'KB_CONTRACT(k, KB_ARGS(KB_ARRAY(y, f32, 1, write)), KB_REQUIRES("len(y) == 1", "len(\\"y) > 0"));',
        "k: KB_REQUIRES relation #1 contains a quote, backslash or control character"),
    "constexpr_variable_as_block": (
        'constexpr int kThreads = 128;\nextern "C" __global__ void k(float* y) {}\n'
        'KB_CONTRACT(k, KB_BLOCK(kThreads), KB_ARGS(KB_ARRAY(y, f32, 1, write)));',
        "k: KB_BLOCK takes decimal integer literals (they are copied into the contract JSON), got 'kThreads'"),
    "expression_as_ndim": (
        'extern "C" __global__ void k(float* y) {}\nKB_CONTRACT(k, KB_ARGS(KB_ARRAY(y, f32, 1 + 1, write)));',
        "k: argument 'y' (#0) ndim must be a literal -1 or 1..8, got '1 + 1'"),
    "block_too_large": (
        'extern "C" __global__ void k(float* y) {}\n'
        'KB_CONTRACT(k, KB_BLOCK(64, 32), KB_ARGS(KB_ARRAY(y, f32, 1, write)));',
        "k: KB_BLOCK needs 1..1024 threads"),
}


@pytest.mark.parametrize("case", sorted(MISUSES))
def test_contract_misuse_fails_to_compile(compile_cu, case):
    source, message = MISUSES[case]
    rc, data, diag = compile_cu(HEADER + source, "-cubin")
    assert rc != 0, f"{case}: compiled although the contract does not match the kernel"
    assert message in diag, diag


def test_matching_contract_of_four_parameter_kernel_compiles(compile_cu):
    rc, data, diag = compile_cu(
        HEADER + KERNEL4 + "KB_CONTRACT(k, KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), "
                           "KB_ARRAY(y, f32, 1, readwrite), KB_SCALAR(n, i32)));", "-cubin")
    assert rc == 0, diag
    assert json.loads(elf_contracts(data)["k"])["args"][3] == {"name": "n", "kind": "scalar", "dtype": "i32"}
