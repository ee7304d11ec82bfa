"""What each kernel parameter declares: the ONE annotation parser of both programming models.

    simt.Array[T, n] / simt.DisjointSlice[T, n]        (SIMT kernels and device functions)
    tile.Array[T, n] / tile.Partition[T, n] / tile.Atomic[T, n] / tile.Constant[...]
                                                       (tile kernels; dtype and ndim optional)
    a dsl scalar type (f32, i64, ...) or a dsl.TypeVar  (both)

Light on purpose: a kernel's first launch in a fresh process with a warm disk cache parses its
annotations, so this module reads them from the function object (`__code__`, `__annotations__`,
string annotations evaluated in the function's globals and closure) and imports neither the front
ends nor `ast`/`inspect`. Only a mistake reads the source (dsl/source.py), to put the error at
the parameter or annotation with the front ends' caret. Errors are `AnnotationError`, both a
`DslCompileError` (file:line:col, caret, hint) and a `TypeError` (an annotation of the wrong type).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dsl.errors import DslCompileError
from dsl.ir import types as irt
from dsl.types import ScalarDType, is_typevar

MODELS = ("simt", "tile")
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08
_HINTS = {
    "simt": "annotate with simt.Array[f32], simt.DisjointSlice[f32, 2] or a dsl scalar type",
    "tile": "annotate with tile.Array[f32], tile.Partition[f32, 2], tile.Constant[int] or a dsl scalar type",
}
_EXAMPLE = {"simt": "simt.Array[f32]", "tile": "tile.Array[f32]"}


class AnnotationError(DslCompileError, TypeError):
    """A parameter annotation that neither model accepts, or a signature with *args, keyword-only or
    positional-only parameters or defaults; located at the parameter (or the def)."""


@dataclass(frozen=True)
class ParamAnnotation:
    """One parameter. kind: "array" (simt.Array/DisjointSlice, tile.Array), "partition"
    (tile.Partition), "scalar" or "const" (tile.Constant). dtype: an IR ScalarType, a TypeVar
    (generic) or None (tile: any dtype). ndim: the declared number of axes (None: any, tile arrays
    without one; 0 for scalars). writable: DisjointSlice, Partition and tile.Atomic (an "array")."""
    name: str
    kind: str
    dtype: object
    ndim: int | None = 0
    writable: bool = False
    model: str = field(default="simt", repr=False, compare=False)
    optional: bool = field(default=False, repr=False)   # simt arrays: `simt.Array[f32] | None` (None may be passed)

    @property
    def is_generic(self) -> bool:
        return is_typevar(self.dtype)

    def spelling(self) -> str:
        """The annotation as the user writes it (`simt.DisjointSlice[f32, 2]`), for compile errors."""
        from dsl.typevars import typevar_name
        dtype = typevar_name(self.dtype) if self.is_generic else str(self.dtype)
        if self.kind == "scalar":
            return dtype
        if self.kind == "array" and self.model == "simt":
            kind = "simt.DisjointSlice" if self.writable else "simt.Array"
            opt = " | None" if self.optional else ""
            return f"{kind}[{dtype}{', ' + str(self.ndim) if self.ndim and self.ndim > 1 else ''}]{opt}"
        kind = {"array": "tile.Atomic" if self.writable else "tile.Array", "partition": "tile.Partition",
                "const": "tile.Constant"}.get(self.kind, self.kind)
        return kind if self.dtype is None else f"{kind}[{dtype}]"


class _Bad(Exception):
    """A refusal found without the source: message, hint, and what to point at ("annotation", "arg",
    "signature")."""

    def __init__(self, message: str, hint: str, target: str = "annotation") -> None:
        super().__init__(message)
        self.message, self.hint, self.target = message, hint, target


# ---------------------------------------------------------------------------------- classification
def classify(name: str, value: object, model: str, what: str = "parameter") -> ParamAnnotation:
    """The ParamAnnotation of one evaluated annotation `value` of parameter `name` for `model`, or
    _Bad. Both front doors below use it, so both models accept and refuse the same way."""
    from dsl.vocab.simt import ArraySpec
    if isinstance(value, ArraySpec):
        if model != "simt":
            raise _Bad(f"{what} '{name}': unsupported annotation {value!r}", _HINTS[model])
        dtype = value.dtype.ir if isinstance(value.dtype, ScalarDType) else value.dtype
        return ParamAnnotation(name, "array", dtype, value.ndim, value.writable, model, value.optional)
    tile_kind = _tile_marker(value)
    if tile_kind is not None:
        if model != "tile":
            raise _Bad(f"{what} '{name}': unsupported annotation {value!r}", _HINTS[model])
        return _tile_annotation(name, tile_kind, getattr(value, "args", ()), what)
    scalar = _scalar(value)
    if scalar is not None:
        return ParamAnnotation(name, "scalar", scalar, 0, False, model)
    if is_typevar(value):
        return ParamAnnotation(name, "scalar", value, 0, False, model)
    if value in (int, float, bool):
        raise _Bad(f"{what} '{name}': Python type {value.__name__!r} has no fixed width",  # type: ignore[union-attr]
                   "use a dsl scalar type such as i32, i64, f32 or f64 (from dsl import f32)")
    if isinstance(value, type) and value.__name__ in ("Array", "DisjointSlice") and \
            value.__module__ == "dsl.vocab.simt":
        raise _Bad(f"{what} '{name}': {value.__name__} needs a dtype",
                   f"write simt.{value.__name__}[f32] or simt.{value.__name__}[f32, 2]")
    raise _Bad(f"{what} '{name}': unsupported annotation {value!r}", _HINTS[model])


def _scalar(value: object) -> irt.ScalarType | None:
    if isinstance(value, ScalarDType):
        return value.ir
    return value if isinstance(value, irt.ScalarType) else None


def _tile_marker(value: object) -> str | None:
    """"Array" / "Partition" / "Constant" for the tile model's annotation objects, else None. Read
    through sys.modules: an object of a module that was never imported cannot be one of them."""
    import sys
    api, host = sys.modules.get("dsl.tile.api"), sys.modules.get("dsl.tile.host")
    if api is not None and isinstance(value, api._Annot):
        return value.kind
    if host is not None and value is host.Partition:
        return "Partition"
    return None


def _tile_annotation(name: str, kind: str, args: tuple, what: str) -> ParamAnnotation:
    if kind == "Constant":
        return ParamAnnotation(name, "const", None, None, False, "tile")
    spelled = f"tile.{kind}[dtype] or tile.{kind}[dtype, ndim]"
    if len(args) > 2:
        raise _Bad(f"{what} '{name}': {spelled} expected, got {len(args)} items", f"write e.g. tile.{kind}[f32, 2]")
    dtype: object = None
    if args:
        dtype = args[0] if is_typevar(args[0]) else _scalar(args[0])
        if dtype is None:
            raise _Bad(f"{what} '{name}': {args[0]!r} is not a dtype",
                       "use a dsl scalar type (f32, f16, bf16, i32, ...) or a dsl.TypeVar")
    ndim = args[1] if len(args) == 2 else None
    if ndim is not None and (not isinstance(ndim, int) or isinstance(ndim, bool) or ndim < 1):
        raise _Bad(f"{what} '{name}': ndim must be a positive int, got {ndim!r}", f"write e.g. tile.{kind}[f32, 2]")
    kind_l = "partition" if kind == "Partition" else "array"     # tile.Atomic: a writable array
    return ParamAnnotation(name, kind_l, dtype, ndim, kind != "Array", "tile")


# ---------------------------------------------------------------------------------- from a function
def plain_signature_problem(code: Any, defaults: object, what: str) -> _Bad | None:
    """*args / **kwargs / keyword-only / positional-only parameters or defaults, from the code object."""
    if code.co_flags & (_CO_VARARGS | _CO_VARKEYWORDS) or code.co_kwonlyargcount or code.co_posonlyargcount:
        return _Bad(f"{what}s take plain positional parameters only",
                    "remove *args / **kwargs / keyword-only / positional-only markers", "signature")
    if defaults:
        return _Bad(f"{what} parameters cannot have default values", "pass every argument explicitly", "default")
    return None


def parse_annotations(pyfunc: Callable, model: str = "simt", what: str = "kernel") -> list[ParamAnnotation]:
    """What each positional parameter of `pyfunc` declares, in order (`model`: "simt" or "tile";
    `what`: "kernel" or "device function", for messages). Raises AnnotationError at the mistake."""
    code = getattr(pyfunc, "__code__", None)
    if code is None:                          # not a Python function: the front end's error for it
        from dsl.source import get_source
        get_source(pyfunc)
        raise AnnotationError(f"{pyfunc!r} is not a Python function", hint="decorate a `def` function")
    bad = plain_signature_problem(code, getattr(pyfunc, "__defaults__", None), what)
    if bad is not None:
        _raise(pyfunc, None, bad)
    names = code.co_varnames[:code.co_argcount]
    try:
        hints = dict(pyfunc.__annotations__)
    except Exception as exc:  # noqa: BLE001 - deferred annotations (PEP 649) that fail to evaluate
        _raise(pyfunc, None, _Bad(f"cannot evaluate the annotations ({type(exc).__name__}: {exc})", _HINTS[model], "def"))
    out = []
    namespace: dict | None = None
    for name in names:
        if name not in hints:
            _raise(pyfunc, name, _Bad(f"parameter '{name}' has no type annotation",
                                      f"write e.g. `{name}: {_EXAMPLE[model]}` or `{name}: f32`", "arg"))
        value = hints[name]
        if isinstance(value, str):           # `from __future__ import annotations`: evaluate it as Python would
            namespace = namespace if namespace is not None else _namespace(pyfunc)
            try:
                value = eval(value, namespace)  # noqa: S307 - the user's own annotation text
            except Exception as exc:  # noqa: BLE001 - the annotation itself is broken: report it there
                _raise(pyfunc, name, _Bad(f"cannot evaluate this annotation ({type(exc).__name__}: {exc})",
                                          _HINTS[model]))
        try:
            out.append(classify(name, value, model))
        except _Bad as b:
            _raise(pyfunc, name, b)
    return out


def closure_vars(pyfunc: Callable) -> dict[str, Any]:
    """Values of the function's closure cells (empty cells are left out)."""
    code = getattr(pyfunc, "__code__", None)
    if code is None:
        return {}
    out: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, getattr(pyfunc, "__closure__", None) or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            continue
    return out


def _namespace(pyfunc: Callable) -> dict:
    """Globals with the closure cells over them (the names an annotation may use)."""
    return {**getattr(pyfunc, "__globals__", {}), **closure_vars(pyfunc)}


def _raise(pyfunc: Callable, name: str | None, bad: _Bad) -> None:
    """Raise AnnotationError at the parameter `name` (its annotation, the parameter itself, or the
    signature's offending part), read from the source; without readable source at the def line."""
    from dsl.source import error_position, get_source
    try:
        src = get_source(pyfunc)
    except DslCompileError:
        code = pyfunc.__code__
        raise AnnotationError(bad.message, file=code.co_filename, line=code.co_firstlineno,
                              hint=bad.hint) from None
    a = src.tree.args
    node: Any = src.tree
    if bad.target == "signature":
        node = a.vararg or a.kwarg or (a.kwonlyargs[0] if a.kwonlyargs else None) or \
            (a.posonlyargs[0] if a.posonlyargs else None) or src.tree
    elif bad.target == "default":
        node = a.defaults[0] if a.defaults else src.tree
    elif name is not None:
        arg = next((x for x in a.args if x.arg == name), None)
        if arg is not None:
            node = arg if bad.target == "arg" or arg.annotation is None else arg.annotation
    raise AnnotationError(bad.message, hint=bad.hint, **error_position(src.span(node))) from None


def error_at(src: Any, node: Any, bad: _Bad) -> None:
    """Raise AnnotationError for `bad` at an AST node of a parsed Source (the AST front door)."""
    from dsl.source import error_position
    raise AnnotationError(bad.message, hint=bad.hint, **error_position(src.span(node))) from None
