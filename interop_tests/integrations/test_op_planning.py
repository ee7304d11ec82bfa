"""Planning an op from a kernel (no torch or jax needed): which parameters are inputs and outputs, output
shapes from the contract's relations, and the refusals at op-creation time (typed, naming the kernel
and the argument by name and 0-based position)."""
from __future__ import annotations

import subprocess
import sys

import integration_kernels as K
import pytest

from bridge.errors import ContractDefinitionError, DTypeError, NdimError, ShapeRelationError
from dsl import f32, simt
from dsl.integrations._plan import OpPlan
from dsl.integrations._relations import derive_shapes
from interop_tests.kernels_zoo import sgemm_naive

API = "test"


def plan(kernel, **kw):
    return OpPlan(kernel, API, **kw)


def shapes(p, **arrays):
    named = dict(arrays)
    return p.output_shapes(named, {n: v for n, v in arrays.items() if isinstance(v, tuple)},
                           [arrays[q.name] for q in p.inputs])


def test_read_only_arrays_and_scalars_are_inputs_writable_arrays_outputs():
    p = plan(K.scale)
    assert [q.name for q in p.inputs] == ["x", "s"]
    assert [q.name for q in p.outputs] == ["out"]


def test_whole_shape_relation_gives_the_output_shape():
    p = plan(K.scale)
    assert shapes(p, x=(7,), s=2.0) == {"out": (7,)}


def test_len_relation_gives_the_first_extent():
    p = plan(K.row_sums)
    assert shapes(p, a=(5, 3)) == {"out": (5,)}


def test_per_axis_relations_give_a_2d_output_shape():
    p = plan(sgemm_naive)
    assert shapes(p, a=(4, 6), b=(6, 9)) == {"c": (4, 9)}


def test_scalar_in_a_relation_gives_the_output_length():
    p = plan(K.iota)
    assert [q.name for q in p.inputs] == ["n"]
    assert p.output_shapes({"n": 11}, {}, [11]) == {"out": (11,)}


def test_relations_chain_through_outputs_and_arithmetic():
    rules, order = derive_shapes(["c.shape == b.shape", "len(b) == len(x) // 2 + n"], {"c": 1, "b": 1},
                                 ["x"], ["n"])
    assert order == ["b", "c"]
    env = {"x": (10,), "n": 3}
    env["b"] = rules["b"].shape(env, 1)
    assert env["b"] == (8,) and rules["c"].shape(env, 1) == (8,)


def test_relation_naming_an_unknown_array_determines_nothing():
    # `a` is neither an input nor an output of the op: the relation cannot be evaluated
    rules, order = derive_shapes(["len(b) == len(a) // 2", "c.shape == b.shape"], {"c": 1, "b": 1}, ["x"], [])
    assert rules == {} and order == []


def test_negative_axis_and_chained_equalities():
    rules, order = derive_shapes(["o.shape[-1] == a.shape[1] == b.shape[0]", "o.shape[0] == 3"],
                                 {"o": 2}, ["a", "b"], [])
    assert order == ["o"] and rules["o"].shape({"a": (2, 5), "b": (5,)}, 2) == (3, 5)


def test_inequalities_determine_nothing():
    rules, order = derive_shapes(["len(out) <= len(x)", "len(out) != 0"], {"out": 1}, ["x"], [])
    assert rules == {} and order == []


def test_output_without_a_shape_rule_is_refused_naming_it():
    with pytest.raises(ContractDefinitionError) as ei:
        plan(K.histogram)
    msg = str(ei.value)
    assert "histogram: argument 'hist' (#1)" in msg and "out_shapes=" in msg and "mutates=('hist',)" in msg
    assert ei.value.kernel == "histogram" and ei.value.arg == 1 and ei.value.arg_name == "hist"


def test_mutated_output_needs_no_shape_rule():
    p = plan(K.histogram, mutates="hist")
    assert [q.name for q in p.inputs] == ["data", "hist"] and p.outputs == []


def test_given_out_shapes_win_and_may_be_callables():
    p = plan(K.total, out_shapes={"out": lambda a: (1,)})
    assert p.output_shapes({"a": None}, {"a": (9,)}, [None]) == {"out": (1,)}
    p = plan(K.scale, out_shapes={"out": (3,)})
    assert shapes(p, x=(7,), s=1.0) == {"out": (3,)}


def test_shape_rule_of_the_wrong_rank_is_refused():
    p = plan(K.scale, out_shapes={"out": (2, 2)})
    with pytest.raises(NdimError, match=r"scale: argument 'out' \(#1\): the output shape rule gave \(2, 2\)"):
        shapes(p, x=(4,), s=1.0)
    p = plan(K.scale, out_shapes={"out": (-1,)})
    with pytest.raises(ShapeRelationError, match="negative extent"):
        shapes(p, x=(4,), s=1.0)


def test_unknown_or_wrong_kind_names_are_refused():
    with pytest.raises(ValueError, match=r"mutates: 'x' \(parameter #0 is not writable\); writable parameters are: out"):
        plan(K.scale, mutates="x")
    with pytest.raises(ValueError, match=r"static: 'nope' \(not a parameter\)"):
        plan(K.scale, static={"nope": 1})
    with pytest.raises(ValueError, match="out_shapes: 'hist'"):
        plan(K.histogram, mutates="hist", out_shapes={"hist": (3,)})
    with pytest.raises(TypeError, match="mutates: expected parameter names"):
        plan(K.scale, mutates=[3])


def test_static_scalar_is_not_an_input():
    p = plan(K.scale, static={"s": 2.0})
    assert [q.name for q in p.inputs] == ["x"]


def test_output_dtype_from_typevar_bound_by_an_input():
    p = plan(K.scale)
    binding = p.bind({"x": ("f64", "float64", (3,))})
    assert p.output_dtype(p.outputs[0], binding) == "f64"


def test_output_typevar_bound_by_no_input_needs_out_dtypes():
    @simt.kernel(block=32, requires=["len(out) == n"])
    def generic_fill(out: simt.DisjointSlice[K.T], n: f32):
        i = simt.thread.index_1d()
        out[i] = K.T(0)

    with pytest.raises(ContractDefinitionError, match=r"generic_fill: argument 'out' \(#0\): its dtype .* bound "
                                                      r"by no input array; give out_dtypes="):
        plan(generic_fill)
    p = plan(generic_fill, out_dtypes={"out": "float64"})
    assert p.output_dtype(p.outputs[0], {}) == "f64"


def test_out_dtypes_conflicting_with_the_annotation_is_refused():
    with pytest.raises(DTypeError, match=r"row_sums: argument 'out' \(#1\): out_dtypes: expected float32, got float64"):
        plan(K.row_sums, out_dtypes={"out": "float64"})


def test_input_dtype_and_ndim_refusals_name_the_argument():
    p = plan(K.add2d)
    with pytest.raises(DTypeError, match=r"add2d: argument 'b' \(#1\): expected float32 array, got float64 array "
                                         r"of shape \(2, 2\)"):
        p.bind({"a": ("f32", "float32", (2, 2)), "b": ("f64", "float64", (2, 2))})
    with pytest.raises(NdimError, match=r"add2d: argument 'a' \(#0\): expected a 2-D array, got a 1-D array"):
        p.bind({"a": ("f32", "float32", (4,)), "b": ("f32", "float32", (2, 2))})
    with pytest.raises(DTypeError, match=r"arrays of dtype complex64 are not supported by the DSL"):
        p.bind({"a": ("c64", "complex64", (2, 2)), "b": ("f32", "float32", (2, 2))})


def test_generic_dtype_bound_by_the_first_array():
    p = plan(K.tile_add, out_shapes={"out": lambda a, b: a.shape}, tiles={"out": (64,)})
    with pytest.raises(DTypeError, match=r"tile_add: argument 'b' \(#1\): expected float32 array \(bound by an "
                                         r"earlier argument\), got float64 array"):
        p.bind({"a": ("f32", "float32", (8,)), "b": ("f64", "float64", (8,))})


def test_tile_partition_needs_a_tile_shape_and_constants_need_static():
    with pytest.raises(ContractDefinitionError, match=r"tile_add: argument 'out' \(#2\): a tile.Partition needs "
                                                      r"its tile shape; give tiles="):
        plan(K.tile_add, out_shapes={"out": (8,)})
    with pytest.raises(ContractDefinitionError, match=r"tile_rows_scaled: argument 'k' \(#2\): a tile.Constant"):
        plan(K.tile_rows_scaled, out_shapes={"out": (2, 8)}, tiles={"out": (1, 8)})
    p = plan(K.tile_rows_scaled, out_shapes={"out": lambda x: x.shape}, tiles={"out": (1, 8)}, static={"k": 3})
    assert [q.name for q in p.inputs] == ["x"]


def test_tile_kernels_refuse_grid_and_simt_kernels_refuse_tiles():
    with pytest.raises(ValueError, match="grid=/block= are for SIMT kernels"):
        plan(K.tile_add, out_shapes={"out": (8,)}, tiles={"out": (8,)}, grid=1)
    with pytest.raises(ValueError, match="tiles= is for tile kernels"):
        plan(K.scale, tiles={"out": (8,)})


def test_not_a_kernel_is_refused():
    with pytest.raises(TypeError, match=r"test: expected a @simt.kernel, a @tile.kernel, .* got function"):
        plan(lambda x: x)


def test_input_count_is_checked():
    from bridge.errors import ArgumentCountError
    p = plan(K.scale)
    with pytest.raises(ArgumentCountError, match=r"scale: expected 2 inputs \(x, s\), got 1"):
        p.split([1])


def test_import_dsl_imports_neither_torch_nor_jax():
    code = ("import sys, dsl; assert 'torch' not in sys.modules and 'jax' not in sys.modules, "
            "[m for m in ('torch', 'jax') if m in sys.modules]; import dsl.integrations.torch_op, "
            "dsl.integrations.jax_call; assert 'torch' not in sys.modules and 'jax' not in sys.modules; "
            "print(dsl.torch.custom_op.__name__, dsl.jax.kernel_call.__name__)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["custom_op", "kernel_call"]
