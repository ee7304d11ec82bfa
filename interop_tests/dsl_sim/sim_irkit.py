"""Terse builders for hand-written typed IR, so simulator tests do not depend on the front end."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, I64, ArrayType, ScalarType

LOC = N.Loc("kernels.py", 1, 1, "")


def loc(line: int, text: str) -> N.Loc:
    return N.Loc("kernels.py", line, 5, text)


def arr(dtype: ScalarType, ndim: int = 1, writable: bool = False) -> ArrayType:
    return ArrayType(dtype, ndim, writable=writable)


def params(*specs) -> list[N.Param]:
    return [N.Param(name, t, k) for k, (name, t) in enumerate(specs)]


def P(p: N.Param) -> N.ParamRef:
    return N.ParamRef(p)


def R(v: N.Var) -> N.ReadVar:
    return N.ReadVar(v)


def C(value, t: ScalarType = I64) -> N.Const:
    return N.Const(value, t)


def bop(op: str, a, b, t: ScalarType = I64) -> N.BinOp:
    return N.BinOp(op, a, b, t)


def cmp(op: str, a, b) -> N.Compare:
    return N.Compare(op, a, b)


def load(p, idx, t: ScalarType = F32, check: str = "none", site: int = 0, at: N.Loc = LOC) -> N.Load:
    return N.Load(p if isinstance(p, N.Expr) else P(p), list(idx), check, site, t, at)


def store(p, idx, value, mode: str = "unchecked", site: int = 0, at: N.Loc = LOC) -> N.Store:
    return N.Store(p if isinstance(p, N.Expr) else P(p), list(idx), value, mode, site, at)


def gid(k: int = 0, ndim: int = 1) -> N.TupleGet:
    return N.TupleGet(N.ThreadIndexValue(ndim), k, I64)


def sp(name: str) -> N.Special:
    return N.Special(name)


def kernel(name: str, ps: list[N.Param], body: list, **kw) -> N.Function:
    return N.Function(name, ps, N.VOID, body, True, **kw)


def guarded(p: N.Param, idx: list, body: list) -> N.GuardedRegion:
    return N.GuardedRegion(P(p), list(idx), body)


__all__ = ["BOOL", "F32", "I64"]
