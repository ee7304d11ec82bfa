"""numba kernels' contracts and ABI without numba or a GPU: the contract inferred from numba-typed
parameters (stand-ins with the attributes numba's types have), the wrap-time check against a PTX entry
written by hand in numba's layout (numba-cuda `_Kernel._prepare_args`: per array meminfo, parent,
nitems, itemsize, data, shape[ndim], strides[ndim] in bytes), and launches through NumbaKernel with a
launcher that runs the one native validator: the full argument tuple is numba's layout, and wrong
arguments are refused naming the user's argument and position."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from bridge import _native
from bridge.errors import (AliasingError, ArgumentCountError, ArgumentKindError, ContractDefinitionError, DTypeError,
                           ForeignKernelError, LayoutError, NdimError, ShapeRelationError)
from bridge.foreign.numba_jit import NumbaBuild, NumbaKernel, NumbaParam, _renamed, numba_contract, numba_params

from interop_tests.contract.contract_support import BASE, attrs, desc, limits

N = 1000 + 37
OUT = BASE + 0x10_0000


@dataclass(frozen=True)
class ArrayType:
    """What numba_params reads of a numba `types.Array`: str(dtype), ndim, layout, mutable."""

    dtype: str
    ndim: int
    layout: str
    mutable: bool = True


F32C = ArrayType("float32", 1, "C")
SAXPY_TYPES = ["float32", F32C, F32C, "int64"]
SAXPY_KW = dict(access={"x": "read"}, requires=["len(x) == n", "len(y) == n"], grid_from="y", block=256)


def _numba_style_ptx(name: str, types: list[str]) -> str:
    params = ",\n".join(f"\t.param .{t} {name}_param_{i}" for i, t in enumerate(types))
    return f".version 9.0\n.target sm_90\n.address_size 64\n\n.visible .entry {name}(\n{params}\n)\n{{\n\tret;\n}}\n"


# saxpy(a: float32, x: float32[::1], y: float32[::1], n: int64) as numba lays it out: 1 + 7 + 7 + 1
SAXPY_PTX_TYPES = ["f32"] + ["u64"] * 7 + ["u64"] * 7 + ["u64"]


def _saxpy_build(ptx_types=SAXPY_PTX_TYPES, **kw) -> NumbaBuild:
    params = numba_params("saxpy", ["a", "x", "y", "n"], SAXPY_TYPES)
    c = numba_contract("saxpy", params, **{**SAXPY_KW, **kw})
    return NumbaBuild(_numba_style_ptx("saxpy", ptx_types).encode(), "saxpy", c, params=tuple(params),
                      layouts={"x": "C", "y": "C"})


class ValidatingLauncher:
    """Stands in for the native Launcher: validates each launch (H200-like limits) and records it."""

    def __init__(self, contract) -> None:
        self.contract, self.calls = contract.native(), []

    def launch(self, args, grid, block, shared_mem, stream, keep_all=False, peer_access=False):
        resolved = _native.validate(self.contract, list(args), grid=grid, block=block, smem=shared_mem,
                                    limits=limits(), attrs=attrs())
        self.calls.append((tuple(args), resolved))


class StandInKernel:
    def __init__(self, name, contract) -> None:
        self.name, self.device, self.launcher = name, 0, ValidatingLauncher(contract)


def _kernel(build: NumbaBuild) -> NumbaKernel:
    return NumbaKernel._wrap(StandInKernel(build.name, build.contract), build)


# ------------------------------------------------------------------------------ contract inference
def test_each_array_becomes_numbas_five_plus_two_ndim_parameters_tied_to_it_by_relations():
    d = _saxpy_build().contract.to_dict()
    names = [a["name"] for a in d["args"]]
    assert names == ["a", "_kb_x_meminfo", "_kb_x_parent", "_kb_x_nitems", "_kb_x_itemsize", "x", "_kb_x_shape0",
                     "_kb_x_stride0", "_kb_y_meminfo", "_kb_y_parent", "_kb_y_nitems", "_kb_y_itemsize", "y",
                     "_kb_y_shape0", "_kb_y_stride0", "n"]
    by = {a["name"]: a for a in d["args"]}
    assert by["x"] == {"name": "x", "kind": "array", "dtype": "f32", "ndim": 1, "layout": "C", "align": 0,
                       "access": "read", "abi": "pointer"}
    assert by["y"]["access"] == "readwrite"                       # numba arrays are mutable unless readonly
    assert by["_kb_x_meminfo"]["optional"] is True and by["_kb_x_meminfo"]["abi"] == "pointer"
    assert by["_kb_x_stride0"] == {"name": "_kb_x_stride0", "kind": "scalar", "dtype": "i64"}
    assert by["a"]["dtype"] == "f32" and by["n"]["dtype"] == "i64"
    assert d["requires"][:2] == ["len(x) == n", "len(y) == n"]     # the user's relations first
    assert "_kb_x_nitems == x.size" in d["requires"] and "_kb_y_stride0 == 4" in d["requires"]


def test_byte_strides_are_relations_on_the_shape_for_c_and_fortran_order():
    params = numba_params("k", ["u", "v"], [ArrayType("float64", 3, "A"), ArrayType("int16", 2, "F")])
    req = numba_contract("k", params).to_dict()["requires"]
    assert "_kb_u_stride0 == 8 * u.shape[1] * u.shape[2]" in req          # A: narrowed to C order
    assert "_kb_u_stride1 == 8 * u.shape[2]" in req and "_kb_u_stride2 == 8" in req
    assert "_kb_v_stride0 == 2" in req and "_kb_v_stride1 == 2 * v.shape[0]" in req
    f = numba_contract("k", params, layout={"u": "F"}).to_dict()
    assert "_kb_u_stride2 == 8 * u.shape[0] * u.shape[1]" in f["requires"]
    assert [a["layout"] for a in f["args"] if a["name"] in ("u", "v")] == ["F", "F"]


def test_readonly_arrays_are_read_and_cannot_be_widened():
    params = numba_params("k", ["x"], [ArrayType("float32", 1, "C", mutable=False)])
    assert [a for a in numba_contract("k", params).to_dict()["args"] if a["name"] == "x"][0]["access"] == "read"
    with pytest.raises(ForeignKernelError, match="parameter 'x'.*readonly.*'readwrite'"):
        numba_contract("k", params, access={"x": "readwrite"})


@pytest.mark.parametrize("types,match", [
    (["complex64"], "parameter 'p0'.*complex64.*scalars of bool"),
    (["Record(a[type=int32;offset=0])"], "parameter 'p0'.*Record"),
    ([ArrayType("float32", 1, "C"), "UniTuple(int64 x 2)"], "parameter 'p1'.*UniTuple"),
    ([ArrayType("Record(a)", 1, "C")], "parameter 'p0'.*arrays of bool"),
])
def test_types_numba_passes_differently_are_refused_naming_the_parameter(types, match):
    with pytest.raises(ForeignKernelError, match=match):
        numba_params("k", [f"p{i}" for i in range(len(types))], types)


def test_layout_any_and_mistyped_names_are_refused_when_the_contract_is_built():
    params = numba_params("k", ["x", "n"], [ArrayType("float32", 1, "A"), "int32"])
    with pytest.raises(ForeignKernelError, match="'x'.*layout 'any'.*strides in elements"):
        numba_contract("k", params, layout={"x": "any"})
    with pytest.raises(ForeignKernelError, match="'x'.*layout 'F'.*compiled it as layout 'C'"):
        numba_contract("k", numba_params("k", ["x"], [F32C]), layout={"x": "F"})
    for kw in ({"access": {"n": "read"}}, {"layout": {"q": "C"}}, {"grid_from": "n"}):
        with pytest.raises(ContractDefinitionError, match="is not an array parameter"):
            numba_contract("k", params, **kw)
    with pytest.raises(ForeignKernelError, match="2 argument type"):
        numba_params("k", ["x"], [F32C, "int32"])


# ------------------------------------------------------------------------------ the wrap-time check
def test_a_ptx_entry_in_numbas_layout_passes_the_wrap_time_check():
    _saxpy_build().check()
    half = numba_params("h", ["x", "s"], [F32C, "float16"])          # numba declares float16 scalars .u16
    NumbaBuild(_numba_style_ptx("h", ["u64"] * 7 + ["u16"]).encode(), "h", numba_contract("h", half),
               params=tuple(half), layouts={"x": "C"}).check()


def test_a_ptx_entry_that_is_not_numbas_layout_is_refused_naming_the_parameter():
    with pytest.raises(ForeignKernelError, match=r"the contract packs 16 kernel parameter\(s\), numba's PTX entry "
                                                 r"declares 15.*'n', i64 scalar"):
        _saxpy_build(SAXPY_PTX_TYPES[:-1]).check()
    with pytest.raises(ForeignKernelError, match=r"parameter #0 \('a', f32 scalar\).*an integer"):
        _saxpy_build(["u32"] + SAXPY_PTX_TYPES[1:]).check()
    with pytest.raises(ForeignKernelError, match=r"parameter #7 \('_kb_x_stride0', i64 scalar\).*8 bytes.*4 bytes"):
        _saxpy_build(SAXPY_PTX_TYPES[:7] + ["u32"] + SAXPY_PTX_TYPES[8:]).check()


# ------------------------------------------------------------------------------ launches
def test_a_launch_packs_numbas_fields_around_each_array_and_passes_the_validator():
    k = _kernel(_saxpy_build())
    x, y = desc((N,)), desc((N,), ptr=OUT)
    k(2.0, x, y, N)
    (args, (grid, block)), = k.kernel.launcher.calls
    # numba's own launcher passes: 0, 0, size, itemsize, pointer, shape..., byte strides...
    assert args == (2.0, None, None, N, 4, x, N, 4, None, None, N, 4, y, N, 4, N)
    assert grid == ((N + 255) // 256, 1, 1) and block == (256, 1, 1)


def test_two_d_arrays_get_c_or_fortran_byte_strides():
    params = numba_params("k", ["u", "v"], [ArrayType("float64", 2, "A"), ArrayType("int16", 2, "F")])
    c = numba_contract("k", params, layout={"u": "F"}, grid_from="v", block=128)
    b = NumbaBuild(b"", "k", c, params=tuple(params), layouts={"u": "F", "v": "F"})
    k = _kernel(b)
    u = desc((5, 7), "f64", strides=(8, 40))
    v = desc((5, 7), "i16", ptr=OUT, strides=(2, 10))
    k(u, v)
    args = k.kernel.launcher.calls[0][0]
    assert args == (None, None, 35, 8, u, 5, 7, 8, 40, None, None, 35, 2, v, 5, 7, 2, 10)
    with pytest.raises(LayoutError, match=r"argument 'u' \(#0\)"):     # C order where the contract says F
        k(desc((5, 7), "f64"), v)


@pytest.mark.parametrize("case,error,match", [
    ("dtype", DTypeError, r"argument 'x' \(#1\): expected 1-D C-contiguous float32"),
    ("length", ShapeRelationError, r"argument 'n' \(#3\): expected len\(x\) == n"),
    ("alias", AliasingError, r"argument 'y' \(#2\).*argument 'x' \(#1\)"),
    ("ndim", NdimError, r"argument 'y' \(#2\)"),
    ("strided", LayoutError, r"argument 'x' \(#1\)"),
])
def test_wrong_arguments_are_refused_naming_the_users_argument_and_position(case, error, match):
    k = _kernel(_saxpy_build())
    x, y = desc((N,)), desc((N,), ptr=OUT)
    bad = {"dtype": (2.0, desc((N,), "f64"), y, N), "length": (2.0, desc((N - 1,)), y, N),
           "alias": (2.0, y, y, N), "ndim": (2.0, x, desc((N, 1), ptr=OUT), N),
           "strided": (2.0, desc((N,), strides=(8,)), y, N)}[case]
    with pytest.raises(error, match=match) as info:
        k(*bad)
    assert info.value.arg == {"dtype": 1, "length": 3, "alias": 2, "ndim": 2, "strided": 1}[case]
    assert "#5" not in str(info.value) and "#12" not in str(info.value)   # not numba's parameter positions
    assert k.kernel.launcher.calls == []


def test_a_wrong_argument_count_names_the_kernels_parameters():
    k = _kernel(_saxpy_build())
    with pytest.raises(ArgumentCountError, match=r"saxpy: expected 4 arguments \(a, x, y, n\), got 3"):
        k(2.0, desc((N,)), N)


def test_an_object_without_a_shape_is_refused_by_the_validator_not_the_wrapper():
    k = _kernel(_saxpy_build())
    with pytest.raises(ArgumentKindError, match=r"saxpy: argument 'x' \(#1\): expected 1-D C-contiguous float32 "
                                                r"array, got object"):
        k(2.0, object(), desc((N,), ptr=OUT), N)
    assert NumbaParam("x", "f32", 1, "C").itemsize == 4 and k.kernel.launcher.calls == []


def test_numbas_mangled_entry_is_renamed_to_the_function_unless_the_name_is_taken():
    mangled = "_ZN8__main__3addB2v1B9cw51cXTLSE5ArrayIfLi1E1C7mutable7alignedE"
    ptx = (f".visible .entry {mangled}(\n\t.param .u64 {mangled}_param_0\n)\n{{\n\tld.param.u64 %rd1, "
           f"[{mangled}_param_0];\n\tadd.f32 %f1, %f1, %f1;\n\tret;\n}}\n")
    text, name = _renamed(ptx, mangled, "add")              # `add.f32` is an instruction, not a symbol
    assert name == "add" and mangled not in text and ".entry add(" in text and "[add_param_0]" in text
    taken = ptx + ".func add2();\n.global .u32 add;\n"
    assert _renamed(taken, mangled, "add") == (taken, mangled)
    assert _renamed(ptx, mangled, "<lambda>") == (ptx, mangled)
