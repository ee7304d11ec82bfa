"""`simt.extern_device`: call a CUDA C++ `__device__` function from a DSL kernel.

Why a declaration object: the DSL cannot see C++ source, so the C name, its scalar signature and the
files that define it are declared once in Python. The kernel's PTX then only *declares* the function
(`.extern .func`); `dsl.link` resolves it with nvJitLink against the `link` inputs (.cu, .ptx, .ltoir,
.o, .fatbin, .cubin, .a).

    scale = simt.extern_device("cpp_scale", "f32(f32, f32)", link=["scale.cu"])

    @simt.kernel
    def k(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
        i = simt.thread.index_1d()
        out[i] = scale(x[i], f32(2))

The C++ side must have C linkage: `extern "C" __device__ float cpp_scale(float x, float s)`.
Only scalar parameters and a scalar (or no) result cross the boundary: the C ABI of arrays is a plain
pointer, which would lose the DSL's bounds and ownership guarantees.
"""
from __future__ import annotations

import os
import re
from typing import Any, Sequence

from dsl.ir import nodes as N
from dsl.ir import types as irt

_C_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIG = re.compile(r"^\s*(\w+)\s*\((.*)\)\s*$")
LINK_SUFFIXES = (".cu", ".ptx", ".ltoir", ".o", ".fatbin", ".cubin", ".a")


def _scalar(t: Any, what: str) -> irt.Type:
    """An IR scalar type (or VOID for a result) from a dsl type object, an IR type or its name."""
    if t is None or t == "void":
        if what == "result":
            return irt.VOID
        raise TypeError(f"simt.extern_device: {what} cannot be void")
    ir_t = getattr(t, "ir", t)
    if isinstance(ir_t, str):
        ir_t = irt.SCALARS.get(ir_t.strip())
    if not isinstance(ir_t, irt.ScalarType):
        raise TypeError(f"simt.extern_device: {what} must be a scalar dsl type (f32, i32, ...), got {t!r}")
    return ir_t


def parse_signature(signature: Any) -> tuple[irt.Type, tuple[irt.ScalarType, ...]]:
    """`"f32(f32, i32)"`, or `(result, [params...])` with dsl types → (result type, param types)."""
    if isinstance(signature, str):
        m = _SIG.match(signature)
        if not m:
            raise ValueError(f"simt.extern_device: signature {signature!r} is not of the form "
                             "'f32(f32, i32)' (result type, then parameter types in parentheses)")
        ret_s, params_s = m.group(1), m.group(2).strip()
        params = [p.strip() for p in params_s.split(",")] if params_s else []
        ret, ps = ret_s, params
    elif isinstance(signature, (tuple, list)) and len(signature) == 2:
        ret, ps = signature[0], list(signature[1])
    else:
        raise TypeError("simt.extern_device: signature must be 'ret(p0, p1, ...)' or (ret, [p0, p1, ...]), "
                        f"got {signature!r}")
    return _scalar(ret, "result"), tuple(_scalar(p, f"parameter #{i}") for i, p in enumerate(ps))  # type: ignore[misc]


class ExternDevice:
    """A CUDA C++ device function with C linkage, callable from kernels and device functions."""

    def __init__(self, name: str, signature: Any, link: Sequence[str | os.PathLike] = ()) -> None:
        if not isinstance(name, str) or not _C_NAME.match(name):
            raise ValueError(f"simt.extern_device: name must be a C identifier, got {name!r}")
        if isinstance(link, (str, os.PathLike)):
            link = [link]
        paths = []
        for p in link:
            s = os.fspath(p)
            if not s.endswith(LINK_SUFFIXES):
                raise ValueError(f"simt.extern_device({name!r}): link input {s!r} must end in one of "
                                 f"{', '.join(LINK_SUFFIXES)}")
            paths.append(os.path.abspath(s))
        self.name = name
        self.result, self.params = parse_signature(signature)
        self.link = tuple(paths)
        self._ir: N.Function | None = None

    def ir_function(self) -> N.Function:
        """The body-less IR Function (extern_name + link) that kernel calls refer to."""
        if self._ir is None:
            params = [N.Param(f"a{i}", t, i) for i, t in enumerate(self.params)]
            self._ir = N.Function(self.name, params, self.result, [], is_kernel=False,
                                  extern_name=self.name, link=self.link)
        return self._ir

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"extern device function '{self.name}' can only be called from a "
                           "@simt.kernel or a @simt.device function")

    def __repr__(self) -> str:
        ps = ", ".join(str(p) for p in self.params)
        return f"<simt.extern_device {self.name}: {self.result}({ps}) link={list(self.link)}>"

    # -- frontend hook: dsl/frontend/calls.py calls this for `f(...)` inside a kernel -----------------
    def _dsl_call_(self, lowerer: Any, node: Any) -> Any:
        from dsl.frontend import typing_rules as tr
        from dsl.frontend.values import Val
        if len(node.args) != len(self.params):
            lowerer.err(node, f"extern device function '{self.name}' takes {len(self.params)} "
                        f"arguments, got {len(node.args)}")
        args = []
        for i, (a, t) in enumerate(zip(node.args, self.params)):
            s = lowerer.as_scalar(lowerer.expr(a))
            if s is None:
                lowerer.err(a, f"argument #{i} of extern device function '{self.name}' must be a "
                            f"number ({t})", "only scalars cross the C++ boundary")
            args.append(lowerer.rule(a, tr.implicit, s, t, lowerer.loc(a), f"argument #{i}"))
        callee = self.ir_function()
        if callee not in lowerer.callees:
            lowerer.callees.append(callee)
        return Val(N.Call(callee, args, callee.return_type, lowerer.loc(node)))


def extern_device(name: str, signature: Any, link: Sequence[str | os.PathLike] = ()) -> ExternDevice:
    """Declare a CUDA C++ `extern "C" __device__` function that kernels may call (see module doc)."""
    return ExternDevice(name, signature, link)


def link_inputs(fn: N.Function) -> list[str]:
    """The link inputs of every extern function reachable from `fn`, in first-use order, no repeats."""
    seen: set[int] = set()
    out: list[str] = []

    def walk(f: N.Function) -> None:
        if id(f) in seen:
            return
        seen.add(id(f))
        for p in f.link:
            if p not in out:
                out.append(p)
        for c in f.callees:
            walk(c)

    walk(fn)
    return out
