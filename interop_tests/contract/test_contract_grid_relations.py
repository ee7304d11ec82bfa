"""Grid relations: `requires` may name the resolved launch (grid.x|y|z, block.x|y|z). The ONE native
parser reads them, the ONE validator checks them once the grid is known (given or derived), before
anything runs; a violation is a ShapeRelationError naming kernel, relation and values. The simulator
refuses the same launches (poisoned outputs stay unchanged); GPU twins launch for real."""
from __future__ import annotations

import json

import numpy as np
import pytest

import bridge
from bridge import _native
from bridge.contract import ArgSpec, LaunchContract
from dsl import DslCompileError, f32, i32, simt

from interop_tests.contract.contract_support import arr, attrs, contract, desc, limits

POISON = -7.0


def _partials(**kw) -> LaunchContract:
    return LaunchContract("reduce", [ArgSpec.array("a", "f32"), ArgSpec.array("partials", "f32", access="write")],
                          block=128, **kw)


def _validate(c, args, grid=None, block=None):
    return _native.validate(c if isinstance(c, _native.Contract) else c.native(), args, grid=grid, block=block,
                            limits=limits(), attrs=attrs())


# ------------------------------------------------------------------------------ parsing (one parser)
def test_launch_terms_parse_and_are_listed_in_the_relation_tree():
    c = _partials(requires=["grid.x == partials.shape[0]", "grid.x * block.x >= len(a)", "grid.y == 1"])
    tree = c.native().relation_trees[0]
    assert tree["operands"][0] == {"op": "grid", "text": "grid.x", "axis": 0}
    prod = c.native().relation_trees[1]["operands"][0]
    assert [k["op"] for k in prod["operands"]] == ["grid", "block"]
    assert c.native().relation_trees[2]["operands"][0]["axis"] == 1


@pytest.mark.parametrize("text,why", [
    ("grid.w == 1", "unknown attribute '.w' of the launch grid (expected grid.x, grid.y or grid.z)"),
    ("grid == 1", "'grid' alone is not a value; use grid.x, grid.y or grid.z"),
    ("block.shape == a.shape", "unknown attribute '.shape' of the launch block"),
    ("len(grid) == 1", "unknown name 'grid' (not an argument)"),
])
def test_malformed_launch_terms_are_contract_definition_errors(text, why):
    with pytest.raises(bridge.ContractDefinitionError, match="requires\\[0\\]") as info:
        _partials(requires=[text])
    assert why in str(info.value)


def test_an_argument_called_grid_keeps_its_array_terms():
    c = contract([arr("grid"), arr("out", access="write")], requires=["len(grid) == grid.x", "grid.shape[0] >= 1"])
    assert [t["operands"][0]["op"] for t in c.relation_trees] == ["len", "shape_k"]
    assert c.relation_trees[0]["operands"][1]["op"] == "grid"


def test_contract_json_with_grid_relations_round_trips():
    c = _partials(requires=["grid.x == len(partials)", "block.x % 32 == 0"], grid_from=None)
    again = LaunchContract.from_json(c.to_json())
    assert again == c and again.requires == c.requires
    assert json.loads(c.native().to_json())["requires"] == ["grid.x == len(partials)", "block.x % 32 == 0"]
    assert _native.Contract(c.native().to_json()).to_json() == c.native().to_json()


# ------------------------------------------------------------------------------ validation
def test_explicit_grid_that_matches_the_relation_is_accepted():
    c = _partials(requires=["grid.x == partials.shape[0]"])
    assert _validate(c, [desc((1000,)), desc((8,), ptr=0x7F00_1000_0000)], grid=8) == ((8, 1, 1), (128, 1, 1))


def test_explicit_grid_that_breaks_the_relation_is_refused_naming_relation_values_and_kernel():
    c = _partials(requires=["grid.x == partials.shape[0]"])
    with pytest.raises(bridge.ShapeRelationError) as info:
        _validate(c, [desc((1000,)), desc((8,), ptr=0x7F00_1000_0000)], grid=9)
    assert isinstance(info.value, bridge.LaunchContractError)
    assert str(info.value) == ("reduce: argument 'partials' (#1): expected grid.x == partials.shape[0], "
                               "got grid.x = 9, partials.shape[0] = 8")
    assert info.value.arg_name == "partials"


def test_relation_of_grid_and_block_against_an_extent():
    c = LaunchContract("cover", [ArgSpec.array("a", "f32"), ArgSpec.array("out", "f32", access="write")],
                       launch_bounds=1024, requires=["grid.x * block.x >= len(a)"])
    a, out = desc((1000,)), desc((1000,), ptr=0x7F00_1000_0000)
    assert _validate(c, [a, out], grid=4, block=256)[0] == (4, 1, 1)
    with pytest.raises(bridge.ShapeRelationError, match=r"expected grid.x \* block.x >= len\(a\), got grid.x = 3, "
                                                        r"block.x = 256, len\(a\) = 1000"):
        _validate(c, [a, out], grid=3, block=256)


def test_relation_of_the_launch_alone_names_the_relation():
    c = LaunchContract("warps", [ArgSpec.array("out", "f32", access="write")], launch_bounds=1024,
                       requires=["block.x % 32 == 0"])
    with pytest.raises(bridge.ShapeRelationError) as info:
        _validate(c, [desc((10,))], grid=1, block=48)
    assert str(info.value) == "warps: requires 'block.x % 32 == 0': expected block.x % 32 == 0, got block.x = 48"


def test_derived_grid_is_what_the_relation_sees():
    c = LaunchContract("per_elem", [ArgSpec.array("out", "f32", access="write"), ArgSpec.array("flags", "i32")],
                       block=256, grid_from="out", requires=["grid.x == len(flags)"])
    out = desc((1000,))
    assert _validate(c, [out, desc((4,), "i32", ptr=0x7F00_1000_0000)])[0] == (4, 1, 1)
    with pytest.raises(bridge.ShapeRelationError, match=r"got grid.x = 4, len\(flags\) = 5"):
        _validate(c, [out, desc((5,), "i32", ptr=0x7F00_1000_0000)])


def test_grid_relations_come_after_the_argument_checks():
    """A wrong dtype is reported as such, not as a relation on a grid that was never resolved."""
    c = _partials(requires=["grid.x == len(partials)"])
    with pytest.raises(bridge.DTypeError):
        _validate(c, [desc((10,), "f64"), desc((1,), ptr=0x7F00_1000_0000)], grid=1)


def test_an_empty_derived_grid_launches_nothing_and_checks_no_grid_relation():
    c = LaunchContract("per_elem", [ArgSpec.array("out", "f32", access="write")], block=256, grid_from="out",
                       requires=["grid.x >= 1"])
    assert _validate(c, [desc((0,))])[0] == (0, 1, 1)


# ------------------------------------------------------------------------------ DSL: SIMT requires=
@simt.kernel(block=64, requires=["grid.x == len(partials)"])
def block_sums(a: simt.Array[f32], partials: simt.DisjointSlice[f32]):
    with simt.unsafe():
        b = simt.blockIdx.x
        if simt.threadIdx.x == 0:
            acc = f32(0.0)
            for k in range(64):
                j = b * 64 + k
                if j < len(a):
                    acc += a[j]
            partials[b] = acc


def _expected_block_sums(a: np.ndarray, blocks: int) -> np.ndarray:
    x = np.zeros(blocks * 64, np.float64)
    x[:len(a)] = a
    return x.reshape(blocks, 64).sum(axis=1)


def test_simt_kernel_with_a_grid_relation_runs_on_the_simulator_against_numpy():
    a = np.linspace(-1.0, 2.0, 300, dtype=np.float32)
    partials = np.full(5, POISON, np.float32)
    block_sums.simulate(a, partials, grid=5)
    np.testing.assert_allclose(partials, _expected_block_sums(a.astype(np.float64), 5), rtol=1e-5)


def test_simt_kernel_refuses_a_grid_breaking_its_relation_and_writes_nothing():
    a = np.ones(300, np.float32)
    partials = np.full(5, POISON, np.float32)
    with pytest.raises(bridge.ShapeRelationError, match=r"block_sums: argument 'partials' \(#1\): expected grid.x "
                                                        r"== len\(partials\), got grid.x = 6, len\(partials\) = 5"):
        block_sums.simulate(a, partials, grid=6)
    np.testing.assert_array_equal(partials, np.full(5, POISON, np.float32))


def test_simt_requires_accepts_launch_terms_and_refuses_a_bare_grid_at_the_def():
    @simt.kernel(block=32, requires=["grid.x * block.x >= len(out)", "grid.y == 1"])
    def fine(out: simt.DisjointSlice[f32], n: i32):
        i = simt.thread.index_1d()
        out[i] = f32(n)
    assert "grid.x * block.x >= len(out)" in fine.contract(np.zeros(4, np.float32), 1).requires

    with pytest.raises(DslCompileError, match="names 'grid' alone"):
        @simt.kernel(block=32, requires=["grid == 1"])
        def bare(out: simt.DisjointSlice[f32]):
            i = simt.thread.index_1d()
            out[i] = f32(1.0)


@pytest.mark.gpu
def test_gpu_launch_with_a_grid_breaking_its_relation_is_refused_and_writes_nothing():
    a = bridge.from_host(np.ones(300, np.float32))
    partials = bridge.from_host(np.full(5, POISON, np.float32))
    with pytest.raises(bridge.ShapeRelationError, match="grid.x = 6"):
        block_sums(a, partials, grid=6)
    np.testing.assert_array_equal(partials.to_host(), np.full(5, POISON, np.float32))
    block_sums(a, partials, grid=5)
    np.testing.assert_allclose(partials.to_host(), _expected_block_sums(np.ones(300), 5), rtol=1e-6)
