"""The package's own C++ kernels: `pip install` built and installed one fatbin per kernel, each with
SASS for sm_80 and sm_90, PTX for compute_90, and its launch contract readable without a GPU."""
from __future__ import annotations

import json

import pytest

import bridge
from bridge.fatbin import embedded_contracts, fatbin_entries

# name -> [(arg name, kind, dtype, access or None)], block clause, grid_from arg
EXPECTED = {
    "saxpy": ([("a", "scalar", "f32", None), ("x", "array", "f32", "read"),
               ("y", "array", "f32", "readwrite"), ("n", "scalar", "i32", None)],
              {"max_threads": 1024}, "y"),
    "transpose": ([("in", "array", "f32", "read"), ("out", "array", "f32", "write"),
                   ("rows", "scalar", "i32", None), ("cols", "scalar", "i32", None)],
                  {"exact": [32, 8, 1]}, "in"),
    "block_reduce_sum": ([("x", "array", "f32", "read"), ("out", "array", "f32", "readwrite"),
                          ("n", "scalar", "i32", None)], {"exact": [256, 1, 1]}, "x"),
    "legacy_softmax": ([("x", "array", "f32", "read"), ("y", "array", "f32", "write"),
                        ("rows", "scalar", "i32", None), ("cols", "scalar", "i32", None)],
                       {"exact": [256, 1, 1]}, None),
}


def test_every_kernel_is_installed(installed_fatbins):
    assert set(EXPECTED) == set(bridge.cpp_kernels.KERNELS)
    assert set(bridge.cpp_kernels.available()) >= set(EXPECTED)
    for name, path in installed_fatbins.items():
        assert path.name == f"{name}.fatbin" and path.stat().st_size > 0


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fatbin_holds_sass_80_90_and_ptx(installed_fatbins, name):
    entries = fatbin_entries(installed_fatbins[name].read_bytes())
    assert sorted((e.kind, e.arch) for e in entries) == [("elf", 80), ("elf", 90), ("ptx", 90)]
    for e in entries:
        payload = e.data()
        if e.kind == "elf":
            assert payload[:4] == b"\x7fELF"
        else:
            text = payload.decode()
            assert f".entry {name}(" in text and ".target sm_90" in text


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_embedded_contract_names_args_and_dtypes(installed_fatbins, name):
    contracts = embedded_contracts(installed_fatbins[name].read_bytes())
    assert list(contracts) == [name]
    c = json.loads(contracts[name])
    args, block, grid_from = EXPECTED[name]
    assert c["version"] == 1 and c["kernel"] == name and c["min_cc"] == 80
    got = [(a["name"], a["kind"], a["dtype"], a.get("access")) for a in c["args"]]
    assert got == args
    assert all(a["abi"] == "pointer" and a["layout"] == "C" for a in c["args"] if a["kind"] == "array")
    assert c["block"] == block
    assert (c.get("grid_from") or {}).get("arg") == grid_from
    assert c["requires"], f"{name}: the contract should relate shapes to the scalar sizes"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_embedded_contract_parses_in_native_validator(installed_fatbins, name):
    from bridge import _native

    if not hasattr(_native, "Contract"):
        pytest.fail("bridge._native.Contract is missing: the native extension is out of date")
    contract = _native.Contract(embedded_contracts(installed_fatbins[name].read_bytes())[name])
    assert contract.kernel == name
    assert [a["name"] for a in contract.args] == [a[0] for a in EXPECTED[name][0]]
    assert contract.requires == json.loads(embedded_contracts(installed_fatbins[name].read_bytes())[name])["requires"]


def test_path_of_unknown_kernel_names_it_and_the_installed_ones():
    with pytest.raises(FileNotFoundError, match=r"no C\+\+ kernel module 'nope'.*installed modules: .*saxpy"):
        bridge.cpp_kernels.path("nope")
    with pytest.raises(ValueError, match="name: expected a kernel module name"):
        bridge.cpp_kernels.path("../saxpy")


def test_cmake_dir_holds_the_function_and_config():
    d = bridge.cmake_dir()
    assert (d / "kernelbridgeConfig.cmake").is_file()
    assert "function(kernelbridge_add_cuda_module" in (d / "kernelbridge.cmake").read_text()
    assert (d.parent / "include" / "kernelbridge" / "kernel_contract.cuh").is_file()
