"""Which values a loop body leaves unchanged: shared by the back end's unrolled loops (loads issued
before the copies, dsl/backend/unroll.py) and chunk loops (rows read once before the elements,
dsl/backend/chunk_plan.py). Both move an access out of the body, which is sound only when its indices
have the same value in every iteration."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.verify import children, walk

# expressions whose value depends only on their operands (no memory, no side effects, no warp)
PURE = (N.Const, N.ReadVar, N.ParamRef, N.Special, N.ArrayLen, N.TupleGet, N.ThreadIndexValue,
        N.OwnerIndexValue, N.BinOp, N.UnaryOp, N.Cast, N.Compare, N.Logical, N.IfExp, N.ChunkStart,
        N.ChunkValue, N.MakeTuple)


def changed_vars(stmts: list[N.Stmt]) -> set[int]:
    """ids of the variables `stmts` assign or loop over (nested statements included)."""
    return {id(n.var) for st in stmts for n in walk(st) if isinstance(n, (N.Assign, N.ForRange, N.ChunkLoop))}


def child_exprs(e: N.Expr) -> list[N.Expr]:
    return [c for c in children(e) if isinstance(c, N.Expr)]


def invariant(e: N.Expr, changed: set[int]) -> bool:
    """A pure expression of values not in `changed`: the same in every iteration of the body."""
    if not isinstance(e, PURE):
        return False
    if isinstance(e, N.ReadVar) and id(e.var) in changed:
        return False
    return all(invariant(c, changed) for c in child_exprs(e))
