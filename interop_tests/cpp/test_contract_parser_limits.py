"""The embedded-contract parsers of bridge/fatbin.py are bounded and linear: a contract nested deeper than
64 levels (the C++ reader's bound) is a ModuleFormatError, never a RecursionError; a PTX string-literal
initialiser is unescaped in linear time, and one or a contract over MAX_CONTRACT_BYTES is refused before
its checksum; an unterminated initialiser is refused at once, however many there are. Every module here
is made by hand (interop_tests/cpp/hand_made_modules.py): no nvcc needed."""
from __future__ import annotations

import json
import random
import time

import pytest

from bridge import fatbin
from bridge.contract import native_contract
from bridge.errors import ContractDefinitionError
from bridge.fatbin import MAX_CONTRACT_BYTES, ModuleFormatError, embedded_contracts
from interop_tests.cpp.hand_made_modules import (ESCAPE_STYLES, PTX_HEAD, contract_ptx, fatbin_with_ptx,
                                                 nested_json, ptx_literal)

WRAPS = ["ptx_brace", "ptx_string", "fatbin"]


def module(text: str, wrap: str, kernel: str = "k"):
    """`text` as kernel `kernel`'s contract, carried as `wrap` says, with the right checksum."""
    ptx = contract_ptx(kernel, text, "string" if wrap == "ptx_string" else "brace", random.Random(7))
    return fatbin_with_ptx(ptx.encode()) if wrap == "fatbin" else ptx


def elapsed(fn):
    t0 = time.perf_counter()
    try:
        return fn(), time.perf_counter() - t0
    except Exception as exc:  # noqa: BLE001 - returned for the caller's assertions
        return exc, time.perf_counter() - t0


def linear_budget(n: int) -> float:
    """Seconds a linear parse of `n` items may take on this machine now: 60x a Python loop of n table
    lookups timed here (so a loaded machine gets a larger budget), at least 1 s. The quadratic readers
    these tests replace took 3.4 s to minutes on an idle machine, far above either bound."""
    table = {k: k for k in range(256)}
    t0 = time.perf_counter()
    for k in range(n):
        table[k & 255]
    return max(1.0, 60 * (time.perf_counter() - t0))


# ------------------------------------------------------------------------------------ nesting depth
@pytest.mark.parametrize("wrap", WRAPS)
def test_a_contract_nested_5000_deep_is_a_module_format_error_not_a_recursion_error(wrap):
    with pytest.raises(ModuleFormatError, match=r"^k: the contract in the .* is nested 5000 levels deep, deeper "
                                                r"than the 64 levels a contract may have$"):
        embedded_contracts(module(nested_json("k", 5000), wrap))


def test_64_levels_parse_and_65_are_refused_as_the_cpp_reader_refuses_them():
    at_limit, past = nested_json("k", 64), nested_json("k", 65)
    assert embedded_contracts(module(at_limit, "ptx_brace")) == {"k": at_limit}
    with pytest.raises(ModuleFormatError, match="nested 65 levels deep"):
        embedded_contracts(module(past, "ptx_brace"))
    # the C++ reader (every contract's next stop): depth passes at 64 (the schema then names the key) ...
    with pytest.raises(ContractDefinitionError) as err:
        native_contract(at_limit, "k")
    assert "nesting deeper" not in str(err.value) and "nest: unknown key" in str(err.value)
    # ... and stops at 65, without recursing further even 100 000 levels down
    for text in (past, nested_json("k", 100_000)):
        with pytest.raises(ContractDefinitionError, match="nesting deeper than 64 levels"):
            native_contract(text, "k")


def test_brackets_and_escaped_quotes_inside_strings_are_not_nesting():
    text = nested_json("k", 3, decoys=4)          # 4 strings of 140 brackets, escaped quotes, backslashes
    assert text.count("[") > 256
    for wrap in WRAPS:
        assert embedded_contracts(module(text, wrap)) == {"k": text}


# ------------------------------------------------------------------------------------ string literals
def test_a_multi_megabyte_string_literal_is_refused_in_linear_time():
    data = b"A" * (1 << 20)
    literal = "\\x41" * len(data)                                  # 4 MiB of text
    ptx = (PTX_HEAD + f'.global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = "{literal}";\n'
           f".global .u64 {fatbin.CHECKSUM_SYMBOL_PREFIX}k = {fatbin.contract_checksum(data)};\n")
    got, seconds = elapsed(lambda: embedded_contracts(ptx))
    assert isinstance(got, ModuleFormatError), got
    assert str(got) == (f"__kb_contract_k: the PTX's string initialiser is longer than the {MAX_CONTRACT_BYTES} "
                        f"characters a contract of at most {MAX_CONTRACT_BYTES} bytes may take")
    assert seconds < linear_budget(len(data)), f"refusing a {len(ptx) >> 20} MB literal took {seconds:.2f} s"


def test_a_literal_of_a_million_escape_characters_parses_in_linear_time():
    """250 000 bytes, each written \\xHH: the old reader copied the rest of the literal at every escape
    (O(n^2): minutes); one split and one table lookup per escape take a fraction of a second."""
    text = json.dumps({"kernel": "k", "pad": "x" * (250_000 - 30)})
    data = text.encode()
    literal = "".join(f"\\x{b:02x}" for b in data)
    assert len(literal) < MAX_CONTRACT_BYTES
    ptx = (PTX_HEAD + f'.global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = "{literal}";\n'
           f".global .u64 {fatbin.CHECKSUM_SYMBOL_PREFIX}k = {fatbin.contract_checksum(data)};\n")
    got, seconds = elapsed(lambda: embedded_contracts(ptx))
    assert got == {"k": text}
    assert seconds < linear_budget(len(data)), f"a {len(literal)}-character literal took {seconds:.2f} s"


def test_twenty_thousand_unterminated_byte_lists_are_refused_at_the_first():
    """The old reader scanned to the end of the text from each of them (O(n^2)) and then ignored them."""
    ptx = PTX_HEAD + f".global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = {{65, 66, 67,\n" * 20_000
    got, seconds = elapsed(lambda: embedded_contracts(ptx))
    assert isinstance(got, ModuleFormatError), got
    assert str(got) == "__kb_contract_k: the PTX's initialiser has no closing '}'"
    assert seconds < linear_budget(20_000), f"took {seconds:.2f} s"


def test_an_unterminated_string_literal_is_refused_not_skipped():
    ptx = (PTX_HEAD + f'.global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = "{{\\"kernel\\": 1}} \\";\n'
           + ".visible .entry k() { ret; }\n" * 1000)
    with pytest.raises(ModuleFormatError, match=r"^__kb_contract_k: the PTX's string initialiser has no closing "
                                                r"'\"'$"):
        embedded_contracts(ptx)


@pytest.mark.parametrize("style", ESCAPE_STYLES)
def test_every_escape_style_gives_back_the_exact_bytes(style):
    text = json.dumps({"kernel": "k", "s": "tab\there \"q\" back\\slash \u00e9 \U0001F600 'x'"}, ensure_ascii=False)
    literal = ptx_literal(text.encode(), random.Random(3), (style,))
    ptx = (PTX_HEAD + f'.global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = "{literal}";\n'
           f".global .u64 {fatbin.CHECKSUM_SYMBOL_PREFIX}k = {fatbin.contract_checksum(text.encode())};\n")
    assert embedded_contracts(ptx) == {"k": text}


@pytest.mark.parametrize("escape, why", [("\\q", r"bad escape \\q"), ("\\8", r"bad escape \\8"),
                                         ("\\xg", r"bad escape \\x"), ("\\400", "escape out of byte range"),
                                         ("\\777", "escape out of byte range")])
def test_a_bad_escape_is_refused_by_name(escape, why):
    ptx = PTX_HEAD + f'.global .b8 {fatbin.CONTRACT_SYMBOL_PREFIX}k[] = "{{{escape}}}";\n'
    with pytest.raises(ModuleFormatError, match=rf"^__kb_contract_k: {why} in the PTX's string$"):
        embedded_contracts(ptx)


# ------------------------------------------------------------------------------------ size
def test_a_contract_longer_than_the_limit_is_refused_although_its_checksum_matches():
    text = json.dumps({"kernel": "k", "pad": "A" * MAX_CONTRACT_BYTES})
    with pytest.raises(ModuleFormatError, match=rf"^k: the contract in the PTX has {len(text)} bytes, more than "
                                                rf"the {MAX_CONTRACT_BYTES} a contract may have"):
        embedded_contracts(contract_ptx("k", text, "brace"))
