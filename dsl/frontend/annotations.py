"""The SIMT front end's door to the one annotation parser (dsl/annotations.py): the same
classification and errors, for callers that hold the parsed source (the lowering of kernels and
device functions, `grid_from=` checks). `parse_signature_annotations` is the parser itself."""
from __future__ import annotations

import ast
from typing import Callable

from dsl.annotations import AnnotationError, ParamAnnotation, _Bad, classify, error_at, parse_annotations
from dsl.frontend.scope import Scope
from dsl.source import Source, get_source
from dsl.ir import types as irt
from dsl.types import ScalarDType, is_typevar

__all__ = ["ParamAnnotation", "AnnotationError", "annotation_of", "check_plain_signature",
           "parse_signature_annotations", "return_annotation"]
_SIMT_HINT = "annotate with simt.Array[f32], simt.DisjointSlice[f32, 2] or a dsl scalar type"


def _eval_annotation(src: Source, scope: Scope, node: ast.expr) -> object:
    try:
        return eval(compile(ast.Expression(node), src.file, "eval"), scope.namespace())  # noqa: S307
    except Exception as exc:  # the annotation itself is broken: report it where it is written
        error_at(src, node, _Bad(f"cannot evaluate this annotation ({type(exc).__name__}: {exc})", _SIMT_HINT))


def annotation_of(src: Source, scope: Scope, arg: ast.arg, what: str) -> ParamAnnotation:
    """Turn one `ast.arg` into a ParamAnnotation (errors point at the parameter)."""
    if arg.annotation is None:
        error_at(src, arg, _Bad(f"{what} '{arg.arg}' has no type annotation",
                                f"write e.g. `{arg.arg}: simt.Array[f32]` or `{arg.arg}: f32`"))
    value = _eval_annotation(src, scope, arg.annotation)
    try:
        return classify(arg.arg, value, "simt", what)
    except _Bad as bad:
        error_at(src, arg.annotation if bad.target == "annotation" else arg, bad)
        raise   # unreachable: error_at raises


def check_plain_signature(src: Source, what: str) -> None:
    a = src.tree.args
    extra = a.vararg or a.kwarg or (a.kwonlyargs[0] if a.kwonlyargs else None) or \
        (a.posonlyargs[0] if a.posonlyargs else None)
    if extra is not None:
        error_at(src, extra, _Bad(f"{what}s take plain positional parameters only",
                                  "remove *args / **kwargs / keyword-only / positional-only markers"))
    if a.defaults:
        error_at(src, a.defaults[0], _Bad(f"{what} parameters cannot have default values",
                                          "pass every argument explicitly"))


def parse_signature_annotations(pyfunc: Callable) -> list[ParamAnnotation]:
    """What each parameter of a kernel declares, in order (the one parser, SIMT model)."""
    return parse_annotations(pyfunc, "simt", "kernel")


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
