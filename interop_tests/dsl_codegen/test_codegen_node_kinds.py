"""Every IR node kind, hand-built, compiles to PTX that ptxas accepts for sm_80 and sm_90."""
from __future__ import annotations

import re

import pytest

from dsl.ir import nodes as N
from dsl.ir.types import (BF16, BOOL, F16, F32, F64, I8, I16, I32, I64, INDEX, SCALARS, U8, U16, U32,
                          U64, ArrayType, ChunkType, SlotType, TupleType)
from interop_tests.dsl_codegen.codegen_kit import (C, P, R, arr, assemble_all, gid, guarded_store_1d,
                                                   kernel, load, params, ptx_of, sites, store)

INTS = (I8, I16, I32, I64, U8, U16, U32, U64)
FLOATS = (F16, BF16, F32, F64)
BINOPS_INT = ("add", "sub", "mul", "floordiv", "mod", "pow", "and_", "or_", "xor", "min", "max")
BINOPS_FLOAT = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "min", "max", "copysign")


def binop_kernel(t, ops):
    a, b, out = params(("a", arr(t)), ("b", arr(t)), ("out", arr(t, writable=True)))
    i = N.Var("i", INDEX)
    acc = N.Var("acc", t)
    body = [N.Assign(i, gid()), N.GuardedRegion(P(out), [R(i)], [
        N.Assign(acc, load(a, [R(i)], t))])]
    region = body[1].body
    combine = "xor" if t.is_int else "add"
    for op in ops:   # each op on the loaded operands, folded into acc so none is dead code
        r = N.BinOp(op, load(a, [R(i)], t), load(b, [R(i)], t), t)
        region.append(N.Assign(acc, N.BinOp(combine, R(acc), r, t)))
    if t.is_int:
        region.append(N.Assign(acc, N.BinOp("lshift", R(acc), C(3, I32), t)))
        region.append(N.Assign(acc, N.BinOp("rshift", R(acc), load(b, [R(i)], t), t)))
    else:
        region.append(N.Assign(acc, N.BinOp("pow", R(acc), C(3, I32), t)))
    region += [N.Assign(acc, N.UnaryOp("neg", R(acc), t)), N.Assign(acc, N.UnaryOp("abs", R(acc), t))]
    if t.is_int:
        region.append(N.Assign(acc, N.UnaryOp("invert", R(acc), t)))
    region.append(store(out, [R(i)], R(acc)))
    return kernel(f"binop_{t.name}", [a, b, out], body)


@pytest.mark.parametrize("t", INTS, ids=str)
def test_integer_arithmetic_assembles(t):
    ptxs = assemble_all(binop_kernel(t, BINOPS_INT))
    # C division never traps and never divides by a possibly-zero register unguarded: a select
    # replaces a zero divisor by one before div/rem.
    assert re.search(r"\b(div|rem)\.[su]\d+", ptxs["sm_90"]) or t.bits < 32


@pytest.mark.parametrize("t", FLOATS, ids=str)
def test_float_arithmetic_assembles(t):
    ptxs = assemble_all(binop_kernel(t, BINOPS_FLOAT))
    assert ".extern .func" not in ptxs["sm_90"], "libdevice must be linked, not called externally"


def test_float_mul_add_is_not_contracted_without_fastmath():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    x = load(a, [R(i)])
    value = N.BinOp("add", N.BinOp("mul", x, load(a, [R(i)]), F32), C(1.5, F32), F32)
    fn = kernel("muladd", [a, out], guarded_store_1d(out, i, value))
    assert "fma.rn.f32" not in ptx_of(fn)
    assert "fma.rn" in ptx_of(fn, fastmath=True)


@pytest.mark.parametrize("src", list(SCALARS.values()), ids=str)
def test_casts_from_every_scalar_to_every_scalar(src):
    ps = [N.Param("a", arr(src), 0)] + [N.Param(f"o_{d.name}", arr(d, writable=True), k + 1)
                                         for k, d in enumerate(SCALARS.values())]
    i = N.Var("i", INDEX)
    body = [N.Assign(i, gid())]
    for p in ps[1:]:
        body.append(N.GuardedRegion(P(p), [R(i)], [
            store(p, [R(i)], N.Cast(load(ps[0], [R(i)], src), p.type.dtype))]))
    ptx = assemble_all(kernel(f"cast_{src.name}", ps, body))["sm_90"]
    if src.is_float:   # float -> int saturates (cvt.rzi.sat or an explicit clamp), never UB
        assert "cvt.rzi" in ptx


def test_comparisons_logical_ifexp_and_bool_params():
    ops = ("eq", "ne", "lt", "le", "gt", "ge")
    a, flag = params(("a", arr(F32)), ("flag", BOOL))
    outs = [N.Param(f"o_{op}", arr(BOOL, writable=True), k + 2) for k, op in enumerate(ops)]
    comb = N.Param("comb", arr(BOOL, writable=True), len(ops) + 2)
    i = N.Var("i", INDEX)
    x = load(a, [R(i)])
    cmps = [N.Compare(op, x, C(0.5 + k, F32)) for k, op in enumerate(ops)]
    expr = N.Logical("or", N.Logical("and", P(flag), cmps[0]), N.Logical("and", cmps[2], cmps[5]))
    value = N.UnaryOp("not_", N.IfExp(N.Compare("ne", x, x), P(flag), expr, BOOL), BOOL)
    body = [N.Assign(i, gid()), N.GuardedRegion(P(comb), [R(i)], [store(comb, [R(i)], value)] +
                                                [store(o, [R(i)], c) for o, c in zip(outs, cmps)])]
    ptx = assemble_all(kernel("cmp", [a, flag, *outs, comb], body))["sm_90"]
    assert ".param .b8" in ptx or ".param .u8" in ptx     # bool scalar is one byte (ABI)
    assert "setp.neu.f32" in ptx                           # ne is unordered (NaN != x is True)
    for pred in ("eq", "lt", "le", "gt", "ge"):            # the others are ordered
        assert re.search(rf"setp\.({pred}|{ {'lt': 'gt', 'gt': 'lt', 'le': 'ge', 'ge': 'le'}.get(pred, pred)})\.f32", ptx)


def test_loops_for_range_while_break_continue():
    n, out = params(("n", I64), ("out", arr(I64, writable=True)))
    i, k, acc, step = N.Var("i", INDEX), N.Var("k", I64), N.Var("acc", I64), N.Var("step", I64)
    loop_const = N.ForRange(k, C(0), P(n), C(1), [
        N.If(N.Compare("eq", N.BinOp("mod", R(k), C(3), I64), C(0)), [N.Continue()], []),
        N.If(N.Compare("gt", R(acc), C(1000)), [N.Break()], []),
        N.Assign(acc, N.BinOp("add", R(acc), R(k), I64))])
    loop_neg = N.ForRange(k, P(n), C(0), C(-2), [N.Assign(acc, N.BinOp("sub", R(acc), R(k), I64))])
    loop_dyn = N.ForRange(k, C(0), P(n), R(step), [N.Assign(acc, N.BinOp("xor", R(acc), R(k), I64))])
    loop_while = N.While(N.Compare("lt", R(acc), C(5000)), [
        N.Assign(acc, N.BinOp("add", R(acc), C(7), I64)),
        N.If(N.Compare("eq", R(acc), C(77)), [N.Break()], [N.Continue()])])
    body = [N.Assign(acc, C(0)), N.Assign(step, N.BinOp("sub", C(1), P(n), I64)),
            loop_const, loop_neg, loop_dyn, loop_while] + guarded_store_1d(out, i, R(acc))
    assemble_all(kernel("loops", [n, out], body))


def test_special_registers_and_thread_indices():
    out2, out3 = arr(I64, 2, writable=True), arr(I64, 3, writable=True)
    o1, o2, o3 = params(("o1", arr(I64, writable=True)), ("o2", out2), ("o3", out3))
    regs = [f"{r}.{a}" for r in ("tid", "ntid", "ctaid", "nctaid") for a in "xyz"] + ["laneid", "warpsize"]
    i = N.Var("i", INDEX)
    s = N.Var("s", I64)
    body = [N.Assign(s, C(0))]
    for r in regs:
        body.append(N.Assign(s, N.BinOp("add", R(s), N.Special(r), I64)))
    body += guarded_store_1d(o1, i, R(s))
    idx2 = [gid(0, 2), gid(1, 2)]
    idx3 = [gid(0, 3), gid(1, 3), gid(2, 3)]
    body.append(N.GuardedRegion(P(o2), idx2, [store(o2, idx2, R(s))]))
    body.append(N.GuardedRegion(P(o3), idx3, [store(o3, idx3, R(s))]))
    ptx = assemble_all(kernel("sregs", [o1, o2, o3], body))["sm_90"]
    for reg in ("%tid.y", "%ctaid.z", "%nctaid.x", "%laneid"):
        assert reg in ptx


def test_device_function_calls_inline_and_export():
    x, y = N.Param("x", F32, 0), N.Param("y", F32, 1)
    helper = N.Function("helper", [x, y], F32, [N.Return(N.BinOp("mul", P(x), P(y), F32))], False)
    pa = N.Param("v", arr(F32), 0)
    pi = N.Param("j", I64, 1)
    tup = TupleType((F32, I64))
    getter = N.Function("getter", [pa, pi], tup, [
        N.If(N.Compare("lt", P(pi), C(0)), [N.Return(N.MakeTuple([C(0.0, F32), C(0)]))], []),
        N.Return(N.MakeTuple([load(pa, [P(pi)]), P(pi)]))], False)
    z = N.Param("z", F32, 0)
    exported = N.Function("scale", [z], F32, [N.Return(N.BinOp("add", P(z), C(1.0, F32), F32))], False,
                          export_name="kb_scale")
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i, t = N.Var("i", INDEX), N.Var("t", tup)
    body = [N.Assign(i, gid()), N.GuardedRegion(P(out), [R(i)], [
        N.Assign(t, N.Call(getter, [P(a), R(i)], tup)),
        store(out, [R(i)], N.Call(exported, [N.Call(helper, [N.TupleGet(R(t), 0, F32), C(2.0, F32)], F32)], F32))])]
    ptx = assemble_all(kernel("calls", [a, out], body, callees=[getter, helper, exported]))["sm_90"]
    assert ".visible .func" in ptx and "kb_scale" in ptx        # exported under its C name
    assert "helper" not in ptx                                 # internal ones are inlined away


def test_shared_memory_static_dynamic_and_sync():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    static = N.SharedAlloc("tile", ArrayType(F32, 2, writable=True, space="shared", shape=(8, 32)))
    dyn = N.SharedAlloc("buf", ArrayType(F32, 1, writable=True, space="shared", shape=(-1,)))
    i, tx = N.Var("i", INDEX), N.Var("tx", INDEX)
    body = [N.Assign(i, gid()), N.Assign(tx, N.Special("tid.x")),
            store(N.SharedArray(static), [C(1), N.BinOp("mod", R(tx), C(32), I64)], C(1.0, F32)),
            store(N.SharedArray(dyn), [R(tx)], C(2.0, F32), mode="checked", site=1),
            N.SyncThreads(),
            N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], N.BinOp(
                "add", load(N.SharedArray(static), [C(1), C(3)]),
                load(N.SharedArray(dyn), [N.ArrayLen(N.SharedArray(dyn), 0)], check="fault", site=2),
                F32))])]
    fn = kernel("smem", [a, out], body, shared=[static, dyn], fault_sites=sites((1, "buf"), (2, "buf")))
    ptx = assemble_all(fn)["sm_90"]
    assert ".shared .align 16 .b8" in ptx and "%dynamic_smem_size" in ptx
    assert "bar.sync" in ptx or "barrier.sync" in ptx


ATOMIC_TYPES = {"add": (I32, I64, U32, U64, F32, F64, F16, BF16), "sub": (I32, U32, I64),
                "min": (I32, U32, I64, U64), "max": (I32, U32, I64, U64), "exch": (I32, U64, F32),
                "and_": (I32, U64), "or_": (U32, I64), "xor": (I32, U64), "cas": (I32, U64, F32, F64)}


@pytest.mark.parametrize("op", sorted(ATOMIC_TYPES))
def test_atomics(op):
    ps, body, i = [], [], N.Var("i", INDEX)
    body.append(N.Assign(i, gid()))
    for k, t in enumerate(ATOMIC_TYPES[op]):
        acc = N.Param(f"acc_{t.name}", arr(t, writable=True), 2 * k)
        out = N.Param(f"old_{t.name}", arr(t, writable=True), 2 * k + 1)
        ps += [acc, out]
        args = [C(1, t), C(2, t)] if op == "cas" else [C(3, t)]
        old = N.Atomic(op, P(acc), [C(0)], args, "fault", 1, t)
        body.append(N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], old)]))
    fn = kernel(f"atomic_{op}", ps, body, fault_sites=sites((1, ps[0].name)))
    ptx = assemble_all(fn)["sm_90"]
    assert "atom." in ptx


@pytest.mark.parametrize("t", (F32, F64, I32, I64, U8, I16, F16, BF16, BOOL), ids=str)
def test_warp_ops(t):
    a, out, bal = params(("a", arr(t)), ("out", arr(t, writable=True)), ("bal", arr(U32, writable=True)))
    i, v = N.Var("i", INDEX), N.Var("v", t)
    body = [N.Assign(i, gid()), N.Assign(v, load(a, [N.BinOp("mod", R(i), N.ArrayLen(P(a), 0), I64)], t))]
    for op, arg in (("shfl", C(3, I32)), ("shfl_up", C(1, I32)), ("shfl_down", C(2, I32)),
                    ("shfl_xor", C(5, I32))):
        body.append(N.Assign(v, N.Warp(op, [R(v), arg], t)))
    if t != BOOL:
        body.append(N.Assign(v, N.Warp("sum", [R(v)], t)))
    pred = N.Compare("ne", R(v), N.Const(0, t) if not t.is_float else N.Const(0.0, t))
    b = N.Var("b", U32)
    body += [N.Assign(b, N.Warp("ballot", [pred], U32)),
             N.If(N.Logical("and", N.Warp("any", [pred], BOOL), N.Warp("all", [pred], BOOL)),
                  [N.Assign(b, C(7, U32))], [])]
    body.append(N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], R(v)), store(bal, [R(i)], R(b))]))
    ptx = assemble_all(kernel(f"warp_{t.name}", [a, out, bal], body))["sm_90"]
    assert "shfl.sync" in ptx and "vote.sync.ballot" in ptx


MATH_1 = ("sqrt", "rsqrt", "exp", "exp2", "log", "log2", "log1p", "sin", "cos", "tan", "tanh", "erf",
          "floor", "ceil", "trunc", "fabs")
MATH_2 = ("pow", "copysign", "fmin", "fmax", "fmod")


@pytest.mark.parametrize("t", FLOATS, ids=str)
@pytest.mark.slow
def test_math_functions_link_libdevice(t):
    a, out, flags = params(("a", arr(t)), ("out", arr(t, writable=True)), ("flags", arr(BOOL, writable=True)))
    i, v = N.Var("i", INDEX), N.Var("v", t)
    body = [N.Assign(i, gid()), N.GuardedRegion(P(out), [R(i)], [N.Assign(v, load(a, [R(i)], t))])]
    region = body[1].body
    for fn in MATH_1:
        region.append(N.Assign(v, N.Math(fn, [R(v)], t)))
    for fn in MATH_2:
        region.append(N.Assign(v, N.Math(fn, [R(v), load(a, [R(i)], t)], t)))
    region.append(N.Assign(v, N.Math("fma", [R(v), R(v), load(a, [R(i)], t)], t)))
    region.append(store(out, [R(i)], R(v)))
    region.append(store(flags, [R(i)], N.Logical("or", N.Math("isnan", [R(v)], BOOL),
                                                  N.Math("isinf", [R(v)], BOOL))))
    ptx = assemble_all(kernel(f"math_{t.name}", [a, out, flags], body))["sm_90"]
    assert ".extern" not in ptx                       # nothing left to resolve at link time
    called = set(re.findall(r"call(?:\.uni)?\s+(?:\([^)]*\),\s*)?([\w$]+)", ptx))
    defined = set(re.findall(r"\.func\s+(?:\([^)]*\)\s*)?([\w$]+)\(", ptx))
    assert called <= defined, f"calls to functions not defined in the module: {called - defined}"
    assert not any(name.startswith("__nv_") for name in called)   # __nv_* bodies are inlined


def test_getmut_slot_and_strided_multidim_access():
    a, out = params(("a", arr(F64, 2)), ("out", arr(F64, 2, writable=True)))
    r, c, s = N.Var("r", INDEX), N.Var("c", INDEX), N.Var("s", SlotType(out.type))
    body = [N.Assign(r, gid(0, 2)), N.Assign(c, gid(1, 2)),
            N.Assign(s, N.GetMut(P(out), [R(c), R(r)])),
            N.If(N.SlotCheck(R(s)), [N.SlotSet(R(s), load(a, [R(r), R(c)], F64, "fault", 1))], [])]
    ptx = assemble_all(kernel("slots", [a, out], body, fault_sites=sites((1, "a"))))["sm_90"]
    assert "mul.lo.s64" in ptx   # strides are used for layout "any"


def test_chunk_loop_assembles_with_slow_and_fast_paths():
    a, out = params(("a", arr(F32, layout="C", aligned16=True)),
                    ("out", arr(F32, writable=True, layout="C", aligned16=True)))
    ch, k = N.Var("ch", ChunkType(4)), N.Var("k", INDEX)
    body = [N.Assign(ch, N.ChunkValue(4)),
            N.ChunkLoop(k, R(ch), P(out), [store(out, [R(k)], N.BinOp(
                "mul", load(a, [R(k)]), C(2.0, F32), F32), mode="guarded")])]
    assemble_all(kernel("chunked", [a, out], body))


def test_every_ir_node_class_is_lowered():
    """A guard against adding a node to dsl/ir/nodes.py without a visit_ method in the backend."""
    from dsl.backend.builder import ModuleBuilder
    exprs = [c for c in vars(N).values() if isinstance(c, type) and issubclass(c, N.Expr) and c is not N.Expr]
    stmts = [c for c in vars(N).values() if isinstance(c, type) and issubclass(c, N.Stmt) and c is not N.Stmt]
    missing = [c.__name__ for c in exprs + stmts if not hasattr(ModuleBuilder, "visit_" + c.__name__)]
    assert missing == []
