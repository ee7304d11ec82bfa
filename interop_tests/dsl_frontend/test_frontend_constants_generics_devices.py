"""Module constants and closure values fold into the IR; TypeVar kernels specialise per dtype; device
functions are called with typed arguments and return values."""
from __future__ import annotations

import numpy as np
import pytest

import dsl
from dsl import f32, f64, simt
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from interop_tests.dsl_frontend.frontend_helpers import f32v, nodes_of

SCALE = 3
OFFSET = np.float32(0.25)
TILE = (4, 8)
T = dsl.TypeVar("T")


def consts(fn: ir.Function) -> list[tuple[object, str]]:
    return [(c.value, c.type.name) for c in nodes_of(fn, ir.Const)]


@simt.kernel
def k_module_consts(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    with simt.unsafe():
        buf = simt.shared.array(TILE, f32)
    out[i] = a[i] * SCALE + OFFSET


def test_module_constants_fold_with_their_types():
    fn = k_module_consts.build(f32v(), f32v())
    c = consts(fn)
    assert (3.0, "f32") in c              # weak int constant took the f32 operand's type
    assert (0.25, "f32") in c             # a NumPy scalar keeps its dtype
    assert fn.shared[0].type.shape == TILE


def make_scaler(factor):
    @simt.kernel
    def scaler(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = a[i] * factor
    return scaler


def test_closure_values_fold_and_distinct_closures_give_distinct_ir():
    k2, k5 = make_scaler(2.0), make_scaler(5.5)
    assert (2.0, "f32") in consts(k2.build(f32v(), f32v()))
    assert (5.5, "f32") in consts(k5.build(f32v(), f32v()))
    assert k2.ptx(f32v(), f32v(), arch="sm_80") != k5.ptx(f32v(), f32v(), arch="sm_80")


@simt.kernel
def k_generic(a: simt.Array[T], out: simt.DisjointSlice[T], s: T):
    i = simt.thread.index_1d()
    out[i] = a[i] * s + T(1) + a.dtype(2)


def test_typevar_kernels_specialise_per_dtype():
    a32 = f32v()
    a64 = a32.astype(np.float64)
    ai = (np.arange(37, dtype=np.int32) + 1)
    fn32 = k_generic.build(a32, a32.copy(), np.float32(2))
    fn64 = k_generic.build(a64, a64.copy(), 2.0)
    fni = k_generic.build(ai, ai.copy(), np.int32(2))
    assert [p.type.dtype if isinstance(p.type, irt.ArrayType) else p.type for p in fn32.params] == \
        [irt.F32, irt.F32, irt.F32]
    assert nodes_of(fn64, ir.Store)[0].value.type == irt.F64
    assert nodes_of(fni, ir.Store)[0].value.type == irt.I32
    assert len({id(fn32), id(fn64), id(fni)}) == 3
    assert k_generic.build(a32, a32.copy(), np.float32(9)) is fn32      # cached per signature
    p32 = k_generic.ptx(a32, a32.copy(), np.float32(2), arch="sm_90")
    p64 = k_generic.ptx(a64, a64.copy(), 2.0, arch="sm_90")
    assert ".f32" in p32 and ".f64" in p64


def test_typevar_binding_conflict_names_the_argument():
    from bridge.errors import DTypeError
    with pytest.raises(DTypeError) as info:
        k_generic.build(f32v(), f32v().astype(np.float64), np.float32(1))
    assert "argument 'out' (#1)" in str(info.value) and "float32" in str(info.value)
    assert info.value.arg_name == "out"


@simt.device
def sq(x: f32) -> f32:
    return x * x


@simt.device
def clamp(x: T, lo: T, hi: T) -> T:
    return min(max(x, lo), hi)


@simt.device
def twice(x: f64):
    y = x + x
    return y


@simt.device
def store_at(out: simt.DisjointSlice[f32], v: f32):
    i = simt.thread.index_1d()
    out[i] = v


@simt.kernel
def k_devices(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    v = sq(a[i]) + clamp(a[i], 0.0, 1.0) + f32(twice(f64(a[i])))
    store_at(out, v)


def test_device_functions_are_typed_calls_with_returns():
    fn = k_devices.build(f32v(), f32v())
    calls = {c.callee.name: c for c in nodes_of(fn, ir.Call)}
    assert set(calls) == {"sq", "clamp", "twice", "store_at"}
    assert calls["sq"].type == irt.F32 and calls["sq"].callee.return_type == irt.F32
    assert [p.type for p in calls["clamp"].callee.params] == [irt.F32] * 3
    assert calls["clamp"].args[1].type == irt.F32                       # weak 0.0 took T = f32
    assert calls["twice"].callee.return_type == irt.F64                 # inferred from `return`
    assert calls["store_at"].type == irt.VOID
    assert any(isinstance(s, ir.Return) and s.value is not None for s in calls["sq"].callee.body)
    body = calls["store_at"].callee.body
    assert isinstance(body[0], ir.GuardedRegion)
    assert {c.name for c in fn.callees} == set(calls)


def test_kernel_ir_passes_the_ir_verifier():
    from dsl.ir.verify import verify_function
    for k, args in [(k_devices, (f32v(), f32v())), (k_generic, (f32v(), f32v(), np.float32(1))),
                    (k_module_consts, (f32v(), f32v()))]:
        verify_function(k.build(*args))


def test_printed_ir_names_the_kernel_and_types():
    text = k_devices.ir(f32v(), f32v())
    assert "kernel k_devices" in text and "device sq" in text and "f32" in text


@simt.device
def first(x: simt.Array[f32]) -> f32:
    return x[0]


@simt.device
def poke(x: simt.Array[f32]):
    x[0] = 1.0


@simt.kernel
def k_pass_slice_as_array(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = first(out) + first(a)


@simt.kernel
def k_poke(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    poke(out)


def test_a_disjoint_slice_passed_as_array_is_read_only_in_the_callee():
    from dsl import DslCompileError
    from dsl.ir.verify import verify_function
    fn = k_pass_slice_as_array.build(f32v(), f32v())
    verify_function(fn)
    assert len({id(c.callee) for c in nodes_of(fn, ir.Call)}) == 2   # one specialisation per type
    with pytest.raises(DslCompileError, match="write to Array parameter 'x'"):
        k_poke.build(f32v(), f32v())
