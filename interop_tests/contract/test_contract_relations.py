"""The `requires` relation language: parse-time errors, Python integer semantics, explained failures."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import bridge
from contract_support import BASE, arr, contract, desc, run, sca

ARGS = [arr("a", ndim=2), arr("b", ndim=-1, access="write"), sca("n", "i64"), sca("m", "i64"), sca("s", "f32")]


def rel_contract(*relations: str):
    return contract(ARGS, kernel="rel", requires=list(relations), grid_from={"arg": "a"})


def launch(c, a_shape=(6, 7), b_shape=(42,), n=3, m=4):
    args = [desc(a_shape, ptr=BASE), desc(b_shape, ptr=BASE + 0x100000), n, m, 1.0]
    return run(c, args)


BAD_RELATIONS = [
    ("len(q) == 3", "unknown name 'q' (not an argument)"),
    ("z == 3", "unknown name 'z' (not an argument)"),
    ("n.shape[0] == 3", "'n' is a scalar; .shape needs an array argument"),
    ("len(n) == 3", "'n' is a scalar; len() needs an array argument"),
    ("a == 3", "'a' is an array; use len(a), a.shape[k], a.size or a.ndim"),
    ("s == 3", "scalar 's' is float32; relations compute with integer scalars only"),
    ("a.shape[2] == 1", "axis 2 out of range for 'a', declared 2-d"),
    ("a.shape[-3] == 1", "axis -3 out of range for 'a', declared 2-d"),
    ("a.strides == 1", "unknown attribute '.strides'"),
    ("a.shape < b.shape", "tuples can only be compared with == or !=, got '<'"),
    ("a.shape == 3", "cannot compare a tuple with an integer"),
    ("a.shape + 1 == 3", "arithmetic needs integers, got a tuple 'a.shape'"),
    ("n / 2 == 1", "'/' is not integer division: use '//'"),
    ("n == 1 or m == 2", "only 'and' may combine relations"),
    ("n + 1", "a relation must be a comparison"),
    ("n == (m", "expected ')'"),
    ("n == m)", "unexpected ')'"),
    ("n ==", "unexpected end of relation"),
    ("n == 1 and m", "'and' needs comparisons on both sides, got 'm'"),
    ("(n == 1) == 1", "cannot compare a comparison '(n == 1)'"),
    ("n == 99999999999999999999", "integer literal too large"),
    ("n == 1x", "invalid integer literal"),
    ("n == $", "unexpected '$'"),
    ("(n, a.shape) == (1, 2)", "tuple elements must be integers, got 'a.shape'"),
    ("-" * 100000 + "n == 1", "expression nested too deeply"),
    ("(" * 100000 + "n == 1", "expression nested too deeply"),
]


@pytest.mark.parametrize("text,why", BAD_RELATIONS, ids=[t[:30] for t, _ in BAD_RELATIONS])
def test_bad_relation_is_a_definition_error_at_parse_time(text, why):
    with pytest.raises(bridge.ContractDefinitionError) as info:
        rel_contract(text)
    msg = str(info.value)
    assert msg.startswith(f"rel: invalid contract: requires[0]: '{text}': "), msg
    assert why in msg


def test_bad_relation_error_text_is_pinned():
    with pytest.raises(bridge.ContractDefinitionError) as info:
        rel_contract("len(a) == len(q)")
    assert str(info.value) == ("rel: invalid contract: requires[0]: 'len(a) == len(q)': unknown name 'q' "
                               "(not an argument) (at column 15)")


GOOD = [
    ("len(a) == 6", True), ("len(a) == 7", False),
    ("a.shape == (6, 7)", True), ("a.shape != (6, 7)", False), ("a.shape == (6, 7, 1)", False),
    ("b.shape == (42,)", True), ("b.shape == (a.size,)", True),
    ("a.size == len(b)", True), ("a.ndim == 2 and b.ndim == 1", True), ("a.ndim == 2 and b.ndim == 2", False),
    ("a.shape[-1] == 7", True), ("a.shape[0] * a.shape[1] == len(b)", True),
    ("len(b) // n == 14", True), ("len(b) % m == 2", True), ("-len(b) // m == -11", True),
    ("-len(b) % m == 2", True), ("len(b) % -m == -2", True), ("1 <= n < m <= 4", True), ("1 <= n < m < 4", False),
    ("(n + m) * 6 == len(b)", True), ("-(n - m) == 1", True), ("+n == 3", True), ("n == 3 and m >= 4 and m > n", True),
    ("n != 3", False), ("a.shape[0] >= 7", False), ("(len(a),) == (6,)", True),
]


@pytest.mark.parametrize("text,holds", GOOD)
def test_relation_evaluates_like_python(text, holds):
    c = rel_contract(text)
    if holds:
        launch(c)
    else:
        with pytest.raises(bridge.ShapeRelationError):
            launch(c)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(-10**12, 10**12), m=st.integers(-10**6, 10**6).filter(lambda v: v != 0),
       op=st.sampled_from(["//", "%", "+", "-", "*"]))
def test_arithmetic_matches_python_integers(n, m, op):
    expected = eval(f"{n} {op} {m}")
    c = rel_contract(f"n {op} m == {abs(expected)}" if expected >= 0 else f"n {op} m == -{-expected}")
    launch(c, n=n, m=m)
    wrong = rel_contract(f"n {op} m == {expected + 1}" if expected + 1 >= 0 else f"n {op} m == -{-(expected + 1)}")
    with pytest.raises(bridge.ShapeRelationError):
        launch(wrong, n=n, m=m)


def test_division_by_zero_is_a_relation_error_naming_the_argument():
    with pytest.raises(bridge.ShapeRelationError) as info:
        launch(rel_contract("len(b) // m == 1"), m=0)
    assert str(info.value) == ("rel: argument 'm' (#3): expected requires 'len(b) // m == 1' to evaluate, "
                               "got division by zero")


def test_overflow_is_a_relation_error():
    with pytest.raises(bridge.ShapeRelationError, match="integer overflow"):
        launch(rel_contract("n * m == 1"), n=2**62, m=4)


def test_axis_of_a_dynamic_ndim_array_out_of_range_at_launch():
    with pytest.raises(bridge.ShapeRelationError) as info:
        launch(rel_contract("b.shape[1] == 3"))
    assert "axis 1 out of range for a 1-d array" in str(info.value)
    assert info.value.arg_name == "b"


def test_failure_names_the_failing_comparison_and_its_terms():
    c = rel_contract("a.ndim == 2 and a.shape == (n, m)")
    with pytest.raises(bridge.ShapeRelationError) as info:
        launch(c, n=6, m=8)
    assert str(info.value) == ("rel: argument 'm' (#3): expected a.shape == (n, m) (requires 'a.ndim == 2 and "
                               "a.shape == (n, m)'), got a.shape = (6, 7), n = 6, m = 8")


def test_relations_without_arguments_name_no_argument():
    c = rel_contract("1 == 2")
    with pytest.raises(bridge.ShapeRelationError) as info:
        launch(c)
    assert str(info.value) == "rel: requires '1 == 2': expected 1 == 2, got false"
    assert info.value.arg is None
