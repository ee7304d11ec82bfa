"""Load forwarding: a tile load named once is moved into its use, or into each of its products.

Triton users name their loads (`a = tile.load(...)`, `b = tile.load(...)`, then
`acc = tile.matmul(a, b, acc)`), while the fast GEMM, attention and staging paths of the lowering
recognise a `tile.load` in the product itself (dsl/tile/lower/matmul/). A named load became a local
variable, so a small change of style silently lost the fast path (issue 28: "no silent performance
cliff"). This pass puts such a load back where it is used, which changes no result:
- the variable is assigned once in the whole kernel, its value a load of a read-only `tile.Array`
  (possibly cast, transposed or reshaped), and it is read exactly once (no load is duplicated);
- the read is in a later statement of the same block as the assignment, and not inside a loop there
  (so it runs once per run of the assignment, in the same loop iteration: a load made before a loop
  stays before it);
- no variable the load's indices read is assigned between the two (so the indices mean the same);
- the load has more than one element: a one-element load (a row's mean) stays named and is held once
  in every thread, where in a broadcast over a row it would be loaded once per element a thread holds.
A load read more than once is forwarded only when every read is an operand of a product (possibly
cast, transposed or reshaped), under the same conditions for each read: each product then loads its
own copy, which the copy pipelines stage ahead, where the named tile would be staged through registers
synchronously for each product (Triton's attention backward names Q and dO once and uses each in two
products). Elementwise reads are not duplicated: that would read the array twice for nothing.
Read-only arrays cannot be written during the launch (the aliasing rules refuse an overlap with a
writable argument), so reading later reads the same values.
"""
from __future__ import annotations

import copy

from dsl.tile import ir as T
from dsl.tile.types import ArrayParamType

# the expression fields of expressions (ir.walk_exprs') and of statements
_EXPR_FIELDS = T.EXPR_FIELDS + ("value", "start", "stop", "step")
_LIST_FIELDS = T.LIST_FIELDS + ("chunk",)
_WRAPPERS = (T.Cast, T.Permute, T.Reshape)


def forward_loads(fn: T.TileFunction) -> int:
    """Forward every qualifying named load of `fn` into its use (in place); returns how many."""
    assigned: dict[int, int] = {}
    for s in T.walk_stmts(fn.body):
        if isinstance(s, T.Assign):
            assigned[id(s.var)] = assigned.get(id(s.var), 0) + 1
        elif isinstance(s, T.For):
            assigned[id(s.var)] = assigned.get(id(s.var), 0) + 2
    reads: dict[int, int] = {}
    for e in T.body_exprs(fn.body):
        if isinstance(e, T.Read):
            reads[id(e.var)] = reads.get(id(e.var), 0) + 1
    done = 0
    for block in _blocks(fn.body):
        k = 0
        while k < len(block):
            s = block[k]
            if isinstance(s, T.Assign) and assigned.get(id(s.var)) == 1 and reads.get(id(s.var), 0) >= 1 \
                    and _read_only_load(s.value) and _elements(s.value) > 1 \
                    and _forward(block, k, reads[id(s.var)]):
                fn.locals[:] = [v for v in fn.locals if v is not s.var]
                done += 1
                continue                       # block[k] is now the next statement
            k += 1
    return done


def _blocks(body: list):
    """Every statement list of `body` (the body itself, loop bodies, branches)."""
    yield body
    for s in body:
        if isinstance(s, T.For):
            yield from _blocks(s.body)
        elif isinstance(s, T.If):
            yield from _blocks(s.then)
            yield from _blocks(s.else_)


def _elements(e: T.TExpr) -> int:
    """The tile's element count (one: the load stays named, held once per thread by the lowering's
    assign, dsl/tile/lower/kernel.py)."""
    n = 1
    for d in e.type.shape:
        n *= d
    return n


def _read_only_load(e: T.TExpr) -> bool:
    while isinstance(e, _WRAPPERS):
        e = e.operand
    return isinstance(e, T.Load) and isinstance(e.param.type, ArrayParamType) and not e.param.type.atomic


def _forward(block: list, k: int, reads: int) -> bool:
    """Move block[k]'s value into its `reads` reads (a copy into each when there are several, all of them
    product operands), each in a later statement of `block` that runs it once; False (nothing changed)
    when a read is elsewhere, is not a product's operand (several reads), or a variable the load's
    indices read is assigned from block[k] to the last read."""
    s: T.Assign = block[k]
    needs = {id(e.var) for e in T.walk_exprs(s.value) if isinstance(e, T.Read)}
    found = last = 0
    for j in range(k + 1, len(block)):
        later = block[j]
        total, operands = _operand_reads(later, s.var)
        if total and ((reads > 1 and operands != total) or not _read_runs_once(later, s.var)):
            return False
        found += total
        last = j if total else last
        if found == reads:
            break
    if found != reads or _assigns_any(block[k + 1:last + 1], needs):
        return False
    for later in block[k + 1:last + 1]:
        for st in T.walk_stmts([later]):
            _replace_in(st, s.var, s.value, clone=reads > 1)
    del block[k]
    return True


def _operand_reads(stmt: T.TStmt, var: T.TVar) -> tuple[int, int]:
    """(reads of `var` in `stmt`, nested statements included; those that are a product's operand, with
    only casts, transposes and reshapes between)."""
    total = operands = 0
    for st in T.walk_stmts([stmt]):
        for root in _roots(st):
            t, o = _reads_in(root, var, False)
            total, operands = total + t, operands + o
    return total, operands


def _roots(st: T.TStmt) -> list[T.TExpr]:
    """The expressions a statement itself holds (not those of the statements nested in it)."""
    out = [getattr(st, name) for name in _EXPR_FIELDS if isinstance(getattr(st, name, None), T.TExpr)]
    for name in _LIST_FIELDS:
        out += [x for x in getattr(st, name, None) or () if isinstance(x, T.TExpr)]
    return out


def _reads_in(e: T.TExpr, var: T.TVar, operand: bool) -> tuple[int, int]:
    if isinstance(e, T.Read):
        return (1, int(operand)) if e.var is var else (0, 0)
    total = operands = 0
    for name in T.EXPR_FIELDS:
        sub = getattr(e, name, None)
        if isinstance(sub, T.TExpr):
            inner = (isinstance(e, T.Matmul) and name in ("a", "b")) or (operand and isinstance(e, _WRAPPERS))
            t, o = _reads_in(sub, var, inner)
            total, operands = total + t, operands + o
    for name in T.LIST_FIELDS:
        for sub in getattr(e, name, None) or ():
            t, _ = _reads_in(sub, var, False)
            total += t
    return total, operands


def _read_runs_once(stmt: T.TStmt, var: T.TVar) -> bool:
    """Is the read of `var` in `stmt` evaluated at most once per run of `stmt`: in its own expressions,
    a loop's bounds or a branch, not in a loop body (a load moved into a loop would run every
    iteration: a Q tile loaded before the K/V loop of attention must stay there)."""
    if isinstance(stmt, T.For):
        return not any(isinstance(e, T.Read) and e.var is var for e in T.body_exprs(stmt.body))
    if isinstance(stmt, T.If):
        return all(_read_runs_once(t, var) for t in (*stmt.then, *stmt.else_))
    return True


def _assigns_any(stmts: list, var_ids: set[int]) -> bool:
    """Does any statement (nested ones included) assign one of `var_ids`? For the statement holding the
    read this is conservative: an assignment after the read inside it also refuses."""
    if not var_ids:
        return False
    for s in T.walk_stmts(stmts):
        if isinstance(s, (T.Assign, T.For)) and id(s.var) in var_ids:
            return True
    return False


def _replace_in(node: object, var: T.TVar, value: T.TExpr, clone: bool = False) -> None:
    """Put `value` where `node` reads `var` (a fresh copy of it at each read with `clone`)."""
    for name in _EXPR_FIELDS:
        sub = getattr(node, name, None)
        if isinstance(sub, T.Read) and sub.var is var:
            setattr(node, name, _clone(value) if clone else value)
        elif isinstance(sub, T.TExpr):
            _replace_in(sub, var, value, clone)
    for name in _LIST_FIELDS:
        items = getattr(node, name, None)
        if not items:
            continue
        for i, sub in enumerate(items):
            if isinstance(sub, T.Read) and sub.var is var:
                items[i] = _clone(value) if clone else value
            elif isinstance(sub, T.TExpr):
                _replace_in(sub, var, value, clone)


def _clone(e: T.TExpr) -> T.TExpr:
    """A copy of the expression tree `e`: new expression nodes (the lowering tells loads apart by
    identity), the same variables, parameters and types."""
    new = copy.copy(e)
    for name in T.EXPR_FIELDS:
        sub = getattr(e, name, None)
        if isinstance(sub, T.TExpr):
            setattr(new, name, _clone(sub))
    for name in T.LIST_FIELDS:
        items = getattr(e, name, None)
        if items is not None and not isinstance(items, (str, bytes)):
            setattr(new, name, type(items)(_clone(x) if isinstance(x, T.TExpr) else x for x in items))
    return new
