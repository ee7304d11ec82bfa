"""Helpers for code-generator tests: terse typed-IR builders, compile-to-PTX, ptxas assembly.

ptxas policy: when ptxas is missing, tests that need it skip with the reason — except under CI=true,
where they fail (CI images must have the CUDA toolkit).
"""
from __future__ import annotations

import os
import re

import pytest

from dsl.backend.ptxas import assemble, find_ptxas
from dsl.compiler import CompileContext, run_pipeline
from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, I64, INDEX, ArrayType, ScalarType
from dsl.options import KernelOptions

LOC = N.Loc("k.py", 3, 5, "out[i] = a[i]")
ARCHS = ("sm_80", "sm_90")


def require_ptxas() -> str:
    exe = find_ptxas()
    if exe is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("ptxas is required under CI=true but was not found")
        pytest.skip("ptxas not installed (CUDA toolkit missing)")
    return exe


# ---------------------------------------------------------------------------- IR builders
def arr(dtype: ScalarType, ndim: int = 1, writable: bool = False, layout: str = "any",
        aligned16: bool = False) -> ArrayType:
    return ArrayType(dtype, ndim, writable=writable, layout=layout, aligned16=aligned16)


def params(*specs) -> list[N.Param]:
    return [N.Param(name, t, k) for k, (name, t) in enumerate(specs)]


def P(p: N.Param) -> N.ParamRef:
    return N.ParamRef(p)


def R(v: N.Var) -> N.ReadVar:
    return N.ReadVar(v)


def C(value, t: ScalarType = I64) -> N.Const:
    return N.Const(value, t)


def gid(k: int = 0, ndim: int = 1) -> N.TupleGet:
    return N.TupleGet(N.ThreadIndexValue(ndim), k, INDEX)


def load(p, idx, t: ScalarType = F32, check: str = "none", site: int = 0) -> N.Load:
    return N.Load(p if isinstance(p, N.Expr) else P(p), list(idx), check, site, t, LOC)


def store(p, idx, value, mode: str = "unchecked", site: int = 0) -> N.Store:
    return N.Store(p if isinstance(p, N.Expr) else P(p), list(idx), value, mode, site, LOC)


def kernel(name: str, ps: list[N.Param], body: list, **kw) -> N.Function:
    return N.Function(name, ps, N.VOID, body, True, **kw)


def sites(*spec: tuple[int, str]) -> list[N.FaultSite]:
    return [N.FaultSite(i, a, LOC) for i, a in spec]


def guarded_store_1d(out: N.Param, i: N.Var, value) -> list[N.Stmt]:
    """`i = index_1d(); out[i] = value` as the frontend lowers it (GuardedRegion + unchecked store)."""
    return [N.Assign(i, gid()),
            N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], value)])]


# ---------------------------------------------------------------------------- compile + check
def to_stage(fn: N.Function, stop: str = "ptx", arch: str = "sm_90", **options):
    ctx = CompileContext(None, [p.type for p in fn.params], KernelOptions(**options), arch,
                         kernel_name=fn.name)
    return run_pipeline(fn, ctx, start="verify", stop=stop)


def ptx_of(fn: N.Function, arch: str = "sm_90", **options) -> str:
    ptx = to_stage(fn, "ptx", arch, **options)
    assert f".entry {fn.name}(" in ptx, "PTX has no .entry for the kernel"
    assert not re.search(r"\btrap\b", ptx), "PTX must never contain trap"
    return ptx


def assemble_all(fn: N.Function, archs=ARCHS, **options) -> dict[str, str]:
    """Compile for each arch, assemble with ptxas; returns {arch: ptx}."""
    require_ptxas()
    out = {}
    for arch in archs:
        ptx = ptx_of(fn, arch, **options)
        assemble(ptx, arch)
        out[arch] = ptx
    return out


def entry_body(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    return ptx[start:]


__all__ = [n for n in dir() if not n.startswith("_")] + ["BOOL", "F32", "I64", "INDEX"]
