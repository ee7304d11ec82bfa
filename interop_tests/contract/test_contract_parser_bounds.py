"""Contract text can neither crash the validator nor turn an error into an untyped one.

A relation's tree is bounded in depth for every node shape (left-deep `a + 0 + 0 ...` chains included,
not only parentheses) and in size, so no evaluator recurses without bound; every message built from
contract bytes stays valid UTF-8 (characters are never cut in half, invalid input is refused).
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import bridge
from bridge import _native

from contract_support import arr, contract, desc, run

ARGS = [{"name": "a", "kind": "array", "dtype": "f32", "ndim": 1}]


def rel_contract(*requires: str):
    return contract([arr("a")], kernel="k", requires=list(requires))


def run_python(code: str) -> subprocess.CompletedProcess:
    """A reproducer in its own interpreter: a crash is a failed assertion here, not a dead test runner."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_long_left_deep_relation_is_a_definition_error_not_a_crash_in_a_fresh_process():
    code = (
        "from bridge import _native\n"
        "try:\n"
        "    c = _native.Contract('{\"kernel\":\"k\",\"args\":[{\"name\":\"a\",\"kind\":\"array\",\"dtype\":\"f32\","
        "\"ndim\":1}],\"requires\":[\"len(a)' + ' + 0' * 20000 + ' == len(a)\"]}')\n"
        "    _native.validate(c, [_native.ArrayDesc(4096, [10])], grid=1, block=1)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, str(e)[-80:])\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("ContractDefinitionError ")
    assert "expression nested too deeply (more than 64 levels of operators)" in r.stdout


@pytest.mark.parametrize("chain", [" + 0", " * 1", " - 0", " // 1", " % 7"])
def test_left_deep_chains_of_every_operator_are_bounded_at_parse(chain):
    with pytest.raises(bridge.ContractDefinitionError, match=r"requires\[0\]: .*expression nested too deeply"):
        rel_contract("len(a)" + chain * 64 + " == len(a)")


def test_chains_within_the_bound_still_parse_and_evaluate():
    ok = rel_contract("len(a)" + " + 0" * 62 + " == len(a)")
    run(ok, [desc((10,))], grid=1, block=32)
    bad = rel_contract("len(a)" + " + 1" * 62 + " == len(a)")
    with pytest.raises(bridge.ShapeRelationError, match="len\\(a\\) = 10"):
        run(bad, [desc((10,))], grid=1, block=32)


def test_mixed_nesting_counts_operators_inside_parentheses_too():
    deep = "len(a)"
    for _ in range(40):
        deep = f"({deep} + 0) * 1"         # 80 operator levels, only 40 parentheses deep
    with pytest.raises(bridge.ContractDefinitionError, match="expression nested too deeply"):
        rel_contract(deep + " == len(a)")


def test_wide_relation_is_bounded_in_size():
    wide = " and ".join(["len(a) == len(a)"] * 1400)   # shallow, but more than 4096 nodes
    with pytest.raises(bridge.ContractDefinitionError, match=r"relation too long \(more than 4096 terms and operators\)"):
        rel_contract(wide)
    fine = " and ".join(["len(a) == len(a)"] * 1000)
    run(rel_contract(fine), [desc((3,))], grid=1, block=32)


# ---- UTF-8 -----------------------------------------------------------------------------------------------

def test_non_ascii_character_outside_a_string_is_named_whole():
    with pytest.raises(bridge.ContractDefinitionError) as info:
        _native.Contract("é")
    assert str(info.value) == "contract: invalid contract: JSON: unexpected character 'é' at line 1, column 1"


def test_json_columns_count_characters_not_bytes():
    with pytest.raises(bridge.ContractDefinitionError, match=r"unexpected character '€' at line 1, column 23$"):
        _native.Contract('{"kernel":"é€","args":€}')     # byte 27: é and € take 2 and 3 bytes


def test_invalid_utf8_bytes_are_refused_with_a_typed_error_showing_the_byte():
    for text, byte, col in [(b'{"kernel":"k\xff","args":[]}', r"\xff", 13),
                            (b'{"kernel":"\xc3","args":[]}', r"\xc3", 12),       # truncated sequence
                            (b'{"kernel":"\xed\xa0\x80","args":[]}', r"\xed", 12),  # encoded surrogate
                            (b'{"kernel":"\xc0\xaf","args":[]}', r"\xc0", 12)]:   # overlong form
        with pytest.raises(bridge.ContractDefinitionError) as info:
            _native.Contract(text)
        assert str(info.value) == f"contract: invalid contract: JSON: invalid UTF-8 (byte {byte}) at line 1, column {col}"


def test_relation_errors_cut_at_character_boundaries_and_count_characters():
    with pytest.raises(bridge.ContractDefinitionError) as info:
        rel_contract("len(a) == é")
    assert str(info.value).endswith("'len(a) == é': unexpected 'é' (at column 11)")
    with pytest.raises(bridge.ContractDefinitionError) as info:
        rel_contract("len(a) == 1 €")
    assert str(info.value).endswith("'len(a) == 1 €': unexpected '€' (at column 13)")


def test_non_ascii_kernel_and_fault_text_round_trip_into_launch_errors():
    c = _native.Contract(json.dumps({"kernel": "köln_€", "args": ARGS, "requires": ["len(a) == 3"],
                                     "fault_sites": [{"id": 1, "array": "a", "file": "ü.py", "line": 2,
                                                      "text": "x = a[i]  # ✓"}]}))
    assert c.kernel == "köln_€" and c.fault_sites[0]["text"] == "x = a[i]  # ✓"
    with pytest.raises(bridge.ShapeRelationError) as info:
        run(c, [desc((4,))], grid=1, block=32)
    assert info.value.kernel == "köln_€" and str(info.value).startswith("köln_€: argument 'a' (#0): ")
