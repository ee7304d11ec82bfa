"""C kernel signatures → launch contracts: `declare("void saxpy(float a, const float* x, float* y, int n)")`.

Why a parser of our own: a foreign kernel (a cubin exported by another system, a CuPy RawKernel's
source) comes with nothing but its C signature, and the contract must be as short to write from
Python as `KB_CONTRACT` is in C++ (docs/cpp.md). The rules are KB_ARRAY's: a pointer is a 1-D,
C-contiguous array of its element type passed as one raw pointer (`"abi": "pointer"`: a pointer cannot
follow strides), `const T*` is read, `T*` is written unless `access=` says otherwise; a value is a
scalar of its C type. Anything else (structs, `void*`, pointers to pointers, references, templates)
is a ContractDefinitionError naming the parameter, never a guess.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from bridge.contract import ArgSpec, LaunchContract
from bridge.errors import ContractDefinitionError
from bridge._ptx_text import strip_comments

__all__ = ["CParam", "CSignature", "parse_signature", "declare", "C_TYPES"]

# C spelling (after qualifiers are removed and words are joined by one space) -> contract dtype.
# `char` is signed on every CUDA host (x86-64, aarch64 Linux: nvcc follows the host), `long` is 64-bit
# (LP64 Linux; Windows' 32-bit long is not supported).
C_TYPES: dict[str, str] = {
    "bool": "bool", "_Bool": "bool",
    "char": "i8", "signed char": "i8", "unsigned char": "u8", "int8_t": "i8", "uint8_t": "u8",
    "short": "i16", "short int": "i16", "signed short": "i16", "signed short int": "i16",
    "unsigned short": "u16", "unsigned short int": "u16", "int16_t": "i16", "uint16_t": "u16",
    "int": "i32", "signed": "i32", "signed int": "i32", "unsigned": "u32", "unsigned int": "u32",
    "int32_t": "i32", "uint32_t": "u32",
    "long": "i64", "long int": "i64", "signed long": "i64", "unsigned long": "u64", "unsigned long int": "u64",
    "long long": "i64", "long long int": "i64", "signed long long": "i64", "unsigned long long": "u64",
    "unsigned long long int": "u64", "int64_t": "i64", "uint64_t": "u64", "size_t": "u64",
    "ptrdiff_t": "i64", "intptr_t": "i64", "uintptr_t": "u64",
    "__half": "f16", "half": "f16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16",
    "float": "f32", "double": "f64",
    "cuFloatComplex": "c64", "cuComplex": "c64", "cuDoubleComplex": "c128",
    "__nv_fp8_e4m3": "f8e4m3fn", "__nv_fp8_e5m2": "f8e5m2",
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "__grid_constant__"}
_SIGNED_WORDS = {"signed", "unsigned", "short", "long", "int", "char"}   # may come in any order
_HEAD = re.compile(r"""^\s*(?:extern\s*"C"\s*)?(?:(?:static|inline|__global__|__device__|__noinline__)\s+)*
                       (?:__launch_bounds__\s*\(\s*(?P<bounds>\d+)[^)]*\)\s*)?
                       void\s+(?:__launch_bounds__\s*\(\s*(?P<bounds2>\d+)[^)]*\)\s*)?
                       (?P<name>[A-Za-z_]\w*)\s*\((?P<params>[^()]*)\)\s*[;{]?\s*$""", re.X | re.S)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\*|&|\[|\]|\S")


@dataclass(frozen=True)
class CParam:
    """One parameter of a C signature: `pointer` (to one `dtype` element type, `const` or not) or a value."""

    name: str
    dtype: str
    pointer: bool
    const: bool


@dataclass(frozen=True)
class CSignature:
    """A parsed `void name(params)` kernel signature; `launch_bounds` from `__launch_bounds__(n)`, or None."""

    name: str
    params: tuple[CParam, ...]
    launch_bounds: int | None = None


def _base_type(words: list[str], kernel: str, where: str) -> str:
    """Contract dtype of the type words left after qualifiers and `*` (e.g. ['unsigned', 'int'])."""
    if len(words) > 1 and all(w in _SIGNED_WORDS for w in words):
        order = {"signed": 0, "unsigned": 0, "short": 1, "long": 1, "char": 2, "int": 3}
        words = sorted(words, key=lambda w: order[w])       # `int unsigned` == `unsigned int`
    key = " ".join(words)
    if key in C_TYPES:
        return C_TYPES[key]
    what = key or "no type"
    raise ContractDefinitionError(
        f"{kernel}: {where}: unsupported type '{what}'; supported: pointers to and values of "
        f"{', '.join(sorted(set(C_TYPES)))}", kernel=kernel)


def _param(text: str, index: int, kernel: str) -> CParam:
    tokens = _TOKEN.findall(text)
    where = f"parameter #{index} ({text.strip()!r})"
    if not tokens:
        raise ContractDefinitionError(f"{kernel}: parameter #{index} is empty", kernel=kernel)
    for bad, why in (("[", "array parameters (write a pointer)"), ("<", "templates")):
        if bad in tokens:
            raise ContractDefinitionError(f"{kernel}: {where}: {why} are not supported", kernel=kernel)
    name = tokens[-1]
    if not re.fullmatch(r"[A-Za-z_]\w*", name) or name in _QUALIFIERS or name in C_TYPES or name in _SIGNED_WORDS:
        raise ContractDefinitionError(f"{kernel}: {where}: expected a parameter name after its type "
                                      f"(a contract names every argument)", kernel=kernel)
    where = f"parameter '{name}' (#{index})"
    body = tokens[:-1]
    for bad, why in (("&", "references"), ("=", "default values"), ("struct", "structs"), ("class", "classes"), (":", "qualified names")):
        if bad in body:
            raise ContractDefinitionError(f"{kernel}: {where}: {why} are not supported", kernel=kernel,
                                          arg_name=name)
    stars = body.count("*")
    if stars > 1:
        raise ContractDefinitionError(f"{kernel}: {where}: pointers to pointers are not supported", kernel=kernel,
                                      arg_name=name)
    before = body[: body.index("*")] if stars else body
    words = [w for w in before if w not in _QUALIFIERS]
    if stars and words == ["void"]:
        raise ContractDefinitionError(f"{kernel}: {where}: 'void*' has no element type; declare the pointer's "
                                      f"element type (e.g. 'const float*')", kernel=kernel, arg_name=name)
    dtype = _base_type(words, kernel, where)
    return CParam(name, dtype, bool(stars), "const" in before)


def parse_signature(signature: str) -> CSignature:
    """Parse `[extern "C"] [__global__] void name(type name, ...)`; ContractDefinitionError naming the
    parameter for anything this module does not map to a contract argument."""
    if not isinstance(signature, str):
        raise TypeError(f"signature: expected C text such as 'void k(const float* x, int n)', "
                        f"got {type(signature).__name__}")
    m = _HEAD.match(strip_comments(signature))
    if m is None:
        raise ContractDefinitionError(f"signature: expected 'void name(type name, ...)' (a kernel returns void), "
                                      f"got {signature.strip()!r}")
    name = m.group("name")
    raw = m.group("params").strip()
    parts = [] if raw in ("", "void") else raw.split(",")
    params = tuple(_param(p, i, name) for i, p in enumerate(parts))
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise ContractDefinitionError(f"{name}: parameter '{p.name}' is named twice", kernel=name,
                                          arg_name=p.name)
        seen.add(p.name)
    bounds = m.group("bounds") or m.group("bounds2")
    return CSignature(name, params, int(bounds) if bounds else None)


def _check_names(kernel: str, what: str, given: Mapping[str, Any] | Iterable[str], names: set[str],
                 pointers_only: bool, pointers: set[str]) -> None:
    for key in given:
        if key not in names:
            raise ContractDefinitionError(f"{kernel}: {what}: no parameter named {key!r} (parameters: "
                                          f"{', '.join(sorted(names)) or 'none'})", kernel=kernel, arg_name=key)
        if pointers_only and key not in pointers:
            raise ContractDefinitionError(f"{kernel}: {what}: parameter {key!r} is a value, not a pointer",
                                          kernel=kernel, arg_name=key)


def arg_specs(sig: CSignature, *, access: Mapping[str, str] | None = None, ndim: Mapping[str, int] | None = None,
              layout: Mapping[str, str] | None = None, align: Mapping[str, int] | None = None,
              optional: Iterable[str] = ()) -> list[ArgSpec]:
    """The contract arguments of a parsed signature (pointers as pointer-ABI arrays, values as scalars)."""
    access, ndim, layout, align = dict(access or {}), dict(ndim or {}), dict(layout or {}), dict(align or {})
    optional = set(optional)
    names = {p.name for p in sig.params}
    pointers = {p.name for p in sig.params if p.pointer}
    for what, given in (("access", access), ("ndim", ndim), ("layout", layout), ("align", align),
                        ("optional", optional)):
        _check_names(sig.name, what, given, names, True, pointers)
    out = []
    for p in sig.params:
        if not p.pointer:
            out.append(ArgSpec.scalar(p.name, p.dtype))
            continue
        mode = access.get(p.name, "read" if p.const else "write")
        if p.const and mode != "read":
            raise ContractDefinitionError(f"{sig.name}: access: parameter {p.name!r} is a pointer to const, so "
                                          f"it can only be 'read', got {mode!r}", kernel=sig.name, arg_name=p.name)
        out.append(ArgSpec.array(p.name, p.dtype, ndim=ndim.get(p.name, 1), layout=layout.get(p.name, "C"),
                                 access=mode, align=align.get(p.name, 0), abi="pointer",
                                 optional=p.name in optional))
    return out


def declare(signature: str, *, requires: Iterable[str] = (), access: Mapping[str, str] | None = None,
            ndim: Mapping[str, int] | None = None, layout: Mapping[str, str] | None = None,
            align: Mapping[str, int] | None = None, optional: Iterable[str] = (), grid_from: str | None = None,
            block: int | tuple[int, ...] | None = None, launch_bounds: int | None = None,
            **contract: Any) -> LaunchContract:
    """The LaunchContract of a C kernel signature, as short as `KB_CONTRACT`:

        declare("void saxpy(float a, const float* x, float* y, int n)",
                requires=["len(x) == n", "len(y) == n"], access={"y": "readwrite"}, grid_from="y")

    Pointers are 1-D C-contiguous arrays of their element type (`ndim={"x": 2}` for more axes, `layout=`,
    `align=` in bytes, `optional=` names arrays that may be None); `const T*` is read, `T*` write
    unless `access=` says otherwise. `__launch_bounds__(n)` in the text gives `launch_bounds=n` unless
    `block=` (exact) is given. Other keywords are LaunchContract's (shared_mem, min_cc, inplace,
    per_thread, domain, grid_tile, ...)."""
    sig = parse_signature(signature)
    if launch_bounds is None and block is None:
        launch_bounds = sig.launch_bounds
    args = arg_specs(sig, access=access, ndim=ndim, layout=layout, align=align, optional=optional)
    if grid_from is not None:
        _check_names(sig.name, "grid_from", [grid_from], {p.name for p in sig.params}, True,
                     {p.name for p in sig.params if p.pointer})
    return LaunchContract(sig.name, args, block=block, launch_bounds=launch_bounds, requires=requires,
                          grid_from=grid_from, **contract)
