"""Contract JSON (schema v1): strict parsing, definition errors naming the field, lossless round trip."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bridge
from bridge import _native
from interop_tests.contract.contract_support import GOOD_CONTRACT

GOOD = GOOD_CONTRACT


def mutated(path: str, value) -> str:
    """GOOD with one field replaced (value None deletes it); path like 'args.1.dtype'."""
    d = json.loads(json.dumps(GOOD))
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    target = d
    for k in keys[:-1]:
        target = target[k]
    if value is None:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return json.dumps(d)


def test_documented_example_parses_with_every_property():
    c = _native.Contract(json.dumps(GOOD))
    assert (c.kernel, c.domain, c.block_exact, c.max_threads, c.min_cc) == ("vecadd", 1, (256, 1, 1), 0, 80)
    assert c.dynamic_smem == ("exact", 0)
    assert c.args == GOOD["args"]
    assert c.requires == GOOD["requires"] and c.inplace == [("a", "out")]
    assert c.grid_from == "out" and c.per_thread == (1, 1, 1)
    assert c.has_fault_buffer and c.fault_sites == GOOD["fault_sites"]


def test_to_json_round_trips_and_is_canonical():
    c = _native.Contract(json.dumps(GOOD))
    text = c.to_json()
    again = _native.Contract(text)
    assert again.to_json() == text and again == c
    assert json.loads(text) == GOOD
    minimal = _native.Contract('{"kernel":"k","args":[]}')
    assert json.loads(minimal.to_json())["dynamic_smem"] == {"exact": 0} and not minimal.has_fault_buffer


def test_pickle_keeps_the_contract():
    import pickle
    c = _native.Contract(json.dumps(GOOD))
    assert pickle.loads(pickle.dumps(c)).to_json() == c.to_json()


DEFINITION_ERRORS = [
    ("kernel", None, "contract: invalid contract: kernel: missing (required)"),
    ("kernel", "", "contract: invalid contract: kernel: expected a non-empty string"),
    ("version", 2, "vecadd: invalid contract: version: expected an integer in [1, 1], got 2"),
    ("domain", 4, "vecadd: invalid contract: domain: expected an integer in [1, 3], got 4"),
    ("domain", 0, "vecadd: invalid contract: domain: expected an integer in [1, 3], got 0"),
    ("domain", 1.5, "vecadd: invalid contract: domain: expected an integer, got a non-integer number"),
    ("speed", 3, "vecadd: invalid contract: speed: unknown key (allowed: version, kernel, domain, strict_domain, "
                 "block, dynamic_smem, min_cc, args, requires, inplace, grid_from, fault_sites, tensor_maps, pdl, "
                 "cooperative, cluster, cluster_nonportable)"),
    ("strict_domain", 1, "vecadd: invalid contract: strict_domain: expected true or false, got a number"),
    ("block", {"exact": [64, 32]}, "vecadd: invalid contract: block.exact: expected at most 1024 threads per block, "
                                   "got 2048"),
    ("block", {"exact": [0]}, "vecadd: invalid contract: block.exact[0]: expected an integer in [1, 1024], got 0"),
    ("block", {"exact": [1, 1, 1, 1]}, "vecadd: invalid contract: block.exact: expected 1 to 3 elements, got 4"),
    ("block", {"max_threads": 2048}, "vecadd: invalid contract: block.max_threads: expected an integer in [1, 1024], "
                                     "got 2048"),
    ("block", {"exact": [32], "max_threads": 64}, "vecadd: invalid contract: block: expected exactly one of "
                                                  "\"exact\" or \"max_threads\""),
    ("block", {"min": 3}, "vecadd: invalid contract: block.min: unknown key (allowed: exact, max_threads)"),
    ("dynamic_smem", {"maximum": 3}, "vecadd: invalid contract: dynamic_smem.maximum: unknown key (allowed: exact, max)"),
    ("dynamic_smem", {"max": -1}, "vecadd: invalid contract: dynamic_smem.max: expected an integer in [0, "
                                  "1099511627776], got -1"),
    ("args", {}, "vecadd: invalid contract: args: expected an array, got an object"),
    ("args.0.dtype", "float33", "vecadd: invalid contract: args[0] ('a').dtype: unknown dtype 'float33' (expected one of "),
    ("args.0.dtype", None, "vecadd: invalid contract: args[0] ('a').dtype: missing (required)"),
    ("args.0.kind", "tensor", "vecadd: invalid contract: args[0] ('a').kind: unknown value 'tensor' (expected one of "
                              "array, scalar)"),
    ("args.0.access", "rw", "vecadd: invalid contract: args[0] ('a').access: unknown value 'rw' (expected one of read, "
                            "write, readwrite, atomic)"),
    ("args.0.layout", "c", "vecadd: invalid contract: args[0] ('a').layout: unknown value 'c' (expected one of any, C, F)"),
    ("args.0.abi", "ref", "vecadd: invalid contract: args[0] ('a').abi: unknown value 'ref' (expected one of pointer, "
                          "view)"),
    ("args.0.align", 3, "vecadd: invalid contract: args[0] ('a').align: expected 0 or a power of two, got 3"),
    ("args.0.ndim", 9, "vecadd: invalid contract: args[0] ('a').ndim: expected an integer in [-1, 8], got 9"),
    ("args.0.ndim", -1, "vecadd: invalid contract: args[0] ('a').abi: abi 'view' packs ndim extents and strides, so "
                        "ndim must be fixed (got -1)"),
    ("args.0.shape", [3], "vecadd: invalid contract: args[0] ('a').shape: unknown key (allowed: name, kind, dtype, ndim, "
                          "layout, align, access, abi, optional)"),
    ("args.2.ndim", 1, "vecadd: invalid contract: args[2] ('s').ndim: unknown key (allowed: name, kind, dtype)"),
    ("args.2.dtype", "c64", "vecadd: invalid contract: args[2] ('s').dtype: a scalar must be bool, an integer, f16, "
                            "bf16, f32 or f64, got 'c64'"),
    ("args.1.name", "a", "vecadd: invalid contract: args[1].name: duplicate argument name 'a'"),
    ("args.1.name", "2x", "vecadd: invalid contract: args[1].name: expected an identifier, got '2x'"),
    ("args.1.name", None, "vecadd: invalid contract: args[1].name: missing (required)"),
    ("requires", ["len(q) == 1"], "vecadd: invalid contract: requires[0]: 'len(q) == 1': unknown name 'q' "
                                  "(not an argument) (at column 5)"),
    ("requires", [3], "vecadd: invalid contract: requires[0]: expected a string, got a number"),
    ("inplace", [["a", "b"]], "vecadd: invalid contract: inplace[0][1]: 'b' is not an argument"),
    ("inplace", [["a", "s"]], "vecadd: invalid contract: inplace[0][1]: 's' is a scalar, expected an array argument"),
    ("inplace", [["a", "a"]], "vecadd: invalid contract: inplace[0]: a pair needs two different arguments, got 'a' twice"),
    ("inplace", [["a"]], "vecadd: invalid contract: inplace[0]: expected 2 elements, got 1"),
    ("grid_from", {"arg": "zz"}, "vecadd: invalid contract: grid_from.arg: 'zz' is not an argument"),
    ("grid_from", {"arg": "s"}, "vecadd: invalid contract: grid_from.arg: 's' is a scalar, expected an array argument"),
    ("grid_from", {"arg": "out", "per_thread": [0]}, "vecadd: invalid contract: grid_from.per_thread[0]: expected an "
                                                     "integer in [1, 1073741824], got 0"),
    ("grid_from", {"arg": "out", "step": 1}, "vecadd: invalid contract: grid_from.step: unknown key (allowed: arg, "
                                             "per_thread, tile, max_blocks_per_sm)"),
    ("grid_from", {"arg": "out", "tile": [0]}, "vecadd: invalid contract: grid_from.tile[0]: expected an integer in "
                                              "[1, 1099511627776], got 0"),
    ("grid_from", {"arg": "out", "tile": [4, 4]}, "vecadd: invalid contract: grid_from.tile: 'out' is declared 1-d, "
                                                 "the tile shape has 2 axes"),
    ("grid_from", {"arg": "out", "tile": [4], "per_thread": [1]}, "vecadd: invalid contract: grid_from: give "
                                                                  "per_thread (threads over elements) or tile"),
    ("grid_from", {"arg": "out", "max_blocks_per_sm": 2}, "vecadd: invalid contract: grid_from.max_blocks_per_sm: "
                                                          "only meaningful with a tile grid"),
    ("fault_sites", [{"id": 1}, {"id": 1}], "vecadd: invalid contract: fault_sites[1].id: duplicate fault site id 1"),
    ("fault_sites", [{"id": 1, "array": 7}], "vecadd: invalid contract: fault_sites[0].array: expected a string, got a number"),
    ("fault_sites", [{"file": "x"}], "vecadd: invalid contract: fault_sites[0].id: missing (required)"),
    ("tensor_maps", [{"arg": "s", "box": [64]}], "vecadd: invalid contract: tensor_maps[0].arg: 's' is a scalar"),
    ("tensor_maps", [{"arg": "zz", "box": [64]}], "vecadd: invalid contract: tensor_maps[0].arg: 'zz' is not an argument"),
    ("tensor_maps", [{"arg": "out"}], "vecadd: invalid contract: tensor_maps[0].box: missing (required)"),
    ("tensor_maps", [{"arg": "out", "box": [8, 8]}], "vecadd: invalid contract: tensor_maps[0].box: 'out' is declared "
                                                     "1-d, the box has 2 axes"),
    ("tensor_maps", [{"arg": "out", "box": [512]}], "vecadd: invalid contract: tensor_maps[0].box[0]: expected an "
                                                    "integer in [1, 256], got 512"),
    ("tensor_maps", [{"arg": "out", "box": [2]}], "vecadd: invalid contract: tensor_maps[0].box: the innermost box "
                                                  "extent must be a multiple of 16 bytes, got 8"),
    ("tensor_maps", [{"arg": "out", "box": [64], "swizzle": 128}], "vecadd: invalid contract: tensor_maps[0].box: the "
                                                                   "innermost box extent (256 bytes) exceeds the "
                                                                   "128-byte swizzle span"),
    ("tensor_maps", [{"arg": "out", "box": [8], "swizzle": 100}], "vecadd: invalid contract: tensor_maps[0].swizzle: "
                                                                  "expected 0, 32, 64 or 128 (bytes), got 100"),
    ("tensor_maps", [{"arg": "out", "box": [8], "mode": 1}], "vecadd: invalid contract: tensor_maps[0].mode: unknown "
                                                             "key (allowed: arg, box, swizzle)"),
]


@pytest.mark.parametrize("path,value,text", DEFINITION_ERRORS)
def test_definition_errors_name_the_field(path, value, text):
    with pytest.raises(bridge.ContractDefinitionError) as info:
        _native.Contract(mutated(path, value))
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(text), str(info.value)


def test_definition_error_carries_the_argument_position():
    with pytest.raises(bridge.ContractDefinitionError) as info:
        _native.Contract(mutated("args.1.dtype", "f33"))
    assert (info.value.kernel, info.value.arg, info.value.arg_name) == ("vecadd", 1, "out")


def test_grid_from_array_with_fewer_axes_than_the_domain_is_refused():
    text = mutated("domain", 2)
    with pytest.raises(bridge.ContractDefinitionError) as info:
        _native.Contract(text)
    assert str(info.value) == ("vecadd: invalid contract: grid_from.arg: 'out' is declared 1-d, fewer axes than the "
                               "2-d domain")


BAD_JSON = [
    ('{"kernel":"k","args":[],}', "expected a string key at line 1, column 25"),
    ('{"kernel":"k","args":[1,]}', "unexpected character ']'"),
    ('{"kernel":"k","args":[]} // c', "unexpected text after the JSON value"),
    ('{"kernel":"k","kernel":"j","args":[]}', 'duplicate key "kernel"'),
    ('{"kernel":"k","args":[],"min_cc":012}', "leading zero in number"),
    ('{"kernel":"k\\q","args":[]}', "invalid escape '\\q'"),
    ('{"kernel":"k\\ud800","args":[]}', "unpaired surrogate"),
    ('{"kernel":"k\n","args":[]}', "control character in string"),
    ('{"kernel":"k","args":[', "unexpected end of text"),
    ('{"kernel":"k","args":[]', "expected ',' or '}'"),
    ('{"kernel":tru,"args":[]}', "invalid literal"),
    ('[' * 100, "nesting deeper than 64 levels"),
    ('"k"', "contract: invalid contract: expected an object, got a string"),
    ('', "unexpected end of text"),
]


@pytest.mark.parametrize("text,why", BAD_JSON)
def test_malformed_json_is_a_definition_error(text, why):
    with pytest.raises(bridge.ContractDefinitionError) as info:
        _native.Contract(text)
    assert why in str(info.value), str(info.value)


def test_json_strings_with_escapes_and_unicode_round_trip():
    kernel = 'k\u00e9\U0001F600"\\\t\x01/'
    c = _native.Contract(json.dumps({"kernel": kernel, "args": [], "fault_sites": [
        {"id": 7, "file": "f\u2603.py", "line": 3, "text": 'y = "\\n"'}]}))
    assert c.kernel == kernel
    assert c.fault_sites[0]["file"] == "f\u2603.py" and c.fault_sites[0]["text"] == 'y = "\\n"'
    assert _native.Contract(c.to_json()).kernel == kernel
    assert json.loads(c.to_json())["kernel"] == kernel


names = st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True)
dtypes = st.sampled_from(["bool", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32", "f64"])


@st.composite
def contracts(draw):
    arg_names = draw(st.lists(names, min_size=1, max_size=6, unique=True))
    args = []
    for n in arg_names:
        if draw(st.booleans()):
            args.append({"name": n, "kind": "scalar", "dtype": draw(dtypes)})
        else:
            args.append({"name": n, "kind": "array", "dtype": draw(st.sampled_from(["any", "c64", "f8e4m3fn", "i32"])),
                         "ndim": draw(st.integers(1, 8)), "layout": draw(st.sampled_from(["any", "C", "F"])),
                         "align": draw(st.sampled_from([0, 1, 4, 16, 256])),
                         "access": draw(st.sampled_from(["read", "write", "readwrite", "atomic"])),
                         "abi": draw(st.sampled_from(["pointer", "view"]))})
    arrays = [a["name"] for a in args if a["kind"] == "array"]
    d = {"version": 1, "kernel": draw(names), "domain": 1, "args": args,
         "min_cc": draw(st.integers(0, 120)), "dynamic_smem": {draw(st.sampled_from(["exact", "max"])):
                                                               draw(st.integers(0, 1 << 20))}}
    if draw(st.booleans()):
        d["block"] = {"exact": draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))}
    if arrays:
        d["requires"] = [f"len({arrays[0]}) >= 0"]
        if len(arrays) > 1:
            d["inplace"] = [[arrays[0], arrays[1]]]
        d["grid_from"] = {"arg": arrays[-1], "per_thread": [draw(st.integers(1, 9))]}
    return d


@settings(max_examples=150, deadline=None)
@given(d=contracts())
@pytest.mark.slow
def test_random_contracts_round_trip(d):
    c = _native.Contract(json.dumps(d))
    text = c.to_json()
    assert _native.Contract(text).to_json() == text
    back = json.loads(text)
    assert back["args"] == d["args"] and back["kernel"] == d["kernel"] and back["min_cc"] == d["min_cc"]
