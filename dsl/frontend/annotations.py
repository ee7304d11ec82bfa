"""What each kernel parameter declares: `simt.Array[T, n]`, `simt.DisjointSlice[T, n]` or a scalar."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Callable

from dsl.frontend.scope import Scope
from dsl.frontend.source import Source, get_source
from dsl.ir import types as irt
from dsl.simt.annotations import ArraySpec
from dsl.types import ScalarDType, is_typevar


@dataclass(frozen=True)
class ParamAnnotation:
    """One parameter: kind "array" | "scalar"; dtype is an IR ScalarType or a TypeVar (generic)."""
    name: str
    kind: str
    dtype: object
    ndim: int = 0
    writable: bool = False

    @property
    def is_generic(self) -> bool:
        return is_typevar(self.dtype)


def _eval_annotation(src: Source, scope: Scope, node: ast.expr) -> object:
    try:
        return eval(compile(ast.Expression(node), src.file, "eval"), scope.namespace())  # noqa: S307
    except Exception as exc:  # the annotation itself is broken: report it where it is written
        src.error(node, f"cannot evaluate this annotation ({type(exc).__name__}: {exc})",
                  "annotate with simt.Array[f32], simt.DisjointSlice[f32, 2] or a dsl scalar type")


def annotation_of(src: Source, scope: Scope, arg: ast.arg, what: str) -> ParamAnnotation:
    """Turn one `ast.arg` into a ParamAnnotation (errors point at the parameter)."""
    if arg.annotation is None:
        src.error(arg, f"{what} '{arg.arg}' has no type annotation",
                  f"write e.g. `{arg.arg}: simt.Array[f32]` or `{arg.arg}: f32`")
    value = _eval_annotation(src, scope, arg.annotation)
    if isinstance(value, ArraySpec):
        dtype = value.dtype.ir if isinstance(value.dtype, ScalarDType) else value.dtype
        return ParamAnnotation(arg.arg, "array", dtype, value.ndim, value.writable)
    if isinstance(value, ScalarDType):
        return ParamAnnotation(arg.arg, "scalar", value.ir)
    if is_typevar(value):
        return ParamAnnotation(arg.arg, "scalar", value)
    if value in (int, float, bool):
        src.error(arg.annotation, f"{what} '{arg.arg}': Python type {value.__name__!r} has no fixed "
                  "width", "use a dsl scalar type such as i32, i64, f32 or f64 (from dsl import f32)")
    if isinstance(value, type) and value.__name__ in ("Array", "DisjointSlice"):
        src.error(arg.annotation, f"{what} '{arg.arg}': {value.__name__} needs a dtype",
                  f"write simt.{value.__name__}[f32] or simt.{value.__name__}[f32, 2]")
    src.error(arg.annotation, f"{what} '{arg.arg}': unsupported annotation {value!r}",
              "annotate with simt.Array[f32], simt.DisjointSlice[f32, 2] or a dsl scalar type")


def check_plain_signature(src: Source, what: str) -> None:
    a = src.tree.args
    extra = a.vararg or a.kwarg or (a.kwonlyargs[0] if a.kwonlyargs else None) or \
        (a.posonlyargs[0] if a.posonlyargs else None)
    if extra is not None:
        src.error(extra, f"{what}s take plain positional parameters only",
                  "remove *args / **kwargs / keyword-only / positional-only markers")
    if a.defaults:
        src.error(a.defaults[0], f"{what} parameters cannot have default values",
                  "pass every argument explicitly")


def parse_signature_annotations(pyfunc: Callable) -> list[ParamAnnotation]:
    """What each parameter of a kernel/device function declares, in order."""
    src = get_source(pyfunc)
    scope = Scope(pyfunc)
    check_plain_signature(src, "kernel")
    return [annotation_of(src, scope, a, "parameter") for a in src.tree.args.args]


def return_annotation(pyfunc: Callable) -> irt.ScalarType | object | None:
    """The declared return type of a device function (ScalarType, TypeVar) or None when absent."""
    src = get_source(pyfunc)
    node = src.tree.returns
    if node is None:
        return None
    value = _eval_annotation(src, Scope(pyfunc), node)
    if value is None:
        return irt.VOID
    if isinstance(value, ScalarDType):
        return value.ir
    if is_typevar(value):
        return value
    src.error(node, f"unsupported return annotation {value!r}",
              "device functions return a dsl scalar type (f32, i32, ...) or nothing")
