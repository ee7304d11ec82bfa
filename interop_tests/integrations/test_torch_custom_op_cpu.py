"""dsl.torch.custom_op on CPU tensors (the kernel runs on the simulator): eager results against torch
references, torch.compile(fullgraph=True) without graph breaks, the fake implementation under
FakeTensorMode, in-place (mutated) arguments, tile kernels, autograd (gradcheck in float64) with a
Python backward and with a backward kernel, and typed refusals naming the argument."""
from __future__ import annotations

import itertools

import integration_kernels as K
import numpy as np
import pytest

import dsl
from bridge.errors import ContractDefinitionError, DeviceMismatchError, DTypeError, NdimError, ShapeRelationError

_ids = itertools.count()


def op_name(base: str) -> str:
    """A fresh op name per test (torch.library names are process-wide)."""
    return f"kb_test_cpu::{base}_{next(_ids)}"


@pytest.fixture
def silu_op(torch):
    return dsl.torch.custom_op(op_name("silu"), K.silu)


def test_schema_has_inputs_in_kernel_order_and_mutated_aliases(torch):
    assert str(dsl.torch.custom_op(op_name("scale"), K.scale)._opoverload._schema).endswith(
        "(Tensor x, Scalar s) -> Tensor")
    hist = dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist", grid=1)
    assert str(hist._opoverload._schema).endswith("(Tensor data, Tensor(a0!) hist) -> ()")


def test_eager_result_matches_torch(torch, silu_op):
    x = torch.linspace(-6, 6, 1001)
    torch.testing.assert_close(silu_op(x), torch.nn.functional.silu(x), rtol=1e-6, atol=1e-6)


def test_generic_kernel_specialises_per_dtype(torch):
    op = dsl.torch.custom_op(op_name("scale"), K.scale)
    for dt in (torch.float32, torch.float64, torch.int32):
        x = torch.arange(17).to(dt)
        y = op(x, 3)
        assert y.dtype == dt and torch.equal(y, x * 3)


def test_torch_namespace_call_is_the_same_op(torch):
    name = op_name("scale")
    dsl.torch.custom_op(name, K.scale)
    ns, op = name.split("::")
    x = torch.arange(5, dtype=torch.float64)
    assert torch.equal(getattr(getattr(torch.ops, ns), op)(x, 2.0), x * 2)


@pytest.mark.slow
def test_compiled_fullgraph_has_no_graph_break(torch, silu_op):
    def f(x):
        return silu_op(x * 2) + 1

    x = torch.randn(300)
    explanation = torch._dynamo.explain(f)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), torch.nn.functional.silu(x * 2) + 1, rtol=1e-6, atol=1e-6)


def test_compiled_with_dynamic_shapes_uses_the_shape_rule(torch, silu_op):
    compiled = torch.compile(lambda x: silu_op(x) * 3, backend="aot_eager", fullgraph=True, dynamic=True)
    for n in (5, 33, 100):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x), torch.nn.functional.silu(x) * 3, rtol=1e-6, atol=1e-6)


def test_fake_implementation_gives_shapes_and_dtypes_without_running(torch):
    from torch._subclasses.fake_tensor import FakeTensorMode
    rows = dsl.torch.custom_op(op_name("rows"), K.row_sums)
    mm = dsl.torch.custom_op(op_name("mm"), __import__("interop_tests.kernels_zoo", fromlist=["x"]).sgemm_naive)
    with FakeTensorMode():
        assert tuple(rows(torch.empty(7, 3)).shape) == (7,)
        c = mm(torch.empty(4, 6), torch.empty(6, 9))
        assert tuple(c.shape) == (4, 9) and c.dtype == torch.float32


def test_fake_implementation_refuses_a_bad_ndim_with_the_bridge_error(torch, silu_op):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        with pytest.raises(NdimError, match=r"silu: argument 'x' \(#0\): expected a 1-D array, got a 2-D array"):
            silu_op(torch.empty(7, 3))


def test_wrong_dtype_is_a_dtype_error_naming_the_argument(torch):
    op = dsl.torch.custom_op(op_name("add2d"), K.add2d)
    a = torch.zeros(2, 3)
    with pytest.raises(DTypeError, match=r"add2d: argument 'b' \(#1\): expected float32 array, got float64 array "
                                         r"of shape \(2, 3\)") as ei:
        op(a, a.double())
    assert ei.value.arg == 1 and ei.value.arg_name == "b"


def test_wrong_dtype_under_compile_is_the_same_error(torch, silu_op):
    compiled = torch.compile(lambda x: silu_op(x), backend="aot_eager", fullgraph=True)
    with pytest.raises(Exception) as ei:
        compiled(torch.zeros(4, dtype=torch.complex64))
    chain, e = [], ei.value
    while e is not None:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert any(isinstance(c, DTypeError) and "arrays of dtype complex64 are not supported" in str(c) for c in chain)


def test_relation_violation_is_refused_by_the_validator(torch):
    op = dsl.torch.custom_op(op_name("add2d"), K.add2d)
    with pytest.raises(ShapeRelationError, match=r"add2d: argument 'b' \(#1\): expected a.shape == b.shape"):
        op(torch.zeros(2, 3), torch.zeros(3, 2))


def test_two_d_kernel_and_per_axis_shapes(torch):
    op = dsl.torch.custom_op(op_name("add2d"), K.add2d)
    a, b = torch.randn(33, 17), torch.randn(33, 17)
    torch.testing.assert_close(op(a, b), a + b)
    rows = dsl.torch.custom_op(op_name("rows"), K.row_sums)
    torch.testing.assert_close(rows(a), a.sum(1), rtol=1e-5, atol=1e-5)


def test_output_length_from_a_scalar_relation(torch):
    op = dsl.torch.custom_op(op_name("iota"), K.iota)
    assert torch.equal(op(9), torch.arange(9))


def test_non_contiguous_input(torch, silu_op):
    x = torch.randn(40)[::3]
    assert not x.is_contiguous()
    torch.testing.assert_close(silu_op(x), torch.nn.functional.silu(x), rtol=1e-6, atol=1e-6)


def test_mutated_argument_is_written_in_place_and_compiles(torch):
    op = dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist",
                             grid=lambda data, hist: ((len(data) + 127) // 128,))
    data = torch.randint(0, 37, (5000,), dtype=torch.int32)
    ref = torch.bincount(data, minlength=37).to(torch.int32)
    hist = torch.zeros(37, dtype=torch.int32)
    assert op(data, hist) is None
    assert torch.equal(hist, ref)

    def f(d):
        h = torch.zeros(37, dtype=torch.int32)
        op(d, h)
        return h * 2

    assert torch._dynamo.explain(f)(data).graph_break_count == 0
    assert torch.equal(torch.compile(f, backend="aot_eager", fullgraph=True)(data), ref * 2)


def test_kernel_without_a_derived_grid_takes_the_grid_rule(torch):
    op = dsl.torch.custom_op(op_name("total"), K.total, out_shapes={"out": (1,)},
                             grid=lambda a: ((len(a) + 255) // 256,))
    a = torch.rand(3000)
    torch.testing.assert_close(op(a), a.sum().reshape(1), rtol=1e-5, atol=1e-4)


def test_outputs_the_kernel_reads_start_at_zero(torch):
    from dsl.integrations._kernels import outputs_read
    op = dsl.torch.custom_op(op_name("total"), K.total, out_shapes={"out": (1,)}, grid=4)
    plan = op._kb_plan
    assert outputs_read(plan, {}, {}, {}) == {"out"}          # atomic add: read-modify-write
    silu_plan = dsl.torch.custom_op(op_name("silu"), K.silu)._kb_plan
    assert outputs_read(silu_plan, {K.T: "f32"}, {}, {}) == frozenset()
    a = torch.ones(1000)
    for _ in range(3):                                       # a garbage start would accumulate
        assert op(a).item() == 1000.0


def test_tile_kernel_op_with_a_partition_output(torch):
    op = dsl.torch.custom_op(op_name("tadd"), K.tile_add, out_shapes={"out": lambda a, b: a.shape},
                             tiles={"out": (256,)})
    a, b = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(op(a, b), a + b)
    assert torch._dynamo.explain(lambda a, b: op(a, b) * 2)(a, b).graph_break_count == 0
    compiled = torch.compile(lambda a, b: op(a, b) * 2, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(a, b), (a + b) * 2)


def test_tile_kernel_mutating_its_partition_and_a_static_constant(torch):
    axpy = dsl.torch.custom_op(op_name("axpy"), K.tile_axpy, mutates="y", tiles={"y": (128,)})
    a, y = torch.randn(500), torch.randn(500)
    expect = y + 0.5 * a
    axpy(a, y, 0.5)
    torch.testing.assert_close(y, expect)
    rows = dsl.torch.custom_op(op_name("rows3"), K.tile_rows_scaled, out_shapes={"out": lambda x: x.shape},
                               tiles={"out": lambda x: (1, x.shape[1])}, static={"k": 3})
    x = torch.randn(5, 64)
    torch.testing.assert_close(rows(x), x * 3)


def test_gradcheck_with_a_backward_kernel(torch):
    op = dsl.torch.custom_op(op_name("silu"), K.silu, backward=K.silu_backward)
    x = torch.randn(37, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x,))


def test_gradcheck_with_a_python_backward(torch):
    def backward(ctx, grad):
        x = ctx.saved["x"]
        s = torch.sigmoid(x)
        return grad * s * (1 + x * (1 - s))

    op = dsl.torch.custom_op(op_name("silu"), K.silu, backward=backward)
    x = torch.randn(21, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(op, (x,))


@pytest.mark.slow
def test_backward_kernel_through_compile(torch):
    op = dsl.torch.custom_op(op_name("silu"), K.silu, backward=K.silu_backward)
    x = torch.randn(64, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    compiled = torch.compile(lambda t: op(t).square().sum(), backend="aot_eager", fullgraph=True)
    compiled(x).backward()
    torch.nn.functional.silu(xr).square().sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-5)


def test_scalar_input_gets_no_gradient(torch):
    def backward(ctx, grad):
        return grad * ctx.saved["s"], None

    op = dsl.torch.custom_op(op_name("scale"), K.scale, backward=backward)
    x = torch.randn(9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: op(t, 2.5), (x,))


def test_backward_kernel_with_a_misnamed_parameter_is_refused(torch):
    with pytest.raises(ValueError, match=r"backward kernel scale: writable argument 'out' \(#1\) must be named "
                                         r"grad_<input> for one of the forward inputs \(x\)"):
        dsl.torch.custom_op(op_name("silu"), K.silu, backward=K.scale)


def test_backward_for_a_mutating_op_is_refused(torch):
    with pytest.raises(ValueError, match="backward= is not supported for ops that mutate their inputs"):
        dsl.torch.custom_op(op_name("hist"), K.histogram, mutates="hist", grid=1, backward=lambda ctx, g: g)


def test_undetermined_output_is_refused_at_creation(torch):
    with pytest.raises(ContractDefinitionError, match=r"dsl.torch.custom_op: histogram: argument 'hist' \(#1\): "
                                                      r"the contract does not determine the shape"):
        dsl.torch.custom_op(op_name("hist"), K.histogram, grid=1)


def test_bfloat16_tensors_run_on_the_simulator(torch):
    op = dsl.torch.custom_op(op_name("scale"), K.scale)
    x = torch.randn(50).to(torch.bfloat16)
    y = op(x, 2.0)
    assert y.dtype == torch.bfloat16 and torch.equal(y, x * 2)


def test_mixed_devices_are_refused(torch):
    op = dsl.torch.custom_op(op_name("add2d"), K.add2d)
    with pytest.raises(DeviceMismatchError, match=r"add2d: argument 'b' \(#1\): expected a tensor on cpu \(like "
                                                  r"the earlier tensor arguments\), got one on meta"):
        op(torch.zeros(2, 2), torch.zeros(2, 2, device="meta"))


def test_runtime_fault_of_the_simulator_is_a_kernel_fault(torch):
    op = dsl.torch.custom_op(op_name("gather"), K.gather)
    x = torch.arange(6, dtype=torch.float32)
    with pytest.raises(dsl.KernelFault, match="gather: index 9 out of bounds for array 'x' with extent 6"):
        op(x, torch.tensor([0, 9, 1], dtype=torch.int32))
    assert torch.equal(op(x, torch.tensor([5, 0], dtype=torch.int32)), torch.tensor([5.0, 0.0]))


def test_numpy_reference_for_the_2d_sum(torch):
    op = dsl.torch.custom_op(op_name("rows"), K.row_sums)
    a = np.random.default_rng(0).standard_normal((9, 130)).astype(np.float32)
    np.testing.assert_allclose(op(torch.from_numpy(a)).numpy(), a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
