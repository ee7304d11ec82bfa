"""Foreign kernels in dsl.torch.custom_op and dsl.jax.kernel_call, on the CPU: the op is planned from the
kernel's contract (inputs, outputs, schema, output shapes from its relations), traced through its fake
implementation (FakeTensor, torch.export, opcheck on meta tensors, jax.eval_shape) and validated by the
one validator when traced; a real call on CPU arrays is refused with a typed error (no simulator for
foreign code). The kernels are real builds (Triton's compiler, a generated ElementwiseKernel, a numba
contract from numba's layout) around a stand-in for the loaded CUfunction, which needs a GPU.
The same ops on the GPU: test_foreign_integrations_gpu.py."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from bridge.errors import DeviceMismatchError, DTypeError, ShapeRelationError
from bridge.foreign import build_elementwise, elementwise_spec
from bridge.foreign.launch import ForeignKernel, full_args, user_args
from bridge.foreign.numba_jit import NumbaBuild, NumbaKernel, numba_contract, numba_params

MUL1 = elementwise_spec("T x, T y", "T out", "out = x * y + (T)1", "mul1")


class _Recorder:
    def __init__(self) -> None:
        self.calls = []

    def launch(self, *args, **kw) -> None:
        self.calls.append((args, kw))


class LoadedStandIn:
    """What the integrations read of a loaded bridge.Kernel: name, device, contract, launcher."""

    def __init__(self, name, contract) -> None:
        self.name, self.device, self.contract, self.launcher = name, 0, contract, _Recorder()

    def on_device(self, device):
        return self


def _foreign(build, visible=None) -> ForeignKernel:
    return ForeignKernel._create(LoadedStandIn(build.name, build.contract), build.hidden, visible or build.contract,
                                 dict(build.info))


@pytest.fixture(scope="module")
def mul1():
    return _foreign(build_elementwise(MUL1, types={"T": "float32"}, ndim=1, arch=90))


@pytest.fixture(scope="module")
def triton_add():
    """Triton's add with its scratch parameters kept: the op must see only the user's 4 arguments."""
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
    import json

    from bridge.contract import LaunchContract
    from bridge.foreign import build_triton
    tk = importlib.import_module("foreign_triton_kernels")
    b = build_triton(tk.add, "*fp32, *fp32, *fp32, i32", arch=90, constexprs={"BLOCK": 1024}, drop_unused=False,
                     access={"x": "read", "y": "read"}, requires=["len(x) == n", "len(out) == n"],
                     grid=("out", "BLOCK"))
    d = b.contract.to_dict()
    d["args"] = d["args"][: len(d["args"]) - len(b.hidden)]
    return _foreign(b, LaunchContract.from_json(json.dumps(d)))


@pytest.fixture(scope="module")
def numba_saxpy():
    """numba's saxpy(a, x, y, n) layout: 16 kernel parameters, 4 user arguments."""
    from types import SimpleNamespace
    f32c = SimpleNamespace(dtype="float32", ndim=1, layout="C", mutable=True)     # a numba types.Array
    params = numba_params("saxpy", ["a", "x", "y", "n"], ["float32", f32c, f32c, "int64"])
    c = numba_contract("saxpy", params, access={"x": "read"}, requires=["len(x) == n", "len(y) == n"],
                       grid_from="y", block=256)
    build = NumbaBuild(b"", "saxpy", c, params=tuple(params), layouts={"x": "C", "y": "C"})
    return NumbaKernel._wrap(LoadedStandIn("saxpy", c), build)


def test_user_args_are_what_the_user_passes(mul1, triton_add, numba_saxpy):
    assert [a["name"] for a in user_args(mul1)] == ["x", "y", "out"]
    assert [a["name"] for a in user_args(triton_add)] == ["x", "y", "out", "n"]
    assert [a["name"] for a in user_args(numba_saxpy)] == ["a", "x", "y", "n"]
    assert full_args(triton_add, (1, 2, 3, 4)) == (1, 2, 3, 4) + (None,) * len(triton_add.hidden)
    x = np.zeros(5, np.float32)
    full = full_args(numba_saxpy, (2.0, x, x, 5))
    assert len(full) == 16 and full[:5] == (2.0, None, None, 5, 4) and full[5] is x


# ---------------------------------------------------------------------------------------------- torch

@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def test_a_foreign_kernel_becomes_a_custom_op_planned_from_its_contract(torch, mul1):
    import dsl
    op = dsl.torch.custom_op("kbforeign::mul1", mul1)
    assert str(torch.ops.kbforeign.mul1.default._schema) == "kbforeign::mul1(Tensor x, Tensor y) -> Tensor"
    assert op._kb_plan.is_foreign and [p.name for p in op._kb_plan.outputs] == ["out"]
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        r = op(torch.empty(7, 3)[:, 0].contiguous(), torch.empty(7))
    assert tuple(r.shape) == (7,) and r.dtype == torch.float32              # out.shape from x.shape == out.shape
    meta = torch.empty(11, device="meta")
    assert set(torch.library.opcheck(op, (meta, meta)).values()) == {"SUCCESS"}


def test_the_op_traces_into_an_exported_graph(torch, mul1):
    import dsl
    op = dsl.torch.custom_op("kbforeign::mul1_export", mul1)

    class M(torch.nn.Module):
        def forward(self, a, b):
            return op(a, b) * 2

    ep = torch.export.export(M(), (torch.ones(5), torch.ones(5)))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert targets[0] == "kbforeign.mul1_export.default"


def test_shapes_from_a_scalar_relation_and_hidden_parameters_stay_hidden(torch, triton_add):
    import dsl
    op = dsl.torch.custom_op("kbforeign::tadd", triton_add)
    assert str(torch.ops.kbforeign.tadd.default._schema) == "kbforeign::tadd(Tensor x, Tensor y, int n) -> Tensor"
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        assert tuple(op(torch.empty(9), torch.empty(9), 9).shape) == (9,)      # len(out) == n


def test_cpu_tensors_are_refused_typed_and_bad_inputs_before_that(torch, mul1, numba_saxpy):
    import dsl
    op = dsl.torch.custom_op("kbforeign::mul1_cpu", mul1)
    with pytest.raises(DeviceMismatchError, match="mul1: a ForeignKernel runs on CUDA devices only"):
        op(torch.ones(4), torch.ones(4))
    with pytest.raises(DTypeError, match=r"mul1: argument 'x' \(#0\): expected float32"):
        op(torch.ones(4, dtype=torch.float64), torch.ones(4))
    inplace = dsl.torch.custom_op("kbforeign::saxpy_", numba_saxpy, mutates=("y",))
    assert str(torch.ops.kbforeign.saxpy_.default._schema) == \
        "kbforeign::saxpy_(float a, Tensor x, Tensor(a0!) y, int n) -> ()"
    assert inplace._kb_plan.requires == ("len(x) == n", "len(y) == n")          # numba's own fields left out


# ------------------------------------------------------------------------------------------------ JAX

@pytest.fixture(scope="module")
def jax():
    """JAX with the CPU as its default device (on the GPU machine too): these calls trace on the CPU path."""
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    with jax.default_device(jax.devices("cpu")[0]):
        yield jax


def test_a_foreign_kernel_call_traces_and_is_validated_when_traced(jax, mul1):
    import dsl
    call = dsl.jax.kernel_call(mul1)
    f32 = jax.numpy.float32
    assert jax.eval_shape(call, jax.ShapeDtypeStruct((9,), f32), jax.ShapeDtypeStruct((9,), f32)) == \
        jax.ShapeDtypeStruct((9,), f32)
    with pytest.raises(ShapeRelationError, match="y.shape == out.shape"):
        jax.eval_shape(call, jax.ShapeDtypeStruct((9,), f32), jax.ShapeDtypeStruct((8,), f32))
    with pytest.raises(DeviceMismatchError, match="runs on CUDA devices only"):
        # f32 whatever jax_enable_x64 (interop_tests/integrations/conftest.py sets it for the session)
        call(jax.numpy.ones(4, f32), jax.numpy.ones(4, f32))                     # eager on the CPU


def test_numbas_fields_are_filled_and_checked_when_traced(jax, numba_saxpy):
    import dsl
    call = dsl.jax.kernel_call(numba_saxpy, mutates=("y",))
    f32 = jax.numpy.float32
    out = jax.eval_shape(lambda x, y: call(2.0, x, y, 6), jax.ShapeDtypeStruct((6,), f32),
                         jax.ShapeDtypeStruct((6,), f32))
    assert out == jax.ShapeDtypeStruct((6,), f32)
    with pytest.raises(ShapeRelationError, match="len\\(y\\) == n"):
        jax.eval_shape(lambda x, y: call(2.0, x, y, 6), jax.ShapeDtypeStruct((6,), f32),
                       jax.ShapeDtypeStruct((5,), f32))


def test_each_null_pointer_parameter_gets_a_result_slot_of_its_own(jax, triton_add, numba_saxpy, mul1):
    """JAX's FFI slots have no null: the pointers a foreign kernel takes null are 1-byte XLA results."""
    from dsl.integrations._foreign import null_slots
    from dsl.integrations._plan import OpPlan
    from dsl.integrations.jax_call import _Call

    def call(kernel, shapes, scalars):
        plan = OpPlan(kernel, "test")
        named = {**{p.name: None for p in plan.inputs if p.is_array}, **scalars}
        return _Call(plan, named, {}, shapes, {}, scalars, frozenset(), None, None, ())

    assert null_slots(call(triton_add, {"x": (8,), "y": (8,), "out": (8,)}, {"n": 8})) == len(triton_add.hidden)
    assert null_slots(call(numba_saxpy, {"x": (8,), "y": (8,)}, {"a": 1.0, "n": 8})) == 4
    assert null_slots(call(mul1, {"x": (8,), "y": (8,), "out": (8,)}, {})) == 0
