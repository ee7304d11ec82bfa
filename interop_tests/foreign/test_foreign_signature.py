"""C signatures become contracts (bridge.foreign.declare): every C type maps to the dtype CUDA gives it,
pointers are C-contiguous pointer-ABI arrays with access from their constness, and whatever cannot be
mapped is refused naming the parameter."""
from __future__ import annotations

import json

import pytest

import bridge
from bridge.errors import ContractDefinitionError
from bridge.foreign import declare, parse_signature

# (C spelling, contract dtype): written from the CUDA/LP64 sizes, not from the module's table
TYPES = [
    ("bool", "bool"), ("char", "i8"), ("signed char", "i8"), ("unsigned char", "u8"), ("int8_t", "i8"),
    ("uint8_t", "u8"), ("short", "i16"), ("unsigned short", "u16"), ("short int", "i16"), ("int16_t", "i16"),
    ("uint16_t", "u16"), ("int", "i32"), ("signed", "i32"), ("unsigned", "u32"), ("unsigned int", "u32"),
    ("int unsigned", "u32"), ("int32_t", "i32"), ("uint32_t", "u32"), ("long", "i64"), ("unsigned long", "u64"),
    ("long long", "i64"), ("long long int", "i64"), ("unsigned long long", "u64"), ("int64_t", "i64"),
    ("uint64_t", "u64"), ("size_t", "u64"), ("ptrdiff_t", "i64"), ("__half", "f16"), ("half", "f16"),
    ("__nv_bfloat16", "bf16"), ("nv_bfloat16", "bf16"), ("float", "f32"), ("double", "f64"),
    ("cuFloatComplex", "c64"), ("cuDoubleComplex", "c128"), ("__nv_fp8_e4m3", "f8e4m3fn"),
    ("__nv_fp8_e5m2", "f8e5m2"),
]


POINTER_ONLY = {"c64", "c128", "f8e4m3fn", "f8e5m2"}    # the validator passes no such scalar by value


@pytest.mark.parametrize("ctype,dtype", TYPES)
def test_each_c_type_is_a_pointer_and_a_scalar_of_its_dtype(ctype, dtype):
    c = declare(f"void k(const {ctype}* __restrict__ p, {ctype} *q)")
    args = c.to_dict()["args"]
    assert args[0] == {"name": "p", "kind": "array", "dtype": dtype, "ndim": 1, "layout": "C", "align": 0,
                       "access": "read", "abi": "pointer"}
    assert args[1]["dtype"] == dtype and args[1]["access"] == "write"
    if dtype in POINTER_ONLY:
        with pytest.raises(ContractDefinitionError, match=r"args\[0\] \('s'\)"):
            declare(f"void k({ctype} s)")
    else:
        assert declare(f"void k({ctype} s)").to_dict()["args"] == [{"name": "s", "kind": "scalar", "dtype": dtype}]


def test_saxpy_contract_json_is_the_hand_written_one():
    c = declare('extern "C" __global__ void __launch_bounds__(1024) saxpy(float a, const float* __restrict__ x, '
                'float* __restrict__ y, int n)', requires=["len(x) == n", "len(y) == n"],
                access={"y": "readwrite"}, grid_from="y", min_cc=80)
    expected = {
        "version": 1, "kernel": "saxpy", "domain": 1, "block": {"max_threads": 1024},
        "dynamic_smem": {"exact": 0}, "min_cc": 80,
        "args": [{"name": "a", "kind": "scalar", "dtype": "f32"},
                 {"name": "x", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0,
                  "access": "read", "abi": "pointer"},
                 {"name": "y", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0,
                  "access": "readwrite", "abi": "pointer"},
                 {"name": "n", "kind": "scalar", "dtype": "i32"}],
        "requires": ["len(x) == n", "len(y) == n"], "inplace": [],
        "grid_from": {"arg": "y", "per_thread": [1, 1, 1]},
    }
    assert json.loads(c.to_json()) == expected
    assert isinstance(c, bridge.LaunchContract)


def test_the_installed_saxpy_kb_contract_equals_its_declaration():
    """The package's own KB_CONTRACT (cpp/kernels/saxpy.cu), read from the fatbin, vs one declare call."""
    from bridge import cpp_kernels, fatbin
    if "saxpy" not in cpp_kernels.available():
        pytest.skip(f"the package's C++ kernels are not installed here: {cpp_kernels.status()}")
    embedded = fatbin.embedded_contracts(cpp_kernels.path("saxpy").read_bytes())["saxpy"]
    ours = declare("void __launch_bounds__(1024) saxpy(float a, const float* x, float* y, int n)",
                   requires=["len(x) == n", "len(y) == n"], access={"y": "readwrite"}, grid_from="y", min_cc=80)
    want = json.loads(embedded)
    for a in want["args"]:                      # KB_ARRAY spells the itemsize alignment out; 0 means the same
        if a["kind"] == "array" and a["align"] == 4:
            a["align"] = 0
    assert ours == bridge.LaunchContract.from_json(json.dumps(want))   # compared as the validator parses them


def test_ndim_layout_align_optional_and_other_contract_keywords():
    c = declare("void k(const float* a, float* out, int rows)", ndim={"a": 2, "out": 2}, layout={"a": "any"},
                align={"out": 16}, optional=["out"], block=(16, 16), domain=2, shared_mem=1024, inplace=[("a", "out")])
    d = c.to_dict()
    assert d["args"][0]["ndim"] == 2 and d["args"][0]["layout"] == "any"
    assert d["args"][1]["align"] == 16 and d["args"][1]["optional"] is True
    assert d["block"] == {"exact": [16, 16, 1]} and d["domain"] == 2 and d["dynamic_smem"] == {"exact": 1024}
    assert d["inplace"] == [["a", "out"]]


def test_qualifiers_in_any_order_and_comments_are_understood():
    sig = parse_signature("""void k(float const * const __restrict__ x,  // input
                                    volatile unsigned long long* counts, /* out */ long int n)""")
    assert [(p.name, p.dtype, p.pointer, p.const) for p in sig.params] == [
        ("x", "f32", True, True), ("counts", "u64", True, False), ("n", "i64", False, False)]


def test_no_parameters_and_void_parameter_list():
    assert declare("void k()").args == () and declare("void k(void)").args == ()


@pytest.mark.parametrize("text,fragment", [
    ("void k(float a, struct Foo f)", "parameter 'f' (#1): structs are not supported"),
    ("void k(const void* p)", "parameter 'p' (#0): 'void*' has no element type"),
    ("void k(float** p)", "parameter 'p' (#0): pointers to pointers are not supported"),
    ("void k(float& r)", "parameter 'r' (#0): references are not supported"),
    ("void k(float x[])", "array parameters"),
    ("void k(int n, Widget w)", "parameter 'w' (#1): unsupported type 'Widget'"),
    ("void k(int n, __int128 w)", "parameter 'w' (#1): unsupported type '__int128'"),
    ("void k(const float*)", "parameter #0 ('const float*'): expected a parameter name"),
    ("void k(int n, int n)", "parameter 'n' is named twice"),
    ("int k(int n)", "expected 'void name(type name, ...)'"),
    ("void k(std::vector<float> v)", "parameter #0 ('std::vector<float> v'): templates are not supported"),
])
def test_unsupported_parameters_are_refused_naming_them(text, fragment):
    with pytest.raises(ContractDefinitionError) as info:
        declare(text)
    assert fragment in str(info.value)


@pytest.mark.parametrize("kw,fragment", [
    ({"access": {"z": "read"}}, "access: no parameter named 'z'"),
    ({"access": {"n": "read"}}, "access: parameter 'n' is a value, not a pointer"),
    ({"access": {"x": "write"}}, "parameter 'x' is a pointer to const, so it can only be 'read'"),
    ({"ndim": {"n": 2}}, "ndim: parameter 'n' is a value"),
    ({"grid_from": "n"}, "grid_from: parameter 'n' is a value"),
    ({"requires": ["len(q) == n"]}, "q"),
])
def test_keywords_naming_wrong_parameters_are_refused(kw, fragment):
    with pytest.raises(ContractDefinitionError) as info:
        declare("void k(const float* x, float* y, int n)", **kw)
    assert fragment in str(info.value)


def test_declare_is_reachable_as_bridge_foreign_and_the_error_class_is_exported():
    assert bridge.foreign.declare is declare
    assert issubclass(bridge.ForeignKernelError, bridge.ContractDefinitionError)
