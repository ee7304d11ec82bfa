"""Modules built by hand, without nvcc, for the embedded-contract parsers (bridge/fatbin.py): contract JSON
nested to a chosen depth, PTX carrying it as a `{...}` byte list or as a string literal with chosen
escapes, and a fatbin container holding that PTX. Used by test_contract_parser_limits.py and the
`contract_depth` / `ptx_literal` fuzz targets (interop_tests/fuzz/t_parsers.py)."""
from __future__ import annotations

import json
import random
import struct

from bridge.fatbin import (CHECKSUM_SYMBOL_PREFIX, CONTRACT_SYMBOL_PREFIX, contract_checksum,
                           ptx_contract_directives)

PTX_HEAD = ".version 8.0\n.target sm_90\n.address_size 64\n"
FATBIN_MAGIC = 0xBA55ED50
# every way the reader accepts to write one byte in a string literal (the byte is formatted in)
ESCAPE_STYLES = ("raw", "hex", "hex_upper", "hex_short", "octal", "octal_short", "named")
_NAMED = {10: "\\n", 9: "\\t", 13: "\\r", 92: "\\\\", 34: '\\"', 39: "\\'"}


def nested_json(kernel: str, depth: int, rng: random.Random | None = None, decoys: int = 0) -> str:
    """Contract-like JSON text naming `kernel` whose brackets nest exactly `depth` levels (>= 1: the top
    object is level 1), innermost a scalar; `decoys` strings full of brackets and escaped quotes, which
    are not structure and must not count."""
    rng = rng or random.Random(depth)
    kinds = [rng.choice("ao") for _ in range(depth - 1)]
    opens = "".join("[" if k == "a" else '{"n":' for k in kinds)
    closes = "".join("]" if k == "a" else "}" for k in reversed(kinds))
    decoy = json.dumps("[" * 70 + '"' + "{" * 70 + "\\")           # quotes and a backslash, escaped
    extra = "".join(f', "d{i}": {decoy}' for i in range(decoys))
    return f'{{"kernel": {json.dumps(kernel)}, "nest": {opens}0{closes}{extra}}}'


def ptx_literal(data: bytes, rng: random.Random, styles: tuple[str, ...] = ESCAPE_STYLES) -> str:
    """`data` as the body of a PTX string literal, each byte written in a style drawn from `styles` (a
    style that cannot write a byte falls back to hex; a short form is used only where the next
    character cannot extend it)."""
    out: list[str] = []
    for k, b in enumerate(data):
        nxt = chr(data[k + 1]) if k + 1 < len(data) else ""
        style = rng.choice(styles)
        if style == "raw" and 32 <= b < 127 and b not in (34, 92):
            out.append(chr(b))
        elif style == "named" and b in _NAMED:
            out.append(_NAMED[b])
        elif style == "octal":
            out.append(f"\\{b:03o}")
        elif style == "octal_short" and nxt not in "01234567":
            out.append(f"\\{b:o}")
        elif style == "hex_short" and nxt not in "0123456789abcdefABCDEF":
            out.append(f"\\x{b:x}")
        elif style == "hex_upper":
            out.append(f"\\x{b:02X}")
        else:
            out.append(f"\\x{b:02x}")
    return "".join(out)


def contract_ptx(kernel: str, text: str, form: str = "brace", rng: random.Random | None = None,
                 checksum: str = "right") -> str:
    """PTX carrying `text` for `kernel`: form "brace" (what kernelbridge writes) or "string" (a literal,
    escapes drawn by `rng`); checksum "right", "wrong" (off by one) or "missing"."""
    data = text.encode("utf-8")
    if form == "brace":
        body = ptx_contract_directives(kernel, text).splitlines(keepends=True)[0]
    else:
        literal = ptx_literal(data, rng or random.Random(len(data)))
        body = f'.global .align 1 .b8 {CONTRACT_SYMBOL_PREFIX}{kernel}[{len(data) + 1}] = "{literal}";\n'
    tail = ""
    if checksum != "missing":
        value = contract_checksum(data) + (checksum == "wrong")
        tail = f".global .align 8 .u64 {CHECKSUM_SYMBOL_PREFIX}{kernel} = {value & ((1 << 64) - 1)};\n"
    return PTX_HEAD + body + tail


def fatbin_with_ptx(ptx: bytes, arch: int = 90) -> bytes:
    """A fatbin container holding one uncompressed PTX entry (the layout bridge/fatbin.py documents)."""
    payload = ptx + b"\0" * (-len(ptx) % 8)
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, 1, 0x0101, 64, len(payload))   # kind 1 = PTX
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<Q", header, 56, len(ptx))
    entry = bytes(header) + payload
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entry)) + entry
