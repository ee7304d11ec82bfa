"""Argument binding of tile ops inside a kernel body: `tile.<name>(...)` and the method form
`x.<name>(...)` are bound against their row of the tile-op table (dsl/tile/tileops.py), or of the math
table (dsl/vocab/math.py), and handed to the row's handler (dsl/tile/handlers.py)."""
from __future__ import annotations

import ast
from typing import Any

from dsl.tile import handlers, ops, tileops
from dsl.tile.tileops import Param
from dsl.tile.values import Method, ParamHandle
from dsl.vocab import math as vocab


def bind(fe: Any, call: str, params: tuple[Param, ...], args: list, kwargs: dict, node: ast.AST,
         doc: str = "") -> dict:
    """The arguments by parameter name, defaults filled in. `call` (`tile.sum(x, axis=None, ...)`)
    opens every error, which names the offending argument."""
    if len(args) > len(params):
        n = len(params)
        raise fe.err(node, f"{call} takes at most {n} argument{'s' if n != 1 else ''}, got {len(args)}"
                           + (f": {doc}" if doc else ""))
    names = [p.name for p in params]
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise fe.err(node, f"{call}: unexpected keyword argument `{k}`")
        if k in bound:
            raise fe.err(node, f"{call}: argument `{k}` given twice")
        bound[k] = v
    for p in params:
        if p.name not in bound:
            if p.required:
                raise fe.err(node, f"{call}: missing argument `{p.name}`")
            bound[p.name] = p.default
    return bound


def call_intrinsic(fe: Any, name: str, args: list, kwargs: dict, node: ast.AST) -> object:
    """tile.<name>(...) inside a kernel: its row of the tile-op table, or of the math table."""
    row = tileops.get(name)
    if row is not None:
        a = bind(fe, f"tile.{row.signature()}", row.params, args, kwargs, node, row.doc)
        return _run(fe, row.handler, name, a, node)
    math_row = vocab.get(name)
    if math_row is None:
        raise fe.err(node, f"tile.{name} is no longer a math function (it was removed from the math "
                           "table, dsl/vocab/math.py)")
    params = tuple(Param(p) for p in math_row.params)
    a = bind(fe, f"tile.{name}({', '.join(math_row.params)})", params, args, kwargs, node)
    return _run(fe, handlers.math_row, name, a, node)


def call_method(fe: Any, m: Method, args: list, kwargs: dict, node: ast.AST) -> object:
    """recv.<name>(...): the row's method form, the receiver taking the first parameter (the front
    end makes a Method only for a name of tileops.method_names(receiver kind))."""
    kind = tileops.PARTITION if isinstance(m.receiver, ParamHandle) else tileops.TILE
    row = tileops.method(kind, m.name)
    assert row is not None and row.method is not None
    if row.method.star and args:      # x.reshape(2, 4) or x.reshape((2, 4))
        args = [args[0] if len(args) == 1 and isinstance(args[0], tuple) else tuple(args)]
    a = bind(fe, row.method_signature(_receiver_text(node)), row.method_params(), args, kwargs, node,
             row.doc)
    a[row.params[0].name] = m.receiver
    for p in row.params:
        a.setdefault(p.name, p.default)
    return _run(fe, row.handler, row.name, a, node)


def _receiver_text(node: ast.AST) -> str | None:
    """`v` of `v.sum(...)` for messages; None (the table's `x` / `p`) when it is a longer expression."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        text = ast.unparse(node.func.value)
        return text if len(text) <= 24 else None
    return None


def _run(fe: Any, handler: tileops.Handler, name: str, a: dict, node: ast.AST) -> object:
    try:
        return handler(fe, name, a, node, fe.loc(node))
    except ops.TileTypeError as exc:
        raise fe.err(node, str(exc)) from None

