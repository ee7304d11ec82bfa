"""The five hand-kept C++ dtype lists agree with the one Python table, bridge/dtypes.py.

Read from the sources (interop_tests/package/cpp_dtype_lists.py), not through the built extension, so
a C++ edit without a rebuild is judged too, and the lists no binding exposes (kernel_contract.cuh,
intake_fast.cpp, kb_jax_ffi.cpp) are checked at all. Every disagreement is named as
`file: dtype: what differs`. Two lists legitimately cover a subset, stated here with the reason:
intake_fast.cpp lists the rows torch has (the `torch` column), kb_jax_ffi.cpp all but the types XLA
has no FFI DataType for (JAX_LACKS, itself checked against jaxlib's header where jaxlib is installed).
interop_tests/arrays/test_dtype_table.py checks the built extension's answers on top of this.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge import dtypes
from interop_tests.package import cpp_dtype_lists as cpp
from interop_tests.package.cpp_dtype_lists import ListNotFound

ROWS = tuple(dtypes.TABLE.values())
BY_ENUM = {row.cpp_enum: row for row in ROWS}
# Rows XLA's FFI has no DataType for (xla/ffi/api/c_api.h, XLA_FFI_DataType_*): from_xla cannot map them.
JAX_LACKS = {"f6e2m3fn": "XLA has no float6 DataType", "f6e3m2fn": "XLA has no float6 DataType"}
# The dtypes a launch can pass as a scalar: bool, the integers and the floats of 16 bits and more.
SCALARS = {r.name for r in ROWS if r.kind in ("bool", "int", "uint") or (r.kind == "float" and r.bits >= 16)}


def _named(by_enum: dict) -> dict:
    """Keys from C++ enumerators to contract names (an enumerator the table lacks keeps its spelling)."""
    return {BY_ENUM[e].name if e in BY_ENUM else f"<{e}>": v for e, v in by_enum.items()}


def compare(rel: str, what: str, want: dict, got: dict) -> list[str]:
    """`file: dtype: difference` lines between the table's view (`want`, by contract name) and the list."""
    out = []
    for name, value in want.items():
        if name not in got:
            out.append(f"{rel}: {name}: missing from {what}")
        elif got[name] != value:
            out.append(f"{rel}: {name}: {what} gives {got[name]!r}, bridge/dtypes.py says {value!r}")
    out += [f"{rel}: {name}: in {what} but not in bridge/dtypes.py (or not expected there)"
            for name in got if name not in want]
    return out


def _by_value(by_key: dict) -> dict:
    """{value: (its keys, sorted)} of a list read as {key: value}: a dtype listed twice shows both keys."""
    out: dict = {}
    for key, value in by_key.items():
        out[value] = tuple(sorted((*out.get(value, ()), key)))
    return out


def _kind(row: dtypes.DType) -> str:
    return row.kind if row.kind in ("float", "int", "uint") else "neither float nor integer"


def array_view_problems(text: str) -> list[str]:
    rel, av = cpp.ARRAY_VIEW, cpp.read_array_view(text)
    kinds = {e: next((k for k, members in av["kinds"].items() if e in members), "neither float nor integer")
             for e in av["order"]}
    return (compare(rel, "enum class DType", {r.name: r.cpp_enum for r in ROWS}, _named({e: e for e in av["order"]}))
            + compare(rel, "dtype_name", {r.name: r.name for r in ROWS}, _named(av["name"]))
            + compare(rel, "dtype_long_name", {r.name: r.long_name for r in ROWS}, _named(av["long_name"]))
            + compare(rel, "dtype_bits", {r.name: r.bits for r in ROWS}, _named(av["bits"]))
            + compare(rel, "dtype_itemsize", {r.name: r.itemsize for r in ROWS}, _named(av["itemsize"]))
            + compare(rel, "dtype_is_float/_signed_int/_unsigned_int", {r.name: _kind(r) for r in ROWS},
                      _named(kinds)))


def _library_name_problems(inp: dict, av: dict) -> list[str]:
    """dtype_from_library_name: every library spelling (long name, torch name) reaches its row."""
    lookup = {n: e for e, n in av["name"].items()} | {n: e for e, n in av["long_name"].items()}
    out = []
    for row in ROWS:
        for spelling in {row.long_name, *([row.torch] if row.torch else [])}:
            short = next((to + spelling[len(pre):] for pre, to in inp["prefixes"] if spelling.startswith(pre)),
                         spelling)
            if lookup.get(short) != row.cpp_enum:
                out.append(f"{cpp.INTAKE}: {row.name}: dtype_from_library_name({spelling!r}) reads "
                           f"{short!r}, which names {lookup.get(short, 'no dtype')}")
    return out


def intake_problems(text: str, array_view: str, dlpack_h: str) -> list[str]:
    rel, inp = cpp.INTAKE, cpp.read_intake(text, cpp.dlpack_codes(dlpack_h))
    with_ts = [r for r in ROWS if r.typestr]
    single = [f"{rel}: {r.name}: dtype_from_typestr takes '|' only for 8-bit types, bridge/dtypes.py "
              f"writes {r.typestr!r}" for r in with_ts if (r.typestr[0] == "|") != (r.bits == 8)]
    out_ts = _named(inp["typestr_out"])
    return (compare(rel, "dtype_from_dlpack", {r.name: ((r.dlpack_code, r.bits),) for r in ROWS},
                    _named(_by_value(inp["from_dlpack"])))
            + compare(rel, "dtype_to_dlpack", {r.name: r.dlpack_code for r in ROWS}, _named(inp["to_dlpack"]))
            + compare(rel, "kTypestrs (dtype_from_typestr)", {r.name: r.typestr[1:] for r in with_ts},
                      _named(inp["typestr_in"]))
            + compare(rel, "dtype_typestr (little-endian, big-endian)",
                      {r.name: (r.typestr, r.typestr.replace("<", ">")) for r in with_ts}, out_ts)
            + single + _library_name_problems(inp, cpp.read_array_view(array_view)))


def _holds_family(row: dtypes.DType) -> str:
    """How holds<T>(dt) recognises the C++ type of one element (kernel_contract.cuh)."""
    if row.kind in ("bool", "uint"):
        return row.kind
    if row.kind == "int":
        return "sint"
    if row.name in ("f32", "f64"):
        return "float"                        # exactly float / double
    return "cls" if row.bits >= 16 else "cls || uint"   # __half, float2, ...; fp8/6/4 storage bytes


def kernel_contract_problems(text: str) -> list[str]:
    rel, kc = cpp.KERNEL_CONTRACT, cpp.read_kernel_contract(text)
    return (compare(rel, "enum class dt", {r.name: r.cpp_enum for r in ROWS}, _named({e: e for e in kc["order"]}))
            + compare(rel, "KB__DT_<name> macros", {r.name: r.cpp_enum for r in ROWS},
                      {n: e for n, e in kc["macros"].items() if n != "any"})
            + compare(rel, "holds (C++ element type, size)", {r.name: (_holds_family(r), r.itemsize) for r in ROWS},
                      _named(kc["holds"]))
            + compare(rel, "scalar_dtype", {n: True for n in SCALARS}, _named(dict.fromkeys(kc["scalar"], True))))


def scalar_list_problems(contract_parse: str, scalar_pack: str, array_view: str) -> list[str]:
    out = []
    for where, members in cpp.read_scalar_lists(contract_parse, scalar_pack, cpp.read_array_view(array_view)).items():
        rel, what = where.split(" ", 1)
        out += compare(rel, what.strip("()"), {n: True for n in SCALARS}, _named(dict.fromkeys(members, True)))
    return out


def intake_fast_problems(text: str) -> list[str]:
    want = {r.name: (r.torch,) for r in ROWS if r.torch}          # subset: the types torch has
    return compare(cpp.INTAKE_FAST, "kDtypes (aoti_torch_dtype_<torch name>)", want,
                   _named(_by_value(cpp.read_intake_fast(text))))


def xla_name(row: dtypes.DType) -> str:
    """XLA's spelling of a dtype: PRED, S8..S64, U8..U64, F16, BF16, C64, F8E4M3FN, ..."""
    return "PRED" if row.kind == "bool" else ("S" + row.name[1:] if row.kind == "int" else row.name.upper())


def jax_ffi_problems(text: str) -> list[str]:
    want = {r.name: (xla_name(r),) for r in ROWS if r.name not in JAX_LACKS}
    return compare(cpp.JAX_FFI, "from_xla", want, _named(_by_value(cpp.read_jax_ffi(text))))


SRC = {rel: cpp.source(rel) for rel in (cpp.ARRAY_VIEW, cpp.INTAKE, cpp.KERNEL_CONTRACT, cpp.INTAKE_FAST,
                                        cpp.JAX_FFI, cpp.DLPACK_H, cpp.CONTRACT_PARSE, cpp.SCALAR_PACK)}
CHECKS = {
    cpp.ARRAY_VIEW: lambda s: array_view_problems(s[cpp.ARRAY_VIEW]),
    cpp.INTAKE: lambda s: intake_problems(s[cpp.INTAKE], s[cpp.ARRAY_VIEW], s[cpp.DLPACK_H]),
    cpp.KERNEL_CONTRACT: lambda s: kernel_contract_problems(s[cpp.KERNEL_CONTRACT]),
    cpp.INTAKE_FAST: lambda s: intake_fast_problems(s[cpp.INTAKE_FAST]),
    cpp.JAX_FFI: lambda s: jax_ffi_problems(s[cpp.JAX_FFI]),
    cpp.SCALAR_PACK: lambda s: scalar_list_problems(s[cpp.CONTRACT_PARSE], s[cpp.SCALAR_PACK], s[cpp.ARRAY_VIEW]),
}


@pytest.mark.parametrize("where", list(CHECKS))
def test_cpp_dtype_list_agrees_with_the_python_table(where):
    problems = CHECKS[where](SRC)
    assert not problems, "C++ dtype lists disagree with bridge/dtypes.py (docs/contributing.md, " \
                         "'A new dtype'):\n" + "\n".join(problems)


def _edited(rel: str, old: str, new: str) -> dict[str, str]:
    assert SRC[rel].count(old) == 1, f"{rel}: the edit's anchor {old!r} must occur once"
    return {**SRC, rel: SRC[rel].replace(old, new)}


@pytest.mark.parametrize("rel,old,new,message", [
    (cpp.ARRAY_VIEW, "case DType::f4e2m1fn: return 4;", "case DType::f4e2m1fn: return 8;",
     f"{cpp.ARRAY_VIEW}: f4e2m1fn: dtype_bits gives 8, bridge/dtypes.py says 4"),
    (cpp.ARRAY_VIEW, '"float8_e5m2fnuz";', '"float8_e5m2_fnuz";',
     f"{cpp.ARRAY_VIEW}: f8e5m2fnuz: dtype_long_name gives 'float8_e5m2_fnuz', bridge/dtypes.py says "
     "'float8_e5m2fnuz'"),
    (cpp.INTAKE, "case DType::f8e3m4: code = kDLFloat8_e3m4;", "case DType::f8e3m4: code = kDLFloat8_e4m3;",
     f"{cpp.INTAKE}: f8e3m4: dtype_to_dlpack gives 8, bridge/dtypes.py says 7"),
    (cpp.INTAKE, '{"c16", kb::DType::c128}', "", f"{cpp.INTAKE}: c128: missing from kTypestrs"),
    (cpp.KERNEL_CONTRACT, "#define KB__DT_f8e8m0fnu ::kb::contract_detail::dt::f8e8m0fnu\n", "",
     f"{cpp.KERNEL_CONTRACT}: f8e8m0fnu: missing from KB__DT_<name> macros"),
    (cpp.KERNEL_CONTRACT, "case dt::u16: return uint && sizeof(U) == 2;",
     "case dt::u16: return uint && sizeof(U) == 4;",
     f"{cpp.KERNEL_CONTRACT}: u16: holds (C++ element type, size) gives ('uint', 4), bridge/dtypes.py says "
     "('uint', 2)"),
    (cpp.INTAKE_FAST, '{"float8_e8m0fnu", kb::DType::f8e8m0fnu}', '{"float8_e8m0fnu", kb::DType::f8e5m2}',
     f"{cpp.INTAKE_FAST}: f8e5m2: kDtypes (aoti_torch_dtype_<torch name>) gives "
     "('float8_e5m2', 'float8_e8m0fnu')"),
    (cpp.JAX_FFI, "    case ffi::DataType::F8E3M4: return kb::DType::f8e3m4;\n", "",
     f"{cpp.JAX_FFI}: f8e3m4: missing from from_xla"),
    (cpp.SCALAR_PACK, "case DType::f64: {\n      double d", "case DType::c128: {\n      double d",
     f"{cpp.SCALAR_PACK}: f64: missing from pack_scalar"),
], ids=["bits", "long-name", "dlpack-code", "typestr", "macro", "holds", "torch", "xla", "pack"])
def test_a_disagreeing_entry_is_named_with_its_file_and_dtype(rel, old, new, message):
    problems = CHECKS[rel](_edited(rel, old, new))
    assert any(p.startswith(message) for p in problems), "\n".join(problems)


@pytest.mark.parametrize("rel,old,new,message", [
    (cpp.ARRAY_VIEW, "inline int dtype_bits(", "inline int dtype_width(", "cannot find dtype_bits"),
    (cpp.ARRAY_VIEW, "return b >= 8 ? b / 8 : 1;", "return (b + 7) / 8;", "dtype_itemsize: expected the code"),
    (cpp.INTAKE, "constexpr TypestrEntry kTypestrs[]", "constexpr TypestrEntry kTypestrTable[]",
     "cannot find kTypestrs"),
    (cpp.KERNEL_CONTRACT, "enum class dt {", "enum class dtype_t {", "cannot find enum class dt"),
    (cpp.INTAKE_FAST, "kDtypes[] = {", "kTorchDtypes[] = {", "cannot find kDtypes"),
    (cpp.JAX_FFI, "kb::DType from_xla(ffi::DataType t)", "kb::DType to_kb(ffi::DataType t)", "cannot find from_xla"),
    (cpp.JAX_FFI, "case ffi::DataType::F16: return kb::DType::f16;",
     "case ffi::DataType::F16: return kb::dtype_from_name(\"f16\");", "from_xla: cannot read the statement"),
], ids=["function", "rule", "array", "enum", "torch-array", "xla-switch", "xla-entry"])
def test_a_list_the_reader_cannot_find_or_read_fails(rel, old, new, message):
    with pytest.raises(ListNotFound, match=re.escape(f"{rel}: ") + ".*" + re.escape(message)):
        CHECKS[rel](_edited(rel, old, new))


def test_commented_out_entries_count_as_missing():
    edited = _edited(cpp.JAX_FFI, "    case ffi::DataType::BF16:", "    // case ffi::DataType::BF16:")
    assert f"{cpp.JAX_FFI}: bf16: missing from from_xla" in jax_ffi_problems(edited[cpp.JAX_FFI])


def test_jaxlib_still_has_no_datatype_for_the_rows_kb_jax_ffi_leaves_out():
    jax_ffi = pytest.importorskip("jax.ffi", reason="jaxlib not installed: cannot read XLA's FFI DataType list")
    header = Path(jax_ffi.include_dir()) / "xla" / "ffi" / "api" / "c_api.h"
    if not header.is_file():
        pytest.skip(f"jaxlib's FFI header {header} is missing")
    xla = set(re.findall(r"XLA_FFI_DataType_(\w+)\s*=", header.read_text(encoding="utf-8")))
    assert {"PRED", "BF16", "F8E4M3FN"} <= xla, f"{header}: DataType list not read"
    now_present = [f"{name} ({xla_name(dtypes.TABLE[name])})" for name in JAX_LACKS
                   if xla_name(dtypes.TABLE[name]) in xla]
    assert not now_present, f"XLA now has {now_present}: map them in {cpp.JAX_FFI} (from_xla) and drop " \
                            "them from JAX_LACKS"
    unknown = [xla_name(r) for r in ROWS if r.name not in JAX_LACKS and xla_name(r) not in xla]
    assert not unknown, f"{header} has no DataType {unknown}"
