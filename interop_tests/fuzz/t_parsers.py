"""Fuzz targets `contract_depth` and `ptx_literal`: the bounded parsers of embedded contracts (bridge/fatbin.py).

`contract_depth`: contract JSON nested 1 to 100 000 levels (arrays and objects mixed), with decoy strings
full of brackets, escaped quotes and backslashes, sometimes truncated, unbalanced, with a stray quote
or bracket soup; carried in PTX (a byte list or a string literal) or in a fatbin, with a right, wrong
or missing checksum; or handed to the C++ reader (`bridge.contract.native_contract`). Oracle: an
unmutated contract with its right checksum comes back exactly when it nests at most 64 levels and is
refused as "nested N levels deep" otherwise; the C++ reader refuses it for its nesting exactly when it
nests more than 64 levels; a mutated one comes back only as the JSON it is.

`ptx_literal`: a contract written as a PTX string literal, each byte in an escape style drawn per input
(raw, \\xHH, \\xH, \\ooo, \\o, \\n \\t \\r \\\\ \\" \\'), from a few bytes to past MAX_CONTRACT_BYTES, mutated
with bad escapes (\\q, \\8, \\x without digits, \\400 to \\777), a NUL escape, a missing closing quote, a
checksum off by one. Oracle: an unmutated literal gives back the exact contract under the limit and is
refused saying so over it; a bad escape is refused by name. A literal of megabytes must end within
TIMEOUT (the old reader took minutes: O(n^2)).

Allowed: ModuleFormatError (ContractIntegrityError included) and, from the C++ reader,
ContractDefinitionError.
"""
from __future__ import annotations

import json
import random
from typing import Any

from interop_tests.fuzz.targets import Oracle

TIMEOUT = 8.0
INPUTS = 120         # a suite run's inputs (targets.py), for contract_depth and ptx_literal each
LIMIT_DEPTH = 64     # bridge.fatbin.MAX_CONTRACT_DEPTH, the C++ reader's bound
DEPTHS = [1, 2, 3, 5, 8, 20, 40, 63, 64, 65, 66, 70, 100, 300, 1000, 5000, 100_000]
DEPTH_MUTATIONS = [None] * 6 + ["truncate", "open", "close", "stray_quote", "soup"]
ESCAPE_MUTATIONS = ["\\q", "\\8", "\\xg", "\\x", "\\400", "\\777", "\\9"]


def variant(name: str) -> str:
    return "depth" if name == "contract_depth" else "literal"


# ------------------------------------------------------------------------------- generation
def generate(rng: random.Random, variant: str) -> dict:
    if variant == "depth":
        depth = rng.choice(DEPTHS)
        wraps = ["ptx_brace", "ptx_string", "fatbin", "native"] if depth < 5000 else ["ptx_brace", "native"]
        return {"depth": depth, "seed": rng.randrange(1 << 32), "decoys": rng.choice([0, 0, 1, 3]),
                "mutation": rng.choice(DEPTH_MUTATIONS), "wrap": rng.choice(wraps),
                "checksum": rng.choice(["right"] * 5 + ["wrong", "missing"])}
    r = rng.random()
    size = (rng.choice([0, 1, 2, 17, 100, 1000, 4096]) if r < 0.85 else rng.choice([20_000, 65_536]) if r < 0.96
            else rng.choice([(1 << 20) - 200, 1 << 20, (1 << 20) + 1, 3 << 20]))
    styles = rng.sample(["raw", "hex", "hex_upper", "hex_short", "octal", "octal_short", "named"], rng.randint(1, 4))
    return {"size": size, "seed": rng.randrange(1 << 32), "styles": styles,
            "mutation": rng.choice([None] * 6 + ["escape", "nul", "unterminated", "checksum"]),
            "escape": rng.choice(ESCAPE_MUTATIONS)}


# ------------------------------------------------------------------------------- contract_depth
def _mutate_json(text: str, mutation: str | None, rng: random.Random) -> str:
    if mutation is None:
        return text
    at = rng.randrange(len(text) + 1)
    if mutation == "truncate":
        return text[:at]
    if mutation == "open":
        return text[:at] + rng.choice("[{") + text[at:]
    if mutation == "close":
        return text[:at] + rng.choice("]}") + text[at:]
    if mutation == "stray_quote":
        return text[:at] + '"' + text[at:]
    soup = "".join(rng.choice('[]{}",:\\ 0') for _ in range(rng.randint(1, 40)))
    return text[:at] + soup + text[at:]


def _run_depth(spec: dict) -> str:
    from bridge.contract import native_contract
    from bridge.errors import ContractDefinitionError
    from bridge.fatbin import ModuleFormatError, embedded_contracts
    from interop_tests.cpp.hand_made_modules import contract_ptx, fatbin_with_ptx, nested_json
    rng = random.Random(spec["seed"])
    depth, clean = spec["depth"], spec["mutation"] is None
    text = _mutate_json(nested_json("k", depth, rng, spec["decoys"]), spec["mutation"], rng)
    if spec["wrap"] == "native":
        try:
            native_contract(text, "k")
        except ContractDefinitionError as exc:
            if clean and ("nesting deeper than 64 levels" in str(exc)) != (depth > LIMIT_DEPTH):
                raise Oracle(f"the C++ reader on a {depth}-level contract: {exc}") from None
            raise
        if clean:
            raise Oracle("the C++ reader accepted a contract with the unknown key 'nest'")
        return "native parsed"
    ptx = contract_ptx("k", text, "string" if spec["wrap"] == "ptx_string" else "brace", rng, spec["checksum"])
    module: Any = fatbin_with_ptx(ptx.encode()) if spec["wrap"] == "fatbin" else ptx
    trusted = spec["checksum"] == "right"
    try:
        got = embedded_contracts(module)
    except ModuleFormatError as exc:
        if clean and trusted and (depth <= LIMIT_DEPTH or f"nested {depth} levels deep" not in str(exc)):
            raise Oracle(f"a well-formed {depth}-level contract with its checksum: {exc}") from None
        raise
    if not trusted:
        raise Oracle(f"a contract with a {spec['checksum']} checksum came back: {got!r}"[:300])
    if got != {"k": text}:
        raise Oracle(f"came back different: {got!r}"[:300])
    if depth > LIMIT_DEPTH and clean:
        raise Oracle(f"a {depth}-level contract came back")
    if json.loads(text).get("kernel") != "k":      # what came back is JSON naming the kernel (depth <= 64)
        raise Oracle("came back without naming its kernel")
    return f"ok depth {depth}"


# ------------------------------------------------------------------------------- ptx_literal
_PAD_ALPHABET = 'abcXYZ019 {}[]":,\\\'\t\n\r\x01\x7f\u00e9\u20ac\U0001F600'


def _contract_parts(size: int, rng: random.Random) -> tuple[str, str, int, str]:
    """(prefix, block, count, suffix): the contract text prefix + block * count + suffix names kernel k
    and has about `size` bytes; its padding (JSON-escaped quotes, backslashes, control characters,
    non-ASCII) repeats one block, so the worker encodes megabytes fast. Every part starts with a
    character no escape can swallow ('{', 'z', '"'), so the parts' literals can be joined."""
    prefix, suffix = '{"kernel": "k", "pad": "', '"}'
    raw = "".join(rng.choice(_PAD_ALPHABET) for _ in range(min(max(size, 1), 4096)))
    block = "z" + json.dumps(raw, ensure_ascii=False)[1:-1]
    count = max(size - len(prefix) - len(suffix), 0) // len(block.encode())
    return prefix, block, count, suffix


def _run_literal(spec: dict) -> str:
    from bridge.fatbin import (CHECKSUM_SYMBOL_PREFIX, CONTRACT_SYMBOL_PREFIX, MAX_CONTRACT_BYTES,
                               ModuleFormatError, contract_checksum, embedded_contracts)
    from interop_tests.cpp.hand_made_modules import PTX_HEAD, ptx_literal
    rng = random.Random(spec["seed"])
    styles = tuple(spec["styles"])
    prefix, block, count, suffix = _contract_parts(spec["size"], rng)
    text = prefix + block * count + suffix
    data = text.encode("utf-8")
    parts = [ptx_literal(prefix.encode(), rng, styles), ptx_literal(block.encode(), rng, styles) * count,
             ptx_literal(suffix.encode(), rng, styles)]
    mutation, close = spec["mutation"], '"'
    if mutation == "escape":                 # at a boundary between two encoded bytes
        k = rng.randrange(4)
        parts.insert(k, spec["escape"] + ("g" if spec["escape"] == "\\x" else ""))
    elif mutation == "nul":
        parts.append("\\0")
    elif mutation == "unterminated":
        close = ""
    literal = "".join(parts)
    checksum = (contract_checksum(data) + (mutation == "checksum")) & ((1 << 64) - 1)
    ptx = (PTX_HEAD + f'.global .b8 {CONTRACT_SYMBOL_PREFIX}k[] = "{literal}{close};\n'
           f".global .u64 {CHECKSUM_SYMBOL_PREFIX}k = {checksum};\n")
    over = len(literal) > MAX_CONTRACT_BYTES
    try:
        got = embedded_contracts(ptx)
    except ModuleFormatError as exc:
        why = str(exc)
        if mutation is None and not over:
            raise Oracle(f"a well-formed {len(literal)}-character literal was refused: {why}"[:300]) from None
        if over and "longer than the" not in why:
            raise Oracle(f"a {len(literal)}-character literal was refused for another reason: {why}"[:300]) from None
        if mutation == "escape" and not over and "escape" not in why:
            raise Oracle(f"a bad escape {spec['escape']!r} was refused for another reason: {why}"[:300]) from None
        raise
    if over or mutation in ("escape", "unterminated", "checksum"):
        raise Oracle(f"came back although {'too long' if over else mutation}: {len(literal)} characters")
    if got != {"k": text}:
        raise Oracle(f"came back different: {str(got)[:200]}")
    return f"ok {len(literal)} characters"


# ------------------------------------------------------------------------------- the target
def warm() -> None:
    import bridge.contract  # noqa: F401
    import bridge.fatbin  # noqa: F401


def execute(spec: dict, variant: str) -> str:
    return _run_depth(spec) if variant == "depth" else _run_literal(spec)


def allowed(exc: BaseException, spec: dict, variant: str) -> bool:
    from bridge.errors import ContractDefinitionError
    from bridge.fatbin import ModuleFormatError
    return isinstance(exc, ModuleFormatError) or (variant == "depth" and isinstance(exc, ContractDefinitionError))
