"""Loop-local index variables inlined into the tile loads they index:

    for i in range(lo, hi):
        qb = q0 + i
        qi = tile.load(q, (qb, 0), (bm, d))        # read as tile.load(q, (q0 + i, 0), (bm, d))

Why: a loop's pipeline (pipeline.py: cp.async copies an iteration ahead, or a TMA ring) issues the load of a
later iteration, so it must compute the load's index for any iteration: from the loop variable and values
fixed before the loop only. A variable the body assigns is neither, so naming the index first silently kept
the loop off its pipeline (the fused attention backward's step lost its TMA ring so, and with it the shared
memory its dK / dV stores staged in). Such a variable is an alias here when the loop body assigns it once, at
its top level, from integer index arithmetic (no loads, products or reductions) of the loop variable, values
fixed before the loop and earlier aliases; a load after that assignment reads the alias's expression instead,
the same value in that iteration. The variable itself stays for its other uses. The tile IR is rebuilt (as
matmul/hoist.py does), not edited, and is the same object wherever no load reads an alias.
"""
from __future__ import annotations

import dataclasses
from collections import Counter

from dsl.tile import ir as T


def inline_index_aliases(fn: T.TileFunction) -> T.TileFunction:
    """`fn` with its loops' loads reading their index aliases' expressions (see the module)."""
    body = _block(fn.body)
    return fn if body is fn.body else dataclasses.replace(fn, body=body)


def _block(body: list[T.TStmt]) -> list[T.TStmt]:
    out = [_nested(s) for s in body]
    return body if all(a is b for a, b in zip(out, body)) else out


def _nested(s: T.TStmt) -> T.TStmt:
    if isinstance(s, T.For):
        inner = _loop_body(s, _block(s.body))
        return s if inner is s.body else dataclasses.replace(s, body=inner)
    if isinstance(s, T.If):
        then, else_ = _block(s.then), _block(s.else_)
        return s if then is s.then and else_ is s.else_ else dataclasses.replace(s, then=then, else_=else_)
    return s


def _loop_body(loop: T.For, body: list[T.TStmt]) -> list[T.TStmt]:
    counts = Counter(id(st.var) for st in T.walk_stmts(body) if isinstance(st, T.Assign))
    aliases: dict[int, T.TExpr] = {}
    out = []
    for st in body:
        out.append(_statement(st, aliases) if aliases else st)
        if isinstance(st, T.Assign) and counts[id(st.var)] == 1 and _index_arithmetic(st.value, loop.var, counts, aliases):
            aliases[id(st.var)] = _expand(st.value, aliases)
    return body if all(a is b for a, b in zip(out, body)) else out


def _index_arithmetic(e: T.TExpr, loop_var: T.TVar, counts: Counter, aliases: dict[int, T.TExpr]) -> bool:
    """A scalar integer of the loop variable, values the body does not assign, and aliases."""
    if e.type.shape != () or not e.type.dtype.is_int:
        return False
    for x in T.walk_exprs(e):
        if isinstance(x, (T.Load, T.Matmul, T.Reduce, T.Gather)):
            return False
        if isinstance(x, T.Read) and x.var is not loop_var and counts[id(x.var)] and id(x.var) not in aliases:
            return False
    return True


def _statement(s: T.TStmt, aliases: dict[int, T.TExpr]) -> T.TStmt:
    """`s` with the loads it holds (nested branches included) reading `aliases`' expressions."""
    if isinstance(s, (T.Assign, T.Store, T.Scatter)):
        value = _loads(s.value, aliases)
        return s if value is s.value else dataclasses.replace(s, value=value)
    if isinstance(s, T.If):
        then = [_statement(x, aliases) for x in s.then]
        else_ = [_statement(x, aliases) for x in s.else_]
        if all(a is b for a, b in zip(then + else_, s.then + s.else_)):
            return s
        return dataclasses.replace(s, then=then, else_=else_)
    return s


def _loads(e: T.TExpr, aliases: dict[int, T.TExpr]) -> T.TExpr:
    """`e` with every load's index reading `aliases`' expressions."""
    if isinstance(e, T.Load):
        index = [_expand(i, aliases) for i in e.index]
        return e if all(a is b for a, b in zip(index, e.index)) else dataclasses.replace(e, index=index)
    return _rebuild(e, lambda sub: _loads(sub, aliases))


def _expand(e: T.TExpr, aliases: dict[int, T.TExpr]) -> T.TExpr:
    """Index expression `e` with each alias read replaced by its expression."""
    if isinstance(e, T.Read):
        return aliases.get(id(e.var), e)
    return _rebuild(e, lambda sub: _expand(sub, aliases))


def _rebuild(e: T.TExpr, f) -> T.TExpr:
    """`e` with `f` applied to its direct sub-expressions; `e` itself where none changes."""
    changes: dict[str, object] = {}
    for name in T.EXPR_FIELDS:
        sub = getattr(e, name, None)
        if isinstance(sub, T.TExpr):
            new = f(sub)
            if new is not sub:
                changes[name] = new
    for name in T.LIST_FIELDS:
        subs = getattr(e, name, None)
        if subs:
            new_list = [f(x) for x in subs]
            if any(a is not b for a, b in zip(new_list, subs)):
                changes[name] = new_list
    return dataclasses.replace(e, **changes) if changes else e  # type: ignore[type-var]
