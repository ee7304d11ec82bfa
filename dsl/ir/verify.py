"""Structural and type checks on typed IR, run between the frontend and the code generator.

A failure here is a compiler bug (the frontend should have reported a DslCompileError), so the error
names the node, its source location and what was expected, to make the bug easy to find.
"""
from __future__ import annotations

from dataclasses import fields
from typing import Iterator

from dsl.errors import DslCompileStageError
from dsl.ir import nodes as N
from dsl.ir.types import (BOOL, INDEX, ArrayType, ChunkType, ScalarType, SlotType, ThreadIndexType,
                          TupleType, VoidType)

FLOAT_ONLY = {"truediv", "copysign"}
INT_ONLY = {"and_", "or_", "xor", "lshift", "rshift"}
BINOPS = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and_", "or_", "xor", "lshift",
          "rshift", "min", "max", "copysign"}


class IRVerifyError(DslCompileStageError):
    def __init__(self, msg: str, loc: N.Loc = N.NOLOC):
        super().__init__(f"{loc}: invalid IR: {msg}")
        self.loc = loc


def children(node) -> Iterator[object]:
    """Direct IR children (expressions and statements) of a node, in field order."""
    for f in fields(node):
        if f.name in ("callee", "var", "param", "alloc", "loc", "type"):
            continue
        v = getattr(node, f.name)
        if isinstance(v, (N.Expr, N.Stmt)):
            yield v
        elif isinstance(v, list):
            yield from (x for x in v if isinstance(x, (N.Expr, N.Stmt)))


def walk(node) -> Iterator[object]:
    yield node
    for c in children(node):
        yield from walk(c)


def callees_of(fn: N.Function) -> list[N.Function]:
    """Every function reachable through Call nodes (and Function.callees), each once, in order."""
    out: list[N.Function] = []
    seen = {id(fn)}
    todo = [fn]
    while todo:
        f = todo.pop(0)
        found = list(f.callees)
        for s in f.body:
            found += [n.callee for n in walk(s) if isinstance(n, N.Call)]
        for c in found:
            if id(c) not in seen:
                seen.add(id(c))
                out.append(c)
                todo.append(c)
    return out


class _Verifier:
    def __init__(self, fn: N.Function, root: N.Function) -> None:
        self.fn = fn
        self.sites = {s.id for s in root.fault_sites}
        self.loop_depth = 0

    def fail(self, msg: str, node) -> None:
        raise IRVerifyError(f"{self.fn.name}: {type(node).__name__}: {msg}", getattr(node, "loc", N.NOLOC))

    def scalar(self, e, what: str) -> ScalarType:
        t = e.type
        if not isinstance(t, ScalarType):
            self.fail(f"{what} must be a scalar, got {t}", e)
        return t

    def index(self, e, what: str) -> None:
        t = self.scalar(e, what)
        if not t.is_int:
            self.fail(f"{what} must be an integer index, got {t}", e)

    def array(self, e, what: str) -> ArrayType:
        t = e.type
        if not isinstance(t, ArrayType):
            self.fail(f"{what} must be an array, got {t}", e)
        return t

    def access(self, node, indices, check_or_mode: str, site: int) -> ArrayType:
        t = self.array(node.array, "indexed value")
        if len(indices) != t.ndim:
            self.fail(f"{t.ndim}-d array indexed with {len(indices)} indices", node)
        for i in indices:
            self.index(i, "index")
        if check_or_mode in ("fault", "checked") and site not in self.sites:
            self.fail(f"fault site {site} is not declared in Function.fault_sites", node)
        return t

    # ------------------------------------------------------------------ expressions
    def expr(self, e) -> None:
        if not isinstance(e, N.Expr):
            self.fail(f"expected an expression, got {type(e).__name__}", e)
        for c in children(e):
            self.expr(c)
        m = getattr(self, "x_" + type(e).__name__, None)
        if m:
            m(e)

    def x_BinOp(self, e: N.BinOp) -> None:
        if e.op not in BINOPS:
            self.fail(f"unknown operator {e.op!r}", e)
        t, lt = e.type, self.scalar(e.lhs, "left operand")
        rt = self.scalar(e.rhs, "right operand")
        if e.op in ("lshift", "rshift") or e.op == "pow":
            ok = lt == t and (rt == t or rt.is_int or (e.op == "pow" and rt.is_float and t.is_float))
        else:
            ok = lt == t and rt == t
        if not ok:
            self.fail(f"{e.op} operands ({lt}, {rt}) do not match result type {t}", e)
        if e.op in FLOAT_ONLY and not t.is_float:
            self.fail(f"{e.op} needs float operands, got {t}", e)
        if e.op in INT_ONLY and t.is_float:
            self.fail(f"{e.op} needs integer operands, got {t}", e)

    def x_UnaryOp(self, e: N.UnaryOp) -> None:
        t = self.scalar(e.operand, "operand")
        if t != e.type or (e.op == "not_" and t != BOOL) or (e.op == "invert" and not t.is_int):
            self.fail(f"{e.op} on {t} cannot give {e.type}", e)

    def x_Compare(self, e: N.Compare) -> None:
        if self.scalar(e.lhs, "left operand") != self.scalar(e.rhs, "right operand"):
            self.fail(f"comparison of different types {e.lhs.type} and {e.rhs.type}", e)

    def x_Logical(self, e: N.Logical) -> None:
        if e.lhs.type != BOOL or e.rhs.type != BOOL:
            self.fail("and/or operands must be bool", e)

    def x_IfExp(self, e: N.IfExp) -> None:
        if e.cond.type != BOOL or e.then.type != e.type or e.else_.type != e.type:
            self.fail(f"conditional expression: cond must be bool and both sides {e.type}", e)

    def x_Cast(self, e: N.Cast) -> None:
        self.scalar(e.operand, "cast operand")

    def x_ArrayLen(self, e: N.ArrayLen) -> None:
        if not 0 <= e.axis < self.array(e.array, "len() argument").ndim:
            self.fail(f"axis {e.axis} out of range", e)

    def x_Load(self, e: N.Load) -> None:
        t = self.access(e, e.indices, e.check, e.site)
        if t.dtype != e.type:
            self.fail(f"load of {t.dtype} typed {e.type}", e)

    def x_Atomic(self, e: N.Atomic) -> None:
        t = self.access(e, e.indices, e.check, e.site)
        if t.dtype != e.type or any(a.type != e.type for a in e.args):
            self.fail(f"atomic on {t.dtype} with operands {[a.type for a in e.args]}", e)
        if len(e.args) != (2 if e.op == "cas" else 1):
            self.fail(f"atomic {e.op} takes {2 if e.op == 'cas' else 1} value(s)", e)

    def x_TupleGet(self, e: N.TupleGet) -> None:
        t = e.value.type
        n = t.ndim if isinstance(t, ThreadIndexType) else len(t.elems) if isinstance(t, TupleType) else -1
        if not 0 <= e.k < n:
            self.fail(f"component {e.k} of {t}", e)

    def x_ChunkStart(self, e: N.ChunkStart) -> None:
        if not isinstance(e.chunk.type, ChunkType):
            self.fail("chunk start of a non-chunk", e)

    def x_Call(self, e: N.Call) -> None:
        ps = e.callee.params
        if len(ps) != len(e.args) or any(p.type != a.type for p, a in zip(ps, e.args)):
            self.fail(f"call of {e.callee.name} with argument types {[a.type for a in e.args]}, "
                      f"expected {[p.type for p in ps]}", e)

    def x_SlotCheck(self, e: N.SlotCheck) -> None:
        if not isinstance(e.slot.type, SlotType):
            self.fail("`is not None` test of a non-slot", e)

    # ------------------------------------------------------------------ statements
    def block(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s) -> None:
        if not isinstance(s, N.Stmt):
            self.fail(f"expected a statement, got {type(s).__name__}", s)
        m = getattr(self, "s_" + type(s).__name__, None)
        if m is None:
            self.fail("unknown statement", s)
        m(s)

    def s_Assign(self, s: N.Assign) -> None:
        self.expr(s.value)
        if s.var.type != s.value.type and not isinstance(s.var.type, (ChunkType,)):
            self.fail(f"variable {s.var.name!r} of type {s.var.type} assigned {s.value.type}", s)

    def s_ExprStmt(self, s: N.ExprStmt) -> None:
        self.expr(s.value)

    def s_Store(self, s: N.Store) -> None:
        for c in children(s):
            self.expr(c)
        t = self.access(s, s.indices, s.mode, s.site)
        if s.mode not in ("guarded", "checked", "unchecked"):
            self.fail(f"unknown store mode {s.mode!r}", s)
        if not t.writable:
            self.fail("store into a read-only Array", s)
        if s.value.type != t.dtype:
            self.fail(f"store of {s.value.type} into {t}", s)

    def s_SlotSet(self, s: N.SlotSet) -> None:
        self.expr(s.slot)
        self.expr(s.value)
        if not isinstance(s.slot.type, SlotType) or s.slot.type.array.dtype != s.value.type:
            self.fail("slot.set() with a value of the wrong type", s)

    def s_GuardedRegion(self, s: N.GuardedRegion) -> None:
        for c in [s.array, *s.indices]:
            self.expr(c)
        self.access(s, s.indices, "none", 0)
        self.block(s.body)

    def s_If(self, s: N.If) -> None:
        self.expr(s.cond)
        if s.cond.type != BOOL:
            self.fail(f"if condition must be bool, got {s.cond.type}", s)
        self.block(s.then)
        self.block(s.else_)

    def _loop(self, body) -> None:
        self.loop_depth += 1
        self.block(body)
        self.loop_depth -= 1

    def s_While(self, s: N.While) -> None:
        self.expr(s.cond)
        if s.cond.type != BOOL:
            self.fail("while condition must be bool", s)
        self._loop(s.body)

    def s_ForRange(self, s: N.ForRange) -> None:
        for c in (s.start, s.stop, s.step):
            self.expr(c)
            if c.type != s.var.type:
                self.fail(f"range bound of type {c.type} for a loop variable of type {s.var.type}", s)
        self.index(s.start, "range bound")
        if not (isinstance(s.unroll, int) and not isinstance(s.unroll, bool) and 1 <= s.unroll <= 64):
            self.fail(f"loop unroll factor {s.unroll!r}, expected an int from 1 to 64", s)
        self._loop(s.body)

    def s_ChunkLoop(self, s: N.ChunkLoop) -> None:
        self.expr(s.chunk)
        self.expr(s.array)
        if not isinstance(s.chunk.type, ChunkType):
            self.fail("chunk loop over a non-chunk", s)
        t = self.array(s.array, "chunked array")
        if t.ndim != s.chunk.type.ndim or len(s.lead) != t.ndim - 1:
            self.fail(f"a {s.chunk.type.ndim}-d chunk over a {t.ndim}-d array with {len(s.lead)} row indices", s)
        for e in s.lead:
            self.expr(e)
            self.index(e, "chunk row index")
        self._loop(s.body)

    def s_Break(self, s) -> None:
        if not self.loop_depth:
            self.fail("break outside a loop", s)

    s_Continue = s_Break

    def s_Return(self, s: N.Return) -> None:
        rt = self.fn.return_type
        if s.value is None:
            if not isinstance(rt, VoidType):
                self.fail(f"return without a value in a function returning {rt}", s)
            return
        self.expr(s.value)
        if self.fn.is_kernel or s.value.type != rt:
            self.fail(f"return of {s.value.type} from a function returning {rt}", s)

    def s_SyncThreads(self, s) -> None:
        pass


def verify_function(fn: N.Function) -> N.Function:
    """Check a kernel and every device function it calls; returns `fn` (so it chains as a stage)."""
    if fn.is_kernel and not isinstance(fn.return_type, VoidType):
        raise IRVerifyError(f"kernel {fn.name} must return void, returns {fn.return_type}", fn.loc)
    ids = [s.id for s in fn.fault_sites]
    if len(set(ids)) != len(ids):
        raise IRVerifyError(f"{fn.name}: duplicate fault site ids {ids}", fn.loc)
    for f in [fn, *callees_of(fn)]:
        if f.extern_name is None:
            _Verifier(f, fn).block(f.body)
    return fn


__all__ = ["IRVerifyError", "verify_function", "walk", "children", "callees_of", "INDEX"]
