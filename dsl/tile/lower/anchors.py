"""Element loads issued as early as their block allows, not where their values are first used.

A lazy tile load (kernel.x_Load) materialises its elements in the layout of the operation that first
reads them, at that operation. For a load whose values wait on a product, that places the global load
after the product's wgmma wait, and its latency is paid on top of the product's: the fused attention
backward loaded its `lse` and `delta` columns there, twice a step. Under the lowering switch
`early_loads`, the element loads of an array the kernel never writes go into the same block of the
lowered program (the same loop iteration, the same branch), but right after the last statement there
that assigns a value they read (their indices), or at the block's start: ahead of the products before
them. The values are the same (nothing writes the array); each access is a predicated load with side
effects, which the compiler keeps where it is put.
"""
from __future__ import annotations

from typing import Callable

from dsl.ir import nodes as N
from dsl.ir.verify import walk
from dsl.tile.lower.errors import LoweringError
from dsl.tile.lower.runs import load_vector, read_only_path


def emit_early(L, make: Callable[[], list]) -> list:
    """Run `make()` (which emits statements and returns expressions) and put what it emitted into the
    current block after its last statement that assigns a variable the new statements read (at the
    block's start when there is none). Returns make()'s result."""
    made: list[N.Stmt] = []
    pending = set(L.war_pending)
    L.stack.append(made)
    try:
        result = make()
    finally:
        L.stack.pop()
    if L.war_pending != pending:    # moved up, its barriers would no longer be where lazy_barriers counted them
        raise LoweringError("internal: an early element load went through a relayout's scratch")
    block = L.stack[-1]
    reads = _reads(made, result)
    at = 0
    for k in range(len(block) - 1, -1, -1):
        if _assigns(block[k]) & reads:
            at = k + 1
            break
    block[at:at] = made
    return result


def _reads(stmts: list[N.Stmt], exprs: list) -> set[int]:
    """Ids of the variables read by `stmts` and `exprs` and not assigned by `stmts` themselves."""
    read: set[int] = set()
    for node in [*stmts, *(e for e in exprs if isinstance(e, N.Expr))]:
        read |= {id(n.var) for n in walk(node) if isinstance(n, N.ReadVar)}
    assigned: set[int] = set()
    for s in stmts:
        assigned |= _assigns(s)
    return read - assigned


def _assigns(s: N.Stmt) -> set[int]:
    """Ids of the variables statement `s` assigns, nested statements and loop variables included."""
    return {id(n.var) for n in walk(s) if isinstance(n, (N.Assign, N.ForRange, N.ChunkLoop))}


def early_element(L, arr: N.Expr, gidx: list[N.Expr], cond: N.Expr | None, padding, dt) -> N.Expr:
    """One element of a 4- or 8-byte array at `gidx` when `cond` holds, else `padding`: a one-element
    predicated access with side effects (runs.load_vector), which the compiler neither sinks to its use
    nor moves out of its block, as it would a plain load of a read-only array."""
    (got,) = load_vector(L, arr, gidx, 1, dt, cond, padding, read_only_path(L, arr))
    return got
