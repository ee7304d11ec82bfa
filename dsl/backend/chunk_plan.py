"""What a chunk loop's body does with its arrays, read from the typed IR before any code is emitted.

The chunk fast path (dsl/backend/chunks.py) may move the body's accesses at the owned index `k` out
of the n per-element bodies: loads before them, stores after them. That is sound only for accesses
the body makes nowhere else and in no order that matters; this module finds, per array parameter,
its loads and stores at `k`, whether some store at `k` runs for every element (a statement of the
body's top level), and whether the array has any other use; and, for the body as a whole, the first
thing that forbids delaying a store (`blocker`): anything that may end the thread or let another
thread look (a run-time bounds check, a barrier, an atomic, a call that touches memory), or that
skips part of an element (break/continue/return), or an array held in a variable (which may be any
parameter). An n-D array's access at `k` names a row first (`wte[ix, k]`): it may move only when every
such access of the array names one row the body does not change (`lead`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dsl.ir import nodes as N
from dsl.ir.types import ArrayType
from dsl.ir.invariance import changed_vars, invariant
from dsl.ir.verify import callees_of, children, walk


@dataclass
class ArrayUse:
    """One array parameter's accesses in a chunk body."""
    param: N.Param
    reads: list[N.Loc] = field(default_factory=list)       # loads at the owned index
    writes: list[N.Loc] = field(default_factory=list)      # stores at the owned index
    every_element_writes: bool = False                     # a store at k on the body's top level
    checked: bool = False          # an access at k carries a run-time bounds check (fault)
    other: N.Loc | None = None     # first use other than a load/store at k (call argument, other index)
    lead: list[N.Expr] | None = None       # the row of its accesses at k (n-D arrays; [] for 1-D)
    rows_differ: N.Loc | None = None       # an access at k in another row, or in a row the body assigns


@dataclass
class ChunkPlan:
    uses: dict[N.Param, ArrayUse]
    blocker: tuple[N.Loc, str] | None = None     # why no store may wait until after the bodies


def plan_chunk(s: N.ChunkLoop) -> ChunkPlan:
    """The ChunkPlan of chunk loop `s`."""
    p = _Planner(s.var, changed_vars(s.body))
    for st in s.body:
        p.visit(st, 0)
        if _owned_store(st, s.var):
            p.use(st.array.param).every_element_writes = True
    return ChunkPlan(p.uses, p.blocker)


def same_row(a: list[N.Expr], b: list[N.Expr]) -> bool:
    """Do two lists of row indices name the same row (structurally: ThreadIndex components, the same
    variables, equal constants)?"""
    return len(a) == len(b) and all(_same_index(x, y) for x, y in zip(a, b))


def _same_index(x: N.Expr, y: N.Expr) -> bool:
    if isinstance(x, N.TupleGet) and isinstance(y, N.TupleGet):
        return isinstance(x.value, N.ThreadIndexValue) and isinstance(y.value, N.ThreadIndexValue) \
            and x.value.ndim == y.value.ndim and x.k == y.k
    if isinstance(x, N.ReadVar) and isinstance(y, N.ReadVar):
        return x.var is y.var
    if isinstance(x, N.Const) and isinstance(y, N.Const):
        return x.value == y.value and x.type == y.type
    if isinstance(x, N.Cast) and isinstance(y, N.Cast):
        return x.type == y.type and _same_index(x.operand, y.operand)
    return False


def _owned(indices: list[N.Expr], var: N.Var) -> bool:
    return bool(indices) and isinstance(indices[-1], N.ReadVar) and indices[-1].var is var


def _owned_store(st: N.Stmt, var: N.Var) -> bool:
    return isinstance(st, N.Store) and isinstance(st.array, N.ParamRef) and _owned(st.indices, var)


class _Planner:
    def __init__(self, var: N.Var, changed: set[int]) -> None:
        self.var = var
        self.changed = changed
        self.uses: dict[N.Param, ArrayUse] = {}
        self.blocker: tuple[N.Loc, str] | None = None
        self.at: N.Loc = N.NOLOC          # the statement being visited

    def use(self, param: N.Param) -> ArrayUse:
        u = self.uses.get(param)
        if u is None:
            u = self.uses[param] = ArrayUse(param)
        return u

    def block(self, node, why: str) -> None:
        if self.blocker is None:
            self.blocker = (getattr(node, "loc", N.NOLOC), why)

    def visit(self, node, depth: int) -> None:
        """Record `node` and its children; `depth` counts the loops nested inside the chunk loop
        (a break/continue inside one of them stays there). Accesses are recorded at the location of
        their statement (the line a moved access keeps)."""
        if isinstance(node, N.Stmt) and node.loc is not N.NOLOC:
            outer, self.at = self.at, node.loc
            try:
                self._visit(node, depth)
            finally:
                self.at = outer
            return
        self._visit(node, depth)

    def _visit(self, node, depth: int) -> None:
        if isinstance(node, (N.Load, N.Store)) and isinstance(node.array, N.ParamRef) \
                and _owned(node.indices, self.var):
            u = self.use(node.array.param)
            (u.reads if isinstance(node, N.Load) else u.writes).append(self.at)
            row = node.indices[:-1]
            if u.lead is None:
                u.lead = row
            if not same_row(u.lead, row) or not all(invariant(e, self.changed) for e in row):
                u.rows_differ = u.rows_differ or self.at
            for e in row:
                self.visit(e, depth)
            u.checked |= getattr(node, "check", "") == "fault" or getattr(node, "mode", "") == "checked"
            if isinstance(node, N.Store):
                self.visit(node.value, depth)
            return
        self._note(node, depth)
        if isinstance(node, (N.ArrayLen, N.GuardedRegion)):   # extents only: not a memory access
            kids = [c for c in children(node) if c is not node.array]
        else:
            kids = list(children(node))
        inner = depth + isinstance(node, (N.ForRange, N.While, N.ChunkLoop))
        for c in kids:
            self.visit(c, inner)

    def _note(self, node, depth: int) -> None:
        """Blockers and other uses of arrays."""
        if isinstance(node, N.ParamRef) and isinstance(node.param.type, ArrayType):
            u = self.use(node.param)
            u.other = u.other or node.loc
        elif isinstance(node, N.ReadVar) and isinstance(node.type, ArrayType):
            self.block(node, f"the array variable {node.var.name!r} may be any array parameter")
        elif isinstance(node, (N.Load, N.Atomic)) and node.check == "fault":
            self.block(node, "a run-time bounds check may end the thread before the element's stores")
        elif isinstance(node, N.Store) and node.mode == "checked":
            self.block(node, "a run-time bounds check may end the thread before the element's stores")
        elif isinstance(node, N.Atomic):
            self.block(node, "an atomic in the body must see the element's stores")
        elif isinstance(node, N.SyncThreads):
            self.block(node, "a barrier in the body must see the element's stores")
        elif isinstance(node, N.Return):
            self.block(node, "a return in the body ends the elements that follow")
        elif isinstance(node, (N.Break, N.Continue)) and depth == 0:
            self.block(node, f"a {'break' if isinstance(node, N.Break) else 'continue'} in the body "
                             "skips part of the chunk")
        elif isinstance(node, N.Call) and not _pure(node.callee):
            self.block(node, f"the call of {node.callee.name} may touch memory")


def _pure(fn: N.Function) -> bool:
    """A device function (and all it calls) that touches no memory and cannot fault or synchronise."""
    memory = (N.Load, N.Store, N.Atomic, N.SyncThreads, N.SharedArray, N.GetMut, N.SlotSet)
    for f in (fn, *callees_of(fn)):
        if f.extern_name is not None or any(isinstance(p.type, ArrayType) for p in f.params):
            return False
        if any(isinstance(x, memory) for st in f.body for x in walk(st)):
            return False
    return True
