"""KB_CONTRACT's spellings for issue 28's contract features: KB_ARRAY_OPT / KB_ARRAY_OPT_EX (an optional
array: a launch may pass None, the kernel tests the pointer) and grid relations in KB_REQUIRES
("grid.x == len(partials)"). The embedded JSON is what the native parser reads; an optional array's
pointer constness is checked against the kernel like any array's."""
from __future__ import annotations

import json

import pytest

from bridge.fatbin import elf_contracts

pytestmark = pytest.mark.slow      # an nvcc run a test

HEADER = '#include "kernelbridge/kernel_contract.cuh"\n'

SOURCE = HEADER + r'''
extern "C" __global__ void __launch_bounds__(256)
partial_sums(const float* __restrict__ x, const float* __restrict__ bias, float* partials, float* scratch, int n) {}

KB_CONTRACT(partial_sums,
            KB_BLOCK_MAX(256),
            KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY_OPT(bias, f32, 1, read),
                    KB_ARRAY(partials, f32, 1, write), KB_ARRAY_OPT_EX(scratch, f32, 1, readwrite, any, 16),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(bias) == n", "grid.x == len(partials)",
                        "grid.x * block.x >= n"));
'''

EXPECTED_ARGS = [
    {"name": "x", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0, "access": "read",
     "abi": "pointer"},
    {"name": "bias", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0, "access": "read",
     "abi": "pointer", "optional": True},
    {"name": "partials", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0, "access": "write",
     "abi": "pointer"},
    {"name": "scratch", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "any", "align": 16,
     "access": "readwrite", "abi": "pointer", "optional": True},
    {"name": "n", "kind": "scalar", "dtype": "i32"},
]


def test_optional_arrays_and_grid_relations_are_embedded_and_parse(compile_cu):
    rc, data, diag = compile_cu(SOURCE, "-cubin")
    assert rc == 0, diag
    text = elf_contracts(data)["partial_sums"]
    got = json.loads(text)
    assert got["args"] == EXPECTED_ARGS
    assert got["requires"][2:] == ["grid.x == len(partials)", "grid.x * block.x >= n"]
    native = pytest.importorskip("bridge._native")
    c = native.Contract(text)
    assert [a.get("optional", False) for a in c.args if a["kind"] == "array"] == [False, True, False, True]
    assert c.relation_trees[2]["operands"][0] == {"op": "grid", "text": "grid.x", "axis": 0}
    assert native.Contract(c.to_json()).to_json() == c.to_json()


def test_optional_read_array_on_a_mutable_pointer_fails_to_compile(compile_cu):
    src = HEADER + 'extern "C" __global__ void k(float* b) {}\nKB_CONTRACT(k, KB_ARGS(KB_ARRAY_OPT(b, f32, 1, read)));'
    rc, _, diag = compile_cu(src, "-cubin")
    assert rc != 0
    assert ("k: argument 'b' (#0) is declared a read f32 array, so the kernel parameter must be a pointer to const "
            "f32 (const T*)") in diag
