"""The parameter lists of PTX `.entry` directives, read from the text (no CUDA needed).

A parameter is `.param [.align A] .type [.ptr [.space] [.align P]] name[[N]]`: its size is the type's
size times N, its alignment A (else the type's size); `.ptr` marks a pointer (P is its pointee's
alignment, which does not concern the parameter buffer). Triton writes `.ptr .global`, nvcc plain `.u64`.
"""
from __future__ import annotations

import re

from bridge.errors import ForeignKernelError
from bridge.foreign.params import Param
from bridge._ptx_text import ENTRY, strip_comments

__all__ = ["ptx_entries", "ptx_params"]

_TOKEN = re.compile(r"\.\w+|[A-Za-z_$%][\w$]*|\d+|\[|\]")
_TYPE = re.compile(r"\.(bf|[busf])(8|16|32|64|128)(x2)?")
_SIZES = {"8": 1, "16": 2, "32": 4, "64": 8, "128": 16}
_SPACES = {".global", ".const", ".local", ".shared"}


def _param(decl: str, entry: str, index: int) -> Param:
    tokens = _TOKEN.findall(decl)

    def bad() -> ForeignKernelError:
        return ForeignKernelError(f"{entry}: PTX parameter #{index} ({decl.strip()!r}) is not a "
                                  f"`.param [.align A] .type name[[N]]` declaration", kernel=entry, param=index)
    if not tokens or tokens[0] != ".param":
        raise bad()
    align = size = 0
    kind, pointer, count, k = "", False, 1, 1
    while k < len(tokens):
        t = tokens[k]
        if t == ".align" and k + 1 < len(tokens) and tokens[k + 1].isdigit():
            if not size:                    # before the type: the parameter's own alignment
                align = int(tokens[k + 1])
            k += 2
            continue
        if t == ".ptr":
            pointer = True
        elif t in _SPACES:
            pass
        elif _TYPE.fullmatch(t) and not size:
            m = _TYPE.fullmatch(t)
            size = _SIZES[m.group(2)] * (2 if m.group(3) else 1)
            kind = {"b": "b", "f": "f", "bf": "f", "s": "i", "u": "i"}[m.group(1)]
        elif t == "[" and k + 2 < len(tokens) and tokens[k + 1].isdigit() and tokens[k + 2] == "]":
            count = int(tokens[k + 1])
            k += 3
            continue
        elif not t.startswith(".") and not t.isdigit():
            pass                           # the parameter's name
        else:
            raise bad()
        k += 1
    if not size:
        raise bad()
    return Param(size * count, align or size, pointer=True if pointer else None,
                 kind=kind if count == 1 else "b")


def ptx_entries(ptx: str | bytes) -> dict[str, list[Param]]:
    """Every `.entry` of the PTX text and its parameters, in order."""
    text = ptx.decode("latin-1") if isinstance(ptx, (bytes, bytearray)) else ptx
    out: dict[str, list[Param]] = {}
    for m in ENTRY.finditer(strip_comments(text)):
        name, body = m.group(1), (m.group(3) or "").strip()
        decls = [d for d in body.split(",") if d.strip()] if body else []
        out[name] = [_param(d, name, i) for i, d in enumerate(decls)]
    return out


def ptx_params(ptx: str | bytes, name: str) -> list[Param]:
    """The parameters of entry `name`; ForeignKernelError listing the entries when there is none."""
    entries = ptx_entries(ptx)
    if name not in entries:
        raise ForeignKernelError(f"{name}: the PTX has no .entry {name!r} (it has: {', '.join(entries) or 'none'}; "
                                 f"extern \"C\" kernels keep their name, C++ ones are mangled)", kernel=name)
    return entries[name]
