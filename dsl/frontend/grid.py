"""Which array a launch without `grid=` derives its grid from (the contract's `grid_from`).

A grid may be derived only from what the kernel's threads provably range over:
- an explicit `@simt.kernel(grid_from="name")` (the author's statement), or
- a DisjointSlice the kernel stores to at its own ThreadIndex (`out[i] = ...`, `out.get_mut(i).set()`
  with `i = simt.thread.index_Nd()` of the kernel's domain), or at the index a `simt.thread.chunk_Nd(n)`
  loop owns (then each thread covers n elements along x, the last axis: per_thread = n). Stores inside `@simt.device`
  functions count when the slice is a kernel parameter passed down.
- a DisjointSlice a warp or block owns rows of (`out[w, c]` in a `simt.warp.lanes` loop, `mean[w]`,
  dsl/frontend/ownership.py): one warp (block) per element along axis 0, so the grid is a tile grid of
  blockDim.x / 32 rows (1 row) per block. A kernel mixing thread-owned and group-owned slices gets no
  derived grid (no one rule covers both).
Anything else (atomics, `with simt.unsafe():` writes, shared memory) gives no grid_from, so such a
kernel must be launched with a grid: the validator refuses a launch without one (GridSizeError).

When several slices are stored at the ThreadIndex, the grid must cover all of them: the first one whose
extents bound every other's (proven from `requires=` relations, e.g. `a.shape == out.shape` or
`len(a) <= len(b)`) is taken. When no relation proves that, the first stored slice is kept: the
validator checks the relations the kernel states, so a kernel whose outputs may differ in length must
state how (`requires=`) or be launched with `grid=`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from dsl.frontend.proofs import strip_int_casts
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.ir.relations import Relations
from dsl.options import KernelOptions

Candidate = tuple[str, int, str]   # (kernel parameter name, elements per thread along x, owner scope)


@dataclass(frozen=True)
class GridRule:
    """How a grid-less launch derives its grid: one thread per `per_thread` elements of `arg` along
    each domain axis, or (`rows` set) one block per `rows` rows of `arg` (warp / block ownership)."""
    arg: str
    per_thread: int = 1
    rows: int | None = None

    def contract(self) -> dict:
        """The schema's grid_from object (a tile list of just the rows: the axes past it are whole)."""
        if self.rows is not None:
            return {"arg": self.arg, "tile": [self.rows]}
        return {"arg": self.arg, "per_thread": [self.per_thread, 1, 1]}


def _exprs(e: ir.Expr) -> Iterator[ir.Expr]:
    """Every expression below `e` (iteratively: expressions may be deep)."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        for value in vars(n).values():
            if isinstance(value, ir.Expr):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ir.Expr))


def _stmt_exprs(s: ir.Stmt) -> list[ir.Expr]:
    return [v for v in vars(s).values() if isinstance(v, ir.Expr)] + \
        [x for v in vars(s).values() if isinstance(v, list) for x in v if isinstance(x, ir.Expr)]


class _Finder:
    """Walks a kernel body in program order, collecting the slices stored at the ThreadIndex."""

    def __init__(self, domain: int, fn: ir.Function | None = None) -> None:
        self.domain = domain
        self.found: list[Candidate] = []
        # vars of `for r in simt.warp.rows(n)` loops (a ForRange from a group's index) -> scope
        self.rows: dict[int, str] = {} if fn is None else {
            id(s.var): strip_int_casts(s.start).value.scope for s in _statements(fn.body)
            if isinstance(s, ir.ForRange) and isinstance(strip_int_casts(s.start), ir.TupleGet)
            and isinstance(strip_int_casts(s.start).value, ir.OwnerIndexValue)}

    def add(self, array: ir.Expr, per_thread: int, params: dict[int, str], scope: str = "thread") -> None:
        if isinstance(array, ir.ParamRef) and id(array.param) in params:
            self.found.append((params[id(array.param)], per_thread, scope))

    def at_chunk(self, indices: list[ir.Expr], chunks: dict[int, int]) -> bool:
        """A chunk loop's owned position: its variable last, the row's ThreadIndex components before."""
        if not (indices and isinstance(indices[-1], ir.ReadVar) and id(indices[-1].var) in chunks):
            return False
        n = len(indices)
        return n == self.domain and all(
            isinstance(e, ir.TupleGet) and isinstance(e.value, ir.ThreadIndexValue) and e.k == k
            and e.value.ndim == n for k, e in enumerate(map(strip_int_casts, indices[:-1])))

    def at_thread_index(self, indices: list[ir.Expr]) -> bool:
        n = len(indices)
        for k, e in enumerate(indices):
            e = strip_int_casts(e)
            if not (isinstance(e, ir.TupleGet) and isinstance(e.value, ir.ThreadIndexValue)
                    and e.k == k and e.value.ndim == n == self.domain):
                return False
        return n > 0

    def body(self, stmts: list[ir.Stmt], params: dict[int, str], chunks: dict[int, int]) -> None:
        for s in stmts:
            for e in _stmt_exprs(s):
                self.calls(e, params, chunks)
            if isinstance(s, ir.Store) and s.mode == "guarded":
                idx = [strip_int_casts(i) for i in s.indices]
                if idx and isinstance(idx[0], ir.TupleGet) and isinstance(idx[0].value, ir.OwnerIndexValue):
                    self.add(s.array, 1, params, idx[0].value.scope)
                elif idx and isinstance(idx[0], ir.ReadVar) and id(idx[0].var) in self.rows:
                    self.add(s.array, 1, params, self.rows[id(idx[0].var)])
                elif self.at_thread_index(idx):
                    self.add(s.array, 1, params)
                elif self.at_chunk(idx, chunks):
                    self.add(s.array, chunks[id(idx[-1].var)], params)
            elif isinstance(s, ir.SlotSet) and isinstance(s.slot, ir.GetMut) and \
                    self.at_thread_index(s.slot.indices):
                self.add(s.slot.array, 1, params)
            elif isinstance(s, ir.ChunkLoop):
                n = getattr(s.chunk.type, "n", 1)
                self.body(s.body, params, {**chunks, id(s.var): n})
                continue
            for v in vars(s).values():
                if isinstance(v, list) and v and isinstance(v[0], ir.Stmt):
                    self.body(v, params, chunks)

    def calls(self, e: ir.Expr, params: dict[int, str], chunks: dict[int, int]) -> None:
        """Device-function calls under `e`: their stores count for the kernel parameters passed."""
        for n in _exprs(e):
            if isinstance(n, ir.Call) and n.callee.body:
                inner = {id(p): params[id(a.param)] for p, a in zip(n.callee.params, n.args)
                         if isinstance(a, ir.ParamRef) and id(a.param) in params}
                if inner:
                    self.body(n.callee.body, inner, {})


def _statements(stmts: list[ir.Stmt]) -> Iterator[ir.Stmt]:
    """Every statement of `stmts`, nested ones and those of called device functions included."""
    seen: set[int] = set()
    stack = list(reversed(stmts))
    while stack:
        s = stack.pop()
        yield s
        nested = [v for v in vars(s).values() if isinstance(v, list) and v and isinstance(v[0], ir.Stmt)]
        for block in reversed(nested):
            stack.extend(reversed(block))
        for e in _stmt_exprs(s):
            for n in _exprs(e):
                if isinstance(n, ir.Call) and id(n.callee) not in seen:
                    seen.add(id(n.callee))
                    stack.extend(reversed(n.callee.body))


def owns_elements(fn: ir.Function) -> bool:
    """Does any thread write a DisjointSlice element it owns by its ThreadIndex or chunk (a guarded
    store or a get_mut slot, device functions included)? Then the contract is `strict_domain`: a
    launch wider than the domain would repeat each owner (dsl/frontend/ownership.py)."""
    return any((isinstance(s, ir.Store) and s.mode == "guarded") or isinstance(s, ir.SlotSet)
               for s in _statements(fn.body))


def _chunk(fn: ir.Function) -> int:
    """Elements per thread (along x, the last array axis) of the kernel's first
    `simt.thread.chunk_Nd(n)` (1 without one)."""
    for st in _statements(fn.body):
        for e in _stmt_exprs(st):
            for n in _exprs(e):
                if isinstance(n, ir.ChunkValue):
                    return n.n
    return 1


def _owner_scope(fn: ir.Function) -> str | None:
    """"warp" / "block" when the kernel reads a warp's / block's index (its first one), else None."""
    for st in _statements(fn.body):
        for e in _stmt_exprs(st):
            for n in _exprs(e):
                if isinstance(n, ir.OwnerIndexValue):
                    return n.scope
    return None


def _rule(name: str, per: int, scope: str, options: KernelOptions) -> GridRule:
    if scope == "thread":
        return GridRule(name, per)
    width = ir.scope_width(scope)
    rows = options.block[0] // width if width is not None and options.block else 1
    return GridRule(name, rows=rows)


def _covers(c: Candidate, o: Candidate, rel: Relations, ndims: dict[str, int], domain: int) -> bool:
    """Does the grid derived from c launch a thread for every element o's threads own?"""
    (cn, cp, cs), (on, op, _) = c, o
    if cp > op:
        return False
    if cs != "thread":           # a row (element) per warp / block: axis 0 alone counts
        return rel.at_most((on, 0), (cn, 0))
    return all(rel.at_most((on, ndims[on] - 1 - d), (cn, ndims[cn] - 1 - d)) for d in range(domain))


def grid_source(fn: ir.Function, options: KernelOptions) -> GridRule | None:
    """The rule a grid-less launch derives its grid by, or None: the launch needs a grid."""
    if options.grid_from is not None:
        scope = _owner_scope(fn)
        return _rule(options.grid_from, _chunk(fn), scope or "thread", options)
    finder = _Finder(options.domain, fn)
    kernel_params = {id(p): p.name for p in fn.params
                     if isinstance(p.type, irt.ArrayType) and p.type.writable}
    finder.body(fn.body, kernel_params, {})
    found: list[Candidate] = []
    for name, per, scope in finder.found:
        prev = next((k for k, c in enumerate(found) if c[0] == name), None)
        if prev is None:
            found.append((name, per, scope))
        elif per < found[prev][1]:
            found[prev] = (name, per, scope)
    if not found:
        return None
    if len({c[2] for c in found}) > 1:
        return None                  # thread-owned and group-owned slices: no one rule covers both
    if len(found) == 1:
        return _rule(*found[0], options)
    ndims = {p.name: p.type.ndim for p in fn.params if isinstance(p.type, irt.ArrayType)}
    rel = Relations(options.requires, ndims)
    for c in found:
        if all(_covers(c, o, rel, ndims, options.domain) for o in found if o is not c):
            return _rule(*c, options)
    return _rule(*found[0], options)
