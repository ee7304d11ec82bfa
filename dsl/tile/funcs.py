"""`@tile.func`: helper functions a tile kernel calls, inlined into it at compile time.

A Triton user factors kernels into `@triton.jit` helpers (an online-softmax step, a swizzled block
order, an activation); here the same helper is a plain Python function marked `@tile.func`. Its body
is translated by the calling kernel's front end in the helper's own scope (its parameters bound to the
call's values: tiles, scalars, compile-time numbers and tuples, parameter handles; its own globals),
so errors point into the helper's file with a caret, and the kernel's disk-cache key covers the
helper's source (dsl/cache.py follows `pyfunc`). A helper returns once, at its end (a value, a tuple,
or nothing); helpers may call helpers, not themselves.
"""
from __future__ import annotations

import ast
import inspect
from typing import Any, Callable

from dsl.source import get_source
from dsl.tile import ir as T


class TileFunc:
    """A function marked `@tile.func`: callable only from tile kernels (and other helpers)."""

    def __init__(self, pyfunc: Callable) -> None:
        if not inspect.isfunction(pyfunc):
            raise TypeError(f"@tile.func decorates a Python function, got {type(pyfunc).__name__}")
        self.pyfunc = pyfunc
        self.__name__ = pyfunc.__name__
        self.__qualname__ = pyfunc.__qualname__
        self.__doc__ = pyfunc.__doc__
        self.signature = inspect.signature(pyfunc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"@tile.func {self.__name__}() can only be called inside a @tile.kernel function")

    def __repr__(self) -> str:
        return f"<tile.func {self.__qualname__}>"


def func(fn: Callable) -> TileFunc:
    """Mark `fn` as a helper tile kernels may call (inlined where it is called)."""
    return TileFunc(fn)


def inline_call(fe: Any, tf: TileFunc, args: list, kwargs: dict, node: ast.Call) -> object:
    """Translate `tf`'s body into the kernel `fe` is building, with its parameters bound to the call's
    values; returns the helper's return value (None without one)."""
    stack = fe.inlining
    if tf in stack:
        raise fe.err(node, f"@tile.func {tf.__name__}() calls itself (through "
                           f"{' -> '.join(f.__name__ for f in stack)}); helpers are inlined, so write a loop")
    try:
        bound = tf.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise fe.err(node, f"call of @tile.func {tf.__name__}(): {exc}") from None
    bound.apply_defaults()
    src = get_source(tf.pyfunc)
    body = src.tree.body
    saved = fe.src, fe.globals, fe.env, fe.multi
    scope = dict(tf.pyfunc.__globals__)
    if tf.pyfunc.__closure__:
        scope.update(zip(tf.pyfunc.__code__.co_freevars, (c.cell_contents for c in tf.pyfunc.__closure__)))
    multi = fe.assigned_names(src.tree)
    env = {}
    for pname, value in bound.arguments.items():
        if isinstance(value, T.TExpr) and multi.get(pname, 0) > 0:
            # a parameter the helper assigns is its own local, as in Python: a copy, so an update in a
            # loop carries to the next iteration and the caller's variable is not touched
            var = T.TVar(pname, value.type)
            fe.locals.append(var)
            fe.emit(T.Assign(var, value, fe.loc(node)))
            env[pname] = var
        else:
            env[pname] = value        # read-only: the value itself (a load stays a load for the products)
    fe.src, fe.globals, fe.env, fe.multi = src, scope, env, multi
    stack.append(tf)
    try:
        for k, stmt in enumerate(body):
            if isinstance(stmt, ast.Return):
                if k != len(body) - 1:
                    raise fe.err(stmt, f"@tile.func {tf.__name__}() returns once, at its end (code after "
                                       "this `return` would never run)")
                return None if stmt.value is None else fe.expr(stmt.value)
            _refuse_nested_return(fe, tf, stmt)
            fe.stmt(stmt)
        return None
    finally:
        stack.pop()
        fe.src, fe.globals, fe.env, fe.multi = saved


def _refuse_nested_return(fe: Any, tf: TileFunc, stmt: ast.stmt) -> None:
    for n in ast.walk(stmt):
        if isinstance(n, ast.Return):
            raise fe.err(n, f"@tile.func {tf.__name__}() returns once, at its end; a `return` inside "
                            "`if`/`for` is not supported (assign a variable and return it last)")
