"""Readers of the C++ dtype lists that must agree with bridge/dtypes.py (test_dtype_tables.py checks).

Each reader finds one list by the code around it (a function's switch, an array, an enum) and returns
it as Python data keyed by C++ enumerator. A list it cannot find, finds empty, or cannot read every
entry of raises ListNotFound naming the file and what it looked for: a renamed or reshaped list fails
the check instead of passing unread. Readers take the file's text, so a test can feed them an edited
copy and watch them fail.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARRAY_VIEW = "cpp/include/kernelbridge/array_view.hpp"
INTAKE = "cpp/native/intake.cpp"
KERNEL_CONTRACT = "cpp/include/kernelbridge/kernel_contract.cuh"
INTAKE_FAST = "cpp/native/intake_fast.cpp"
JAX_FFI = "cpp/jax/kb_jax_ffi.cpp"
DLPACK_H = "cpp/include/kernelbridge/dlpack/dlpack.h"
CONTRACT_PARSE = "cpp/include/kernelbridge/detail/contract_parse.hpp"
SCALAR_PACK = "cpp/include/kernelbridge/detail/scalar_pack.hpp"

_NOISE = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_CASES = re.compile(r"((?:\bcase\s+[\w:]+\s*:\s*)+)(.*?)(?=\bcase\s|\bdefault\s*:|\Z)", re.S)
_LABEL = re.compile(r"case\s+(?:[\w]+::)*(\w+)\s*:")


class ListNotFound(AssertionError):
    """A dtype list was not where the reader looks, or held something it cannot read."""


def source(rel: str) -> str:
    """The text of a repository file."""
    return (ROOT / rel).read_text(encoding="utf-8")


def strip_comments(text: str) -> str:
    """The code without comments (string and character literals kept), so commented-out entries count
    as absent."""
    return _NOISE.sub(lambda m: "" if m.group(0)[0] == "/" else m.group(0), text)


def block(text: str, head: str, rel: str, what: str) -> str:
    """The brace-balanced body after the first match of regex `head` (comments removed)."""
    code = strip_comments(text)
    m = re.search(head, code)
    start = code.find("{", m.end()) if m else -1
    if start < 0:
        raise ListNotFound(f"{rel}: cannot find {what} (looked for /{head}/ followed by a braced body)")
    depth = 0
    for i in range(start, len(code)):
        depth += {"{": 1, "}": -1}.get(code[i], 0)
        if depth == 0:
            return code[start + 1:i]
    raise ListNotFound(f"{rel}: {what}: the body opened at /{head}/ never closes")


def _nonempty(found: dict | list, rel: str, what: str) -> dict | list:
    if not found:
        raise ListNotFound(f"{rel}: {what} was found but no entry of it could be read")
    return found


def enumerators(text: str, head: str, rel: str, what: str) -> list[str]:
    """Enumerator names of an enum body (initialisers dropped), in order."""
    names = [e.split("=")[0].strip() for e in block(text, head, rel, what).split(",")]
    return _nonempty([n for n in names if n], rel, what)


def cases(body: str, rel: str, what: str) -> tuple[list[tuple[list[str], str]], str | None]:
    """The switch in a function body as ([labels], statement) groups and the default's statement (None without one).
    Labels keep only the last name (`DType::f32` -> `f32`, `kDLInt` -> `kDLInt`)."""
    body = block(body, r"\bswitch\s*\([^)]*\)", rel, f"{what}'s switch")
    default = re.search(r"\bdefault\s*:\s*(.*?;)", body, re.S)
    head = body[:default.start()] + body[default.end():] if default else body
    groups = [(_LABEL.findall(labels), stmt.strip()) for labels, stmt in _CASES.findall(head)]
    if len(re.findall(r"\bcase\s", head)) != sum(len(g[0]) for g in groups):
        raise ListNotFound(f"{rel}: {what}: some case labels could not be read")
    return _nonempty(groups, rel, what), default.group(1).strip() if default else None


def one_value(stmt: str, pattern: str, rel: str, what: str, labels: list[str]) -> str:
    """The single group of `pattern` in a case statement."""
    m = re.fullmatch(pattern, stmt, re.S)
    if not m:
        raise ListNotFound(f"{rel}: {what}: cannot read the statement of case {', '.join(labels)}: {stmt!r}")
    return m.group(1)


def switch_map(text: str, head: str, pattern: str, rel: str, what: str,
               default: str | None = None) -> dict[str, str]:
    """{case label: the one value `pattern` reads from its statement} of the switch in a function;
    `default`: the regex its default statement must match (None: no check)."""
    groups, dflt = cases(block(text, head, rel, what), rel, what)
    if default is not None and not re.fullmatch(default, dflt or ""):
        raise ListNotFound(f"{rel}: {what}: expected a default matching /{default}/, found {dflt!r}")
    out = {}
    for labels, stmt in groups:
        value = one_value(stmt, pattern, rel, what, labels)
        out.update((label, value) for label in labels)
    return out


def pairs(text: str, head: str, pattern: str, rel: str, what: str) -> list[tuple[str, ...]]:
    """Every match of `pattern` in the braced initialiser after `head`; strict: the initialiser's
    entries `{...}` must all match."""
    body = block(text, head, rel, what)
    found = re.findall(pattern, body)
    if len(found) != body.count("{"):
        raise ListNotFound(f"{rel}: {what}: {body.count('{')} entries but {len(found)} read by /{pattern}/")
    return _nonempty(found, rel, what)


def members(expr: str, order: list[str], known: dict[str, set[str]], rel: str, what: str) -> set[str]:
    """The enumerators a boolean expression over one dtype holds for. Terms (joined by ||): `t == E::x`,
    `(t >= E::a && t <= E::b)` (by enum order) and calls of the predicates in `known`."""
    out: set[str] = set()
    for term in re.split(r"\|\|", expr.strip().rstrip(";")):
        term = term.strip()
        while term.startswith("(") and term.endswith(")"):
            term = term[1:-1].strip()
        eq = re.fullmatch(r"\w+\s*==\s*(?:\w+::)*(\w+)", term)
        rng = re.fullmatch(r"\w+\s*>=\s*(?:\w+::)*(\w+)\s*&&\s*\w+\s*<=\s*(?:\w+::)*(\w+)", term)
        call = re.fullmatch(r"(\w+)\(\s*\w+\s*\)", term)
        if eq:
            out.add(eq.group(1))
        elif rng and rng.group(1) in order and rng.group(2) in order:
            out.update(order[order.index(rng.group(1)):order.index(rng.group(2)) + 1])
        elif call and call.group(1) in known:
            out |= known[call.group(1)]
        else:
            raise ListNotFound(f"{rel}: {what}: cannot read the term {term!r}")
    return out


def returned(text: str, head: str, rel: str, what: str) -> str:
    """The expression a one-statement function returns."""
    m = re.fullmatch(r"\s*return\s+(.*?);\s*", block(text, head, rel, what), re.S)
    if not m:
        raise ListNotFound(f"{rel}: {what}: expected a body of one return statement")
    return m.group(1)


def require(text: str, snippet: str, rel: str, what: str) -> None:
    """The code (comments removed, whitespace collapsed) contains `snippet`: a rule the reader relies
    on and does not parse (e.g. how itemsize follows from bits)."""
    flat = " ".join(strip_comments(text).split())
    if " ".join(snippet.split()) not in flat:
        raise ListNotFound(f"{rel}: {what}: expected the code `{snippet}`; it changed, so update "
                           "interop_tests/package/cpp_dtype_lists.py to read the new form")


def dlpack_codes(text: str) -> dict[str, int]:
    """DLDataTypeCode enumerator -> value, from the vendored dlpack.h."""
    body = block(text, r"typedef\s+enum\s*(?=\{[^{}]*\}\s*DLDataTypeCode\s*;)", DLPACK_H, "enum DLDataTypeCode")
    return _nonempty({k: int(v) for k, v in re.findall(r"(kDL\w+)\s*=\s*(\d+)U?", body)}, DLPACK_H,
                     "enum DLDataTypeCode")


# ------------------------------------------------------------------------------ the five lists
_Q = r'\{\s*"(\w+)"\s*,\s*kb::DType::(\w+)\s*\}'       # {"text", kb::DType::x}


def read_array_view(text: str) -> dict:
    """kb::DType (array_view.hpp): enumerators in order, name, long name, bits, itemsize, kind sets."""
    rel = ARRAY_VIEW
    order = enumerators(text, r"enum\s+class\s+DType\b[^{]*", rel, "enum class DType")
    if order[:1] != ["invalid"] or order[-2:] != ["any", "count_"]:
        raise ListNotFound(f"{rel}: enum class DType: expected `invalid` first and `any, count_` last, got {order}")
    order = order[1:-2]
    names = switch_map(text, r"char\s*\*\s*dtype_name\s*\(", r'return\s+"(\w+)"\s*;', rel, "dtype_name",
                       r'return\s+"invalid"\s*;')
    longs = switch_map(text, r"char\s*\*\s*dtype_long_name\s*\(", r'return\s+"(\w+)"\s*;', rel,
                       "dtype_long_name", r"return\s+dtype_name\(\s*t\s*\)\s*;")
    bits = switch_map(text, r"int\s+dtype_bits\s*\(", r"return\s+(\d+)\s*;", rel, "dtype_bits",
                      r"return\s+0\s*;")
    require(text, "int64_t dtype_itemsize(DType t) { int b = dtype_bits(t); return b >= 8 ? b / 8 : 1; }",
            rel, "dtype_itemsize")
    kinds: dict[str, set[str]] = {}
    for kind, fn in (("float", "dtype_is_float"), ("int", "dtype_is_signed_int"),
                     ("uint", "dtype_is_unsigned_int")):
        kinds[kind] = members(returned(text, rf"bool\s+{fn}\s*\(", rel, fn), order, {}, rel, fn)
    return {"order": order, "name": {e: n for e, n in names.items() if e != "any"},
            "long_name": {e: longs.get(e, names.get(e)) for e in order},   # default: dtype_name(t)
            "bits": {e: int(b) for e, b in bits.items()},
            "itemsize": {e: int(b) // 8 if int(b) >= 8 else 1 for e, b in bits.items()}, "kinds": kinds}


def _dlpack_in(text: str, codes: dict[str, int]) -> dict[tuple[int, int], str]:
    rel, what = INTAKE, "dtype_from_dlpack"
    require(text, "if (lanes != 1) return DType::invalid;", rel, what)
    groups, dflt = cases(block(text, r"DType\s+dtype_from_dlpack\s*\(", rel, what), rel, what)
    if not re.fullmatch(r"return\s+DType::invalid\s*;", dflt or ""):
        raise ListNotFound(f"{rel}: {what}: expected `default: return DType::invalid;`, found {dflt!r}")
    out = {}
    for labels, stmt in groups:
        if not re.fullmatch(r"return\s+(?:bits\s*==\s*\d+\s*\?\s*DType::\w+\s*:\s*)+DType::invalid\s*;", stmt):
            raise ListNotFound(f"{rel}: {what}: cannot read case {', '.join(labels)}: {stmt!r}")
        for label in labels:
            if label not in codes:
                raise ListNotFound(f"{rel}: {what}: case {label} is not a DLDataTypeCode of {DLPACK_H}")
            for b, e in re.findall(r"bits\s*==\s*(\d+)\s*\?\s*DType::(\w+)", stmt):
                out[(codes[label], int(b))] = e
    return out


def _typestr_out(text: str) -> dict[str, tuple[str, str]]:
    rel, what = INTAKE, "dtype_typestr"
    body = block(text, r"char\s*\*\s*dtype_typestr\s*\(", rel, what)
    arrays = {}
    for name, item in (("le", r'"([^"]*)"'), ("be", r'"([^"]*)"'), ("order", r"kb::DType::(\w+)")):
        m = re.search(rf"\b{name}\s*\[\s*\]\s*=\s*\{{(.*?)\}}", body, re.S)
        if not m:
            raise ListNotFound(f"{rel}: {what}: cannot find the array {name}[]")
        arrays[name] = re.findall(item, m.group(1))
    if not arrays["order"] or len({len(v) for v in arrays.values()}) != 1:
        raise ListNotFound(f"{rel}: {what}: le[], be[] and order[] must be non-empty and of one length: "
                           f"{ {k: len(v) for k, v in arrays.items()} }")
    return {e: (le, be) for e, le, be in zip(arrays["order"], arrays["le"], arrays["be"])}


def read_intake(text: str, codes: dict[str, int]) -> dict:
    """intake.cpp: DLPack codes both ways, typestrs both ways, the library-name prefixes."""
    rel = INTAKE
    require(text, "bits = static_cast<uint8_t>(kb::dtype_bits(t));", rel, "dtype_to_dlpack")
    to_code = switch_map(text, r"bool\s+dtype_to_dlpack\s*\(", r"code\s*=\s*(kDL\w+)\s*;\s*return\s+true\s*;",
                         rel, "dtype_to_dlpack", r"return\s+false\s*;")
    unknown = sorted(set(to_code.values()) - set(codes))
    if unknown:
        raise ListNotFound(f"{rel}: dtype_to_dlpack: {unknown} are not DLDataTypeCodes of {DLPACK_H}")
    require(text, "bool single_byte = kb::dtype_bits(e.t) == 8;", rel, "dtype_from_typestr")
    require(text, "if (order == '|' && !single_byte) return kb::DType::invalid;", rel, "dtype_from_typestr")
    require(text, "kb::DType t = kb::dtype_from_name(name);", rel, "dtype_from_library_name")
    return {"from_dlpack": _dlpack_in(text, codes), "to_dlpack": {e: codes[c] for e, c in to_code.items()},
            "typestr_in": {e: body for body, e in pairs(text, r"TypestrEntry\s+kTypestrs\s*\[\s*\]\s*=", _Q,
                                                         rel, "kTypestrs")},
            "typestr_out": _typestr_out(text),
            "prefixes": pairs(text, r"\bprefixes\s*\[\s*\]\s*=", r'\{\s*"(\w+)"\s*,\s*"(\w+)"\s*\}', rel,
                              "dtype_from_library_name's prefixes")}


_HOLDS = {r"return\s+is_bool\s*;": ("bool", 1), r"return\s+std::is_same<U,\s*float>::value\s*;": ("float", 4),
          r"return\s+std::is_same<U,\s*double>::value\s*;": ("float", 8)}


def _holds_entry(stmt: str, labels: list[str]) -> tuple[str, int] | None:
    for pattern, entry in _HOLDS.items():
        if re.fullmatch(pattern, stmt):
            return entry
    m = re.fullmatch(r"return\s+\(?\s*(sint|uint|cls|cls\s*\|\|\s*uint)\s*\)?\s*&&\s*sizeof\(U\)\s*==\s*(\d+)\s*;",
                     stmt)
    if m:
        return " ".join(m.group(1).split()), int(m.group(2))
    if labels == ["any"] and re.fullmatch(r"return\s+true\s*;", stmt):
        return None
    raise ListNotFound(f"{KERNEL_CONTRACT}: holds: cannot read case {', '.join(labels)}: {stmt!r}")


def read_kernel_contract(text: str) -> dict:
    """kernel_contract.cuh: enum dt, the KB__DT_<name> macros, holds() (C++ type per dtype), scalar_dtype."""
    rel = KERNEL_CONTRACT
    order = enumerators(text, r"enum\s+class\s+dt\b[^{]*", rel, "enum class dt")
    if order[-1:] != ["any"]:
        raise ListNotFound(f"{rel}: enum class dt: expected `any` last, got {order}")
    order = order[:-1]
    macros = dict(re.findall(r"#define\s+KB__DT_(\w+)\s+::kb::contract_detail::dt::(\w+)", strip_comments(text)))
    groups, dflt = cases(block(text, r"constexpr\s+bool\s+holds\s*\(\s*dt\s+d\s*\)", rel, "holds"), rel, "holds")
    holds: dict[str, tuple[str, int]] = {}
    for labels, stmt in groups:
        entry = _holds_entry(stmt, labels)
        holds.update((label, entry) for label in labels if entry is not None)
    fallback = _holds_entry(dflt or "", ["default"])
    holds.update((e, fallback) for e in order if e not in holds and fallback is not None)
    scalar = members(returned(text, r"constexpr\s+bool\s+scalar_dtype\s*\(\s*dt\s+d\s*\)", rel, "scalar_dtype"),
                     order, {}, rel, "scalar_dtype")
    return {"order": order, "macros": _nonempty(macros, rel, "the KB__DT_<name> macros"), "holds": holds,
            "scalar": scalar}


def read_intake_fast(text: str) -> dict[str, str]:
    """intake_fast.cpp: torch dtype name (aoti_torch_dtype_<name>) -> kb::DType enumerator."""
    require(text, 'std::string name = std::string("aoti_torch_dtype_") + d.first;', INTAKE_FAST, "kDtypes")
    return dict(pairs(text, r"\bkDtypes\s*\[\s*\]\s*=", _Q, INTAKE_FAST, "kDtypes"))


def read_jax_ffi(text: str) -> dict[str, str]:
    """kb_jax_ffi.cpp: XLA FFI DataType enumerator -> kb::DType enumerator (from_xla)."""
    return switch_map(text, r"DType\s+from_xla\s*\(\s*ffi::DataType", r"return\s+kb::DType::(\w+)\s*;", JAX_FFI,
                      "from_xla", r"return\s+kb::DType::invalid\s*;")


def read_scalar_lists(contract_parse: str, scalar_pack: str, av: dict) -> dict[str, set[str]]:
    """The other two scalar dtype lists: contract.hpp's validator (contract_parse.hpp, scalar_dtype_ok)
    and the packer (scalar_pack.hpp, pack_scalar's cases)."""
    known = {"dtype_is_signed_int": av["kinds"]["int"], "dtype_is_unsigned_int": av["kinds"]["uint"]}
    ok = members(returned(contract_parse, r"bool\s+scalar_dtype_ok\s*\(", CONTRACT_PARSE, "scalar_dtype_ok"),
                 av["order"], known, CONTRACT_PARSE, "scalar_dtype_ok")
    groups, dflt = cases(block(scalar_pack, r"int\s+pack_scalar\s*\(", SCALAR_PACK, "pack_scalar"), SCALAR_PACK,
                         "pack_scalar")
    if not re.fullmatch(r"return\s+0\s*;", dflt or ""):
        raise ListNotFound(f"{SCALAR_PACK}: pack_scalar: expected `default: return 0;`, found {dflt!r}")
    return {f"{CONTRACT_PARSE} (scalar_dtype_ok)": ok,
            f"{SCALAR_PACK} (pack_scalar)": {label for labels, _ in groups for label in labels}}
