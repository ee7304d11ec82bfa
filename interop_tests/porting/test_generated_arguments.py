"""bridge.testing.arguments: launches generated from a kernel's contract are accepted by the validator
(every contract of the kernel zoo, the tile kernels and the package's C++ kernels), solve the
relations for sizes, and give values and layouts the contract allows."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import bridge
from bridge import _native
from bridge import testing as T
from bridge.testing._generate import Request
from bridge.contract import ArgSpec, LaunchContract
from bridge.fatbin import embedded_contracts
from interop_tests.dsl_tile import tile_kernels_lib as tiles
from interop_tests.kernels_zoo import ZOO

GENERIC = {"affine_f16": "f16", "affine_f32": "f32", "affine_f64": "f64", "affine_i32": "i32"}
TILE_CASES = {
    "add": (tiles.add, {}), "saxpy": (tiles.saxpy, {}), "softmax": (tiles.softmax, {}),
    "layernorm": (tiles.layernorm, {}), "transpose": (tiles.transpose, {}),
    "block_sum": (tiles.block_sum, {"constants": {"block": 256}}),
    "gemm": (tiles.gemm, {"constants": {"bk": 16}, "tile_shapes": {"c": (32, 32)}}),
}


def cpp_contracts() -> dict[str, _native.Contract]:
    out = {}
    for name in bridge.cpp_kernels.KERNELS:
        found = embedded_contracts(bridge.cpp_kernels.path(name).read_bytes())
        out[name] = _native.Contract(found[name])
    return out


def every_contract() -> dict[str, _native.Contract]:
    out = {f"zoo:{c.name}": T.contract_of(c.kernel, dtypes={"T": GENERIC.get(c.name, "f32")}) for c in ZOO}
    out.update({f"tile:{n}": T.contract_of(k, dtypes={"E": "f16"}, options=o) for n, (k, o) in TILE_CASES.items()})
    out.update({f"cpp:{n}": c for n, c in cpp_contracts().items()})
    return out


CONTRACTS = every_contract()
# contracts without grid_from derive no grid: a generated launch of one is validated with a given grid
ONE_BLOCK = (1, 1, 1)
SOFTMAX_ROWS = lambda s: (max(1, s["x"][0]),)           # noqa: E731 - legacy_softmax: a block per row


def validate(args: T.Arguments) -> None:
    """The real validator on the launch exactly as handed out (host memory standing in for device)."""
    limits, attrs = T._generate.host_limits()
    views = [bridge.asarray(v) if isinstance(v, np.ndarray) else v for v in args]
    _native.validate(args.contract, views, grid=args.grid,
                     block=None if args.grid is None and args.contract.block_exact else args.block,
                     limits=limits, attrs=attrs)


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_validator_accepts_every_generated_launch(name):
    contract = CONTRACTS[name]

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(T.strategy(contract, max_size=3000, grid=None if contract.grid_from else ONE_BLOCK))
    def check(args):
        validate(args)                                   # raises the typed error if not accepted
        for spec, value in zip(contract.args, args):
            if spec["kind"] == "array":
                assert bridge.dtypes.normalize(value.dtype) == spec["dtype"]
                assert spec["ndim"] < 0 or value.ndim == spec["ndim"]
                if spec["layout"] == "C":
                    assert value.flags.c_contiguous
                assert value.flags.writeable == (spec["access"] != "read")
            else:
                assert bridge.dtypes.normalize(np.asarray(value).dtype) == spec["dtype"]

    check()


def test_relations_are_solved_for_sizes_of_the_cpp_transpose():
    args = T.arguments(CONTRACTS["cpp:transpose"], size=2000, seed=11)
    rows, cols = args["in"].shape
    assert args["out"].shape == (cols, rows)
    assert (int(args["rows"]), int(args["cols"])) == (rows, cols)
    assert rows != cols                                 # distinct extents per axis catch transposes
    assert rows % 2 == 1 and cols % 2 == 1               # never a multiple of a block
    assert args.sizes == {"in": (rows, cols), "out": (cols, rows), "rows": rows, "cols": cols}


def _contract(requires, args=None, **kw):
    args = args or [ArgSpec.array("a", "f32", 1), ArgSpec.array("b", "f32", 1),
                    ArgSpec.array("out", "f32", 1, access="write"), ArgSpec.scalar("n", "i32")]
    return LaunchContract("k", args, block=128, requires=requires, grid_from="out", **kw)


@pytest.mark.parametrize("requires, check", [
    (["len(out) == len(a) + len(b)", "len(a) == n"],
     lambda s: s["out"][0] == s["a"][0] + s["b"][0] and s["n"] == s["a"][0]),
    (["len(a) % 8 == 0", "len(a) == len(out)"], lambda s: s["a"][0] % 8 == 0 and s["out"] == s["a"]),
    (["n <= len(a)", "n > 100", "len(b) == 2 * n + 1"],
     lambda s: 100 < s["n"] <= s["a"][0] and s["b"][0] == 2 * s["n"] + 1),
    (["out.size == n", "len(a) // 4 == len(b)"], lambda s: s["n"] == s["out"][0] and s["a"][0] // 4 == s["b"][0]),
    (["a.shape == (37,)", "len(out) == 3"], lambda s: s["a"] == (37,) and s["out"] == (3,)),
])
def test_relations_of_every_form_are_solved(requires, check):
    contract = _contract(requires)
    for seed in range(5):
        args = T.arguments(contract, size=500, seed=seed)
        validate(args)
        assert check(args.sizes), (requires, args.sizes)


def test_a_deliberately_wrong_relation_is_caught_by_the_validator():
    args = T.arguments(CONTRACTS["cpp:saxpy"], size=999, seed=3)
    wrong = json.loads(CONTRACTS["cpp:saxpy"].to_json())
    wrong["requires"] = ["len(x) == n", "len(y) == n + 1"]          # not what saxpy needs
    with pytest.raises(bridge.ShapeRelationError, match=r"len\(y\) == n \+ 1"):
        limits, attrs = T._generate.host_limits()
        _native.validate(_native.Contract(json.dumps(wrong)), list(args), limits=limits, attrs=attrs)


def test_contradictory_relations_are_an_unsatisfiable_contract_error():
    with pytest.raises(T.UnsatisfiableContractError, match=r"contradict.*'len\(a\) == 4'"):
        T.arguments(_contract(["len(a) == 3", "len(a) == 4"]))
    with pytest.raises(T.UnsatisfiableContractError, match=r"'len\(a\) \+ 1 == len\(b\) - len\(b\) - 1' failed"):
        T.arguments(_contract(["len(a) + 1 == len(b) - len(b) - 1"]))
    assert issubclass(T.UnsatisfiableContractError, bridge.ContractDefinitionError)


def test_edge_cases_one_and_empty_and_a_contract_that_forbids_empty():
    one = T.arguments(CONTRACTS["cpp:transpose"], edge="one", seed=1)
    assert one.sizes == {"in": (1, 1), "out": (1, 1), "rows": 1, "cols": 1}
    empty = T.arguments(CONTRACTS["cpp:saxpy"], edge="empty", seed=1)
    assert empty["x"].shape == (0,) and int(empty["n"]) == 0
    softmax = T.arguments(CONTRACTS["cpp:legacy_softmax"], edge="empty", seed=1, grid=SOFTMAX_ROWS)  # cols > 0
    assert softmax["x"].shape[0] == 0 and softmax["x"].shape[1] > 0
    with pytest.raises(T.UnsatisfiableContractError, match=r"k: found no empty launch \(some array of size 0\) that satisfies the contract "
                       r"\(relations \['len\(a\) > 0'.*the relations keep every array non-empty"):
        T.arguments(_contract(["len(a) > 0", "len(a) == len(b)", "len(b) == len(out)"]), edge="empty")


def test_values_are_non_zero_finite_and_in_range_for_every_dtype():
    names = ["f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool",
             "c64", "f8e4m3fn", "f8e5m2"]
    contract = LaunchContract("k", [ArgSpec.array(f"a_{d}", d, 1) for d in names] +
                              [ArgSpec.scalar(f"s_{d}", d) for d in ("f32", "i8", "u64", "bf16")], block=64)
    args = T.arguments(contract, size=4000, seed=5, layouts="contiguous", grid=ONE_BLOCK)
    for d in names:
        v = np.asarray(args[f"a_{d}"])
        if d == "bool":
            assert v.any() and not v.all()
            continue
        f = v.astype(np.complex128 if d.startswith("c") else np.float64)
        assert np.all(f != 0) and np.all(np.isfinite(f)), d
        if d[0] in "iu":
            assert np.all(np.abs(f) <= (10 if d.endswith("8") else 1000)), d
            assert d[0] == "u" or (f < 0).any(), d
    for d in ("f32", "i8", "u64", "bf16"):
        s = args[f"s_{d}"]
        assert bridge.dtypes.normalize(np.asarray(s).dtype) == d and float(s) != 0


def test_layouts_any_gets_strided_negative_and_fortran_views_layout_c_stays_contiguous():
    contract = LaunchContract("k", [ArgSpec.array("a", "f32", 2), ArgSpec.array("c", "f32", 2, layout="C"),
                                    ArgSpec.array("out", "f32", 2, access="write")],
                              domain=2, block=(16, 16), requires=["a.shape == c.shape", "a.shape == out.shape"],
                              grid_from="out")
    seen = set()
    for seed in range(40):
        args = T.arguments(contract, size=400, seed=seed)
        a = args["a"]
        seen.add(args.layouts["a"])
        if args.layouts["a"] == "reversed":
            assert a.strides[0] < 0 and a.strides[1] < 0
        if args.layouts["a"] == "strided":
            assert a.strides[1] == 2 * a.itemsize
        if args.layouts["a"] == "F":
            assert a.flags.f_contiguous and not a.flags.c_contiguous
        assert args["c"].flags.c_contiguous and args.layouts["c"] == "C"
    assert seen == {"C", "strided", "reversed", "F"}
    contiguous = T.arguments(contract, seed=1, layouts="contiguous")
    assert all(v.flags.c_contiguous for v in contiguous)
    for seed in range(20):   # torch views cannot have negative strides
        assert T._generate._layout_choice(T.contract_of(contract), Request(library="torch"), 0, (5, 7),
                                          np.random.default_rng(seed)) != "reversed"


def test_read_only_inputs_and_writable_outputs():
    args = T.arguments(CONTRACTS["cpp:saxpy"], seed=2)
    assert not args["x"].flags.writeable and args["y"].flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        args["x"][0] = 1
    assert T.arguments(CONTRACTS["cpp:saxpy"], seed=2, readonly=False)["x"].flags.writeable


def test_same_seed_same_launch_and_fresh_copies_keep_values():
    tiles_of_c = lambda s: (-(-s["c"][1] // 16), -(-s["c"][0] // 16))     # noqa: E731
    a = T.arguments(CONTRACTS["zoo:sgemm_tiled"], seed=42, grid=tiles_of_c)
    b = T.arguments(CONTRACTS["zoo:sgemm_tiled"], seed=42, grid=tiles_of_c)
    assert a.sizes == b.sizes and a.layouts == b.layouts
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert "seed=42" in a.replay() and a.replay().startswith("bridge.testing.arguments(")
    assert a.grid == tiles_of_c(a.sizes) and "grid=<the same grid>" in a.replay()
    fresh = a.fresh()
    assert fresh["c"] is not a["c"] and not np.shares_memory(fresh["c"], a["c"])
    np.testing.assert_array_equal(fresh["c"], a["c"])
    assert fresh["a"] is a["a"]                          # read-only inputs are shared
    assert T.arguments(CONTRACTS["zoo:vecadd"]).seed is not None   # an unseeded launch can be replayed


def test_a_contract_without_grid_from_gets_no_suggested_grid_only_the_given_one():
    with pytest.raises(T.GridNotDerivableError,
                       match=r"legacy_softmax: cannot derive a launch grid: the contract has no grid_from .*; pass grid="):
        T.arguments(CONTRACTS["cpp:legacy_softmax"], size=3000, seed=4)
    assert issubclass(T.GridNotDerivableError, bridge.GridSizeError)
    with pytest.raises(T.GridNotDerivableError, match=r"the contract has no grid_from"):
        T.suggested_grid(CONTRACTS["cpp:legacy_softmax"], [(3, 4), (3, 4)])
    args = T.arguments(CONTRACTS["cpp:legacy_softmax"], size=3000, seed=4, grid=SOFTMAX_ROWS)
    assert args.grid == (args["x"].shape[0],) and args.block == (256, 1, 1)
    assert T.arguments(CONTRACTS["cpp:legacy_softmax"], seed=4, grid=(7, 1, 1)).grid == (7, 1, 1)
    assert T.arguments(CONTRACTS["cpp:saxpy"], seed=4).grid is None      # grid_from: the validator derives it
    assert T.suggested_grid(CONTRACTS["cpp:saxpy"], [(5,), (5,)]) is None


def test_given_shapes_scalars_and_values_are_kept():
    bins = lambda rng, shape, dt: rng.integers(0, 37, shape).astype(dt)   # noqa: E731
    hist = T.contract_of(next(c.kernel for c in ZOO if c.name == "histogram"))
    args = T.arguments(hist, seed=3, shapes={"hist": (37,)}, values={"data": bins}, grid=ONE_BLOCK)
    assert args["hist"].shape == (37,)
    assert args["data"].min() >= 0 and args["data"].max() < 37
    s = T.arguments(CONTRACTS["cpp:saxpy"], seed=3, scalars={"n": 77})
    assert s["x"].shape == (77,) and int(s["n"]) == 77


def test_generic_and_tile_kernels_need_their_choice_and_bad_requests_are_typed_errors():
    affine = next(c.kernel for c in ZOO if c.name == "affine_f32")
    with pytest.raises(TypeError, match=r"affine: parameter 'x' has the generic dtype T: give dtypes=\{'T': \.\.\.\}"):
        T.arguments(affine)
    with pytest.raises(TypeError, match=r"block_sum: parameter 'block' is a tile.Constant"):
        T.arguments(tiles.block_sum)
    with pytest.raises(ValueError, match=r"edge: expected None, 'one' or 'empty', got 'tiny'"):
        T.arguments(CONTRACTS["cpp:saxpy"], edge="tiny")
    with pytest.raises(KeyError, match=r"shapes: no argument 'z'"):
        T.arguments(CONTRACTS["cpp:saxpy"], shapes={"z": (3,)})
    with pytest.raises(TypeError, match=r"expected a kernel with a launch contract .* got object"):
        T.arguments(object())
    with pytest.raises(ValueError, match=r"library: expected one of numpy, bridge, cupy, torch"):
        T.arguments(CONTRACTS["cpp:saxpy"], library="jax")
    with pytest.raises(ValueError, match=r"k: shapes: argument 'a' \(#0\): expected 1 non-negative extents, got \(3, 4\)"):
        T.arguments(_contract([]), shapes={"a": (3, 4)})
    with pytest.raises(ValueError, match=r"would take \d+ bytes .* ask for a smaller size"):
        T.arguments(CONTRACTS["cpp:saxpy"], scalars={"n": 2**31 - 1})


def test_native_contract_exposes_the_parsed_relation_trees():
    c = _native.Contract(json.dumps({"version": 1, "kernel": "k", "args": [
        {"name": "a", "kind": "array", "dtype": "f32", "ndim": 2}, {"name": "n", "kind": "scalar", "dtype": "i32"}],
        "requires": ["0 < n <= a.size - -1", "(a.shape[0], 3) == a.shape and n % 4 == 0"]}))
    chain, conj = c.relation_trees
    assert chain["op"] == "cmp" and chain["ops"] == ["<", "<="] and chain["text"] == "0 < n <= a.size - -1"
    lit, n, sub = chain["operands"]
    assert lit == {"op": "lit", "text": "0", "value": 0} and n == {"op": "scalar", "text": "n", "arg": "n"}
    assert sub["op"] == "sub" and sub["operands"][0] == {"op": "size", "text": "a.size", "arg": "a"}
    assert sub["operands"][1] == {"op": "neg", "text": "-1", "operands": [{"op": "lit", "text": "1", "value": 1}]}
    assert conj["op"] == "and" and [k["op"] for k in conj["operands"]] == ["cmp", "cmp"]
    tup = conj["operands"][0]["operands"][0]
    assert tup["op"] == "tuple" and tup["operands"][0] == {"op": "shape_k", "text": "a.shape[0]", "arg": "a", "axis": 0}
    assert c.requires == ["0 < n <= a.size - -1", "(a.shape[0], 3) == a.shape and n % 4 == 0"]
