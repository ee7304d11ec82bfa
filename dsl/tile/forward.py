"""Load forwarding: a tile load named once and used once is moved into its use.

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
Read-only arrays cannot be written during the launch (the aliasing rules refuse an overlap with a
writable argument), so reading later reads the same values.
"""
from __future__ import annotations

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
            if isinstance(s, T.Assign) and assigned.get(id(s.var)) == 1 and reads.get(id(s.var)) == 1 \
                    and _read_only_load(s.value) and _elements(s.value) > 1 and _forward(block, k):
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


def _forward(block: list, k: int) -> bool:
    """Move block[k]'s value into its one read, in a later statement of `block`; False (nothing
    changed) when the read is elsewhere or a variable its indices read is assigned on the way."""
    s: T.Assign = block[k]
    needs = {id(e.var) for e in T.walk_exprs(s.value) if isinstance(e, T.Read)}
    for j in range(k + 1, len(block)):
        later = block[j]
        if any(isinstance(e, T.Read) and e.var is s.var for e in T.body_exprs([later])):
            if not _read_runs_once(later, s.var) or _assigns_any([later], needs):
                return False
            _replace_read([later], s.var, s.value)
            del block[k]
            return True
        if _assigns_any([later], needs):
            return False
    return False


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


def _replace_read(stmts: list, var: T.TVar, value: T.TExpr) -> None:
    for s in T.walk_stmts(stmts):
        _replace_in(s, var, value)


def _replace_in(node: object, var: T.TVar, value: T.TExpr) -> None:
    for name in _EXPR_FIELDS:
        sub = getattr(node, name, None)
        if isinstance(sub, T.Read) and sub.var is var:
            setattr(node, name, value)
        elif isinstance(sub, T.TExpr):
            _replace_in(sub, var, value)
    for name in _LIST_FIELDS:
        items = getattr(node, name, None)
        if not items:
            continue
        for i, sub in enumerate(items):
            if isinstance(sub, T.Read) and sub.var is var:
                items[i] = value
            elif isinstance(sub, T.TExpr):
                _replace_in(sub, var, value)
