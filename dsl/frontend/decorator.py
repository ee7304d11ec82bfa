"""Decorator options reported at the `def`: an `OptionError` (dsl/options.py) becomes a DslCompileError
whose caret sits under the offending keyword of the decorator (or the relation / name inside it), and
`grid_from=` is checked against the parameter's annotation."""
from __future__ import annotations

import ast
from typing import Any, Callable, NoReturn

from dsl.errors import DslCompileError
from dsl.options import KernelOptions, OptionError


def _keyword(tree: ast.FunctionDef, option: str) -> ast.expr | None:
    """The value of `option=` in one of the function's decorator calls."""
    for dec in tree.decorator_list:
        if isinstance(dec, ast.Call):
            for kw in dec.keywords:
                if kw.arg == option:
                    return kw.value
    return None


def _item(node: ast.expr, item: Any) -> ast.expr:
    """The constant equal to `item` inside a literal list/tuple (nested pairs too), else `node`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and item is not None and n.value == item:
            return n
    return node


def raise_option_error(pyfunc: Callable, decorator: str, err: OptionError) -> NoReturn:
    """Raise `err` as a DslCompileError at the decorator keyword (the `def` when not found)."""
    from dsl.source import get_source
    name = getattr(pyfunc, "__name__", "kernel")
    message = f"@{decorator} '{name}': {err.message}"
    hint = err.hint or f"see the @{decorator} options in docs/dsl.md"
    try:
        src = get_source(pyfunc)
    except DslCompileError:
        code = getattr(pyfunc, "__code__", None)
        raise DslCompileError(message, file=getattr(code, "co_filename", "<unknown>"),
                              line=getattr(code, "co_firstlineno", 0), hint=hint) from None
    node = _keyword(src.tree, err.option) if err.option else None
    if node is None and err.item is not None:      # a parameter named in the error: point at it
        node = next((a for a in src.tree.args.args if a.arg == err.item), None)
        if node is not None:
            src.error(node, message, hint)
    src.error(_item(node, err.item) if node is not None else src.tree, message, hint)


def check_grid_from(pyfunc: Callable, options: KernelOptions) -> None:
    """`grid_from=` must name an array parameter with at least `domain` axes (read from its
    annotation, evaluated as the front end evaluates it)."""
    from dsl.frontend.annotations import annotation_of
    from dsl.frontend.scope import Scope
    from dsl.source import get_source
    name = options.grid_from
    if name is None:
        return
    src = get_source(pyfunc)
    arg = next((a for a in src.tree.args.args if a.arg == name), None)
    if arg is None:
        raise_option_error(pyfunc, "simt.kernel", OptionError(
            "grid_from", f"grid_from=: '{name}' is not a parameter",
            f"parameters are: {', '.join(a.arg for a in src.tree.args.args)}"))
    ann = annotation_of(src, Scope(pyfunc), arg, "parameter")
    if ann.kind != "array":
        raise_option_error(pyfunc, "simt.kernel", OptionError(
            "grid_from", f"grid_from=: '{name}' is a scalar, not an array",
            "name the array (simt.Array or simt.DisjointSlice) the kernel's threads range over"))
    if ann.ndim < options.domain:
        raise_option_error(pyfunc, "simt.kernel", OptionError(
            "grid_from", f"grid_from=: '{name}' is {ann.ndim}-D, fewer axes than domain={options.domain}",
            f"name an array with at least {options.domain} axes (grid axis d comes from the array's "
            "axis ndim-1-d), or pass grid= at each launch"))
