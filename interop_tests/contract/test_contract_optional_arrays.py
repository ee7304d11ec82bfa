"""Optional arrays in the ONE contract: an array argument declared optional may be passed as None (the
kernel gets a null pointer and zero extents); anywhere else None is refused naming the argument.
Relations that name an array passed as None are skipped at that launch; nothing else about a None
argument is checked (dtype, layout, alignment, aliasing). The schema keeps "optional" only when true."""
from __future__ import annotations

import json

import pytest

import bridge
from bridge import _native
from bridge.contract import ArgSpec, LaunchContract

from interop_tests.contract.contract_support import arr, attrs, contract, desc, limits

OUT = 0x7F00_1000_0000


def _bias_contract(**kw) -> LaunchContract:
    return LaunchContract("affine", [ArgSpec.array("x", "f32"), ArgSpec.array("bias", "f32", optional=True),
                                     ArgSpec.array("out", "f32", access="write")],
                          block=128, grid_from="out", **kw)


def _validate(c, args, grid=None):
    return _native.validate(c if isinstance(c, _native.Contract) else c.native(), args, grid=grid,
                            limits=limits(), attrs=attrs())


# ------------------------------------------------------------------------------ schema
def test_optional_is_in_the_json_only_when_true_and_round_trips():
    c = _bias_contract(requires=["len(bias) == len(out)"])
    args = json.loads(c.to_json())["args"]
    assert "optional" not in args[0] and args[1]["optional"] is True
    assert json.loads(c.native().to_json())["args"][1]["optional"] is True
    assert c.native().args[1]["optional"] is True and "optional" not in c.native().args[0]
    again = LaunchContract.from_json(c.native().to_json())
    assert again == c and again.args[1].optional and not again.args[0].optional


@pytest.mark.parametrize("spec,field,why", [
    (arr("b", optional="yes"), "args[0] ('b').optional", "expected true or false, got a string"),
    ({"name": "s", "kind": "scalar", "dtype": "f32", "optional": True}, "args[0] ('s').optional",
     "unknown key (allowed: name, kind, dtype)"),
])
def test_malformed_optional_flags_are_definition_errors(spec, field, why):
    with pytest.raises(bridge.ContractDefinitionError) as info:
        contract([spec])
    assert f"{field}: {why}" in str(info.value)


def test_a_grid_is_never_derived_from_an_optional_array():
    with pytest.raises(bridge.ContractDefinitionError, match=r"grid_from.arg: 'out' is optional \(may be None\)"):
        contract([arr("out", access="write", optional=True)], grid_from={"arg": "out"})


def test_a_tensor_map_needs_a_required_array():
    with pytest.raises(bridge.ContractDefinitionError, match=r"tensor_maps\[0\].arg: 'a' is optional"):
        contract([arr("a", "f16", 2, optional=True)], tensor_maps=[{"arg": "a", "box": [64, 64]}])


def test_argspec_optional_must_be_a_bool():
    with pytest.raises(bridge.ContractDefinitionError, match="optional: expected True or False"):
        ArgSpec.array("b", "f32", optional=1)


# ------------------------------------------------------------------------------ validation
def test_none_is_accepted_for_an_optional_array_and_skips_relations_naming_it():
    c = _bias_contract(requires=["len(bias) == len(out)", "len(x) == len(out)", "bias.shape[0] > 1000000"])
    grid, _ = _validate(c, [desc((1000,)), None, desc((1000,), ptr=OUT)])
    assert grid == (8, 1, 1)


def test_relations_not_naming_the_none_array_are_still_checked():
    c = _bias_contract(requires=["len(x) == len(out)"])
    with pytest.raises(bridge.ShapeRelationError, match=r"affine: argument 'out' \(#2\): expected len\(x\) == "
                                                        r"len\(out\), got len\(x\) = 999, len\(out\) = 1000"):
        _validate(c, [desc((999,)), None, desc((1000,), ptr=OUT)])


def test_a_given_optional_array_is_checked_like_any_array():
    c = _bias_contract(requires=["len(bias) == len(out)"])
    with pytest.raises(bridge.DTypeError, match=r"argument 'bias' \(#1\): expected 1-D float32 array"):
        _validate(c, [desc((1000,)), desc((1000,), "f64", ptr=0x7F00_2000_0000), desc((1000,), ptr=OUT)])
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(bias\) = 10, len\(out\) = 1000"):
        _validate(c, [desc((1000,)), desc((10,), ptr=0x7F00_2000_0000), desc((1000,), ptr=OUT)])


def test_none_for_a_required_array_is_refused_naming_the_argument():
    c = _bias_contract()
    with pytest.raises(bridge.ArgumentKindError) as info:
        _validate(c, [None, None, desc((1000,), ptr=OUT)])
    assert str(info.value) == ("affine: argument 'x' (#0): expected 1-D float32 array (not optional: declare it "
                               "optional to allow None), got None")
    assert info.value.arg_name == "x" and info.value.arg == 0


def test_none_for_a_scalar_is_refused_naming_the_argument():
    c = contract([arr("out", access="write"), {"name": "n", "kind": "scalar", "dtype": "i32"}], kernel="fill")
    with pytest.raises(bridge.ArgumentKindError, match=r"fill: argument 'n' \(#1\): expected int32 scalar, got None"):
        _native.validate(c, [desc((4,)), None], grid=1, limits=limits(), attrs=attrs())


def test_none_takes_part_in_no_aliasing_check():
    """Two None arguments (both at address 0) overlap nothing, not even each other."""
    c = LaunchContract("two", [ArgSpec.array("a", "f32", access="write", optional=True),
                               ArgSpec.array("b", "f32", access="write", optional=True),
                               ArgSpec.array("out", "f32", access="write")], block=32)
    assert _validate(c, [None, None, desc((4,), ptr=OUT)], grid=1)[0] == (1, 1, 1)
