"""Memory accesses and the ownership rules: loads, stores, guarded writes, get_mut, proofs.

- Reads of any array are allowed; each is proven in range (dsl/frontend/proofs.py) or checked at run
  time (a fault site), unless boundscheck=False.
- A DisjointSlice may be written at this thread's ThreadIndex (matching ndim): the statement becomes a
  GuardedRegion. Inside a chunk loop it may be written at the owned index.
- Any other write (another index, shared memory) needs `with simt.unsafe():`; Array parameters are
  never writable.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.frontend import typing_rules as tr
from dsl.frontend.ownership import Claim, Form, chunk_form, group_form, thread_form
from dsl.frontend.proofs import Facts, in_range, index_key
from dsl.frontend.values import SlotBinding, TupleVal, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt


def array_name(e: ir.Expr) -> str:
    if isinstance(e, ir.ParamRef):
        return e.param.name
    if isinstance(e, ir.SharedArray) or hasattr(e, "alloc"):   # a shared array, or a cluster peer's view of it
        return e.alloc.name
    return "<array>"


class AccessMixin:
    def writable(self, base: Val) -> bool:
        """A DisjointSlice or shared array, not received as simt.Array by a device function."""
        t = base.type
        return isinstance(t, irt.ArrayType) and t.writable and not (
            isinstance(base.expr, ir.ParamRef) and base.expr.param.name in self.readonly_params)

    # ------------------------------------------------------------------ indices
    def index_vals(self, index_node: ast.expr) -> tuple[list[Val], int | None]:
        """The index as a list of scalar Vals, plus the ndim of a ThreadIndex used as a whole."""
        v = self.expr(index_node)
        if isinstance(v, Val) and isinstance(v.type, irt.ThreadIndexType):
            items = self.tuple_items(v, index_node)
            return items, v.type.ndim
        items = v.items if isinstance(v, TupleVal) else [v]
        out = []
        for it in items:
            s = self.as_scalar(it)
            if s is None:
                self.err(index_node, f"an array index must be an integer, got {self.describe(it)}",
                         "a 2-D ThreadIndex indexes a 2-D array as a whole: out[idx]")
            out.append(s)
        return out, None

    def index_exprs(self, vals: list[Val], node: ast.AST) -> list[ir.Expr]:
        """Convert index values to INDEX (i64); floats and negative constants are errors."""
        loc = self.loc(node)
        exprs = []
        for v in vals:
            t = v.scalar
            if t is None or not (t.is_int or t.kind == "bool") or t.kind == "bool":
                self.err(node, f"an array index must be an integer, got {t}",
                         "convert with i64(...) (truncates toward zero) or use an integer variable")
            if v.weak and v.const_value < 0:
                self.err(node, f"negative index {v.const_value}: kernels do not wrap negative indices",
                         "index from the end explicitly: a[len(a) - 1]")
            exprs.append(tr.convert(v, irt.INDEX, loc) if v.weak else tr.cast(v.expr, irt.INDEX, loc))
        return exprs

    def check_rank(self, base: Val, arr_node: ast.AST, n: int, node: ast.AST) -> None:
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        if n != t.ndim:
            name = array_name(base.expr)
            self.err(node, f"'{name}' is {t.ndim}-D but {n} ind{'ex was' if n == 1 else 'ices were'} "
                     "given", f"index it with {t.ndim} indices, e.g. {name}[" +
                     ", ".join("ijk"[:t.ndim]) + "]")

    def proven(self, base: Val, exprs: list[ir.Expr]) -> bool:
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        name = array_name(base.expr)
        return all(in_range(self.facts, self.relations, e, name, k,
                            t.shape[k] if t.shape is not None else None)
                   for k, e in enumerate(exprs))

    def static_check(self, base: Val, exprs: list[ir.Expr], node: ast.AST) -> None:
        """A constant index outside a static shared array is a compile error."""
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        if t.shape is None:
            return
        for k, e in enumerate(exprs):
            if isinstance(e, ir.Const) and t.shape[k] >= 0 and not 0 <= e.value < t.shape[k]:
                self.err(node, f"index {e.value} is out of range for axis {k} of "
                         f"'{array_name(base.expr)}' (extent {t.shape[k]})")

    def check_mode(self, base: Val, exprs: list[ir.Expr], node: ast.AST) -> tuple[str, int]:
        """("none", 0) when proven or unchecked, else ("fault", site)."""
        self.static_check(base, exprs, node)
        if not self.options.boundscheck or self.proven(base, exprs):
            return "none", 0
        return "fault", self.ctx.new_site(array_name(base.expr), self.loc(node))

    def require_shared_unsafe(self, base: Val, node: ast.AST) -> None:
        t = base.type
        if isinstance(t, irt.ArrayType) and t.space == "shared" and self.unsafe_depth == 0:
            self.err(node, "shared memory can only be used inside `with simt.unsafe():`",
                     "wrap the code that uses shared memory in `with simt.unsafe():`")

    # ------------------------------------------------------------------ loads
    def load(self, base: Val, arr_node: ast.AST, index_node: ast.expr, node: ast.AST) -> Val:
        self.require_shared_unsafe(base, node)
        vals, _ = self.index_vals(index_node)
        self.check_rank(base, arr_node, len(vals), node)
        exprs = self.index_exprs(vals, index_node)
        check, site = self.check_mode(base, exprs, node)
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        return Val(ir.Load(base.expr, exprs, check, site, t.dtype, self.loc(node)))

    # ------------------------------------------------------------------ ownership
    def thread_index_of(self, vals: list[Val], whole_ndim: int | None) -> int | None:
        """The ndim of the ThreadIndex that `vals` spells out in order, or None."""
        n = len(vals)
        for k, v in enumerate(vals):
            e = v.expr
            if not (isinstance(e, ir.TupleGet) and isinstance(e.value, ir.ThreadIndexValue)
                    and e.k == k and e.value.ndim == n):
                return None
        return n

    def group_index_of(self, vals: list[Val], ndim: int) -> tuple[str, bool] | None:
        """(scope, rows) when `vals` names a row a group owns: its own index, or a row of its
        `rows(n)` loop (rows=True), alone (1-D) or with a column of its `lanes()` / `threads()` loop
        (2-D); else None. The scope is "warp", "group<n>" or "block"."""
        first = vals[0].expr if vals else None
        if isinstance(first, ir.TupleGet) and isinstance(first.value, ir.OwnerIndexValue):
            scope, rows = first.value.scope, False
        elif isinstance(first, ir.ReadVar) and id(first.var) in self.row_loops:
            scope, rows = self.row_loops[id(first.var)], True
        else:
            return None
        if ndim == 1 and len(vals) == 1:
            return scope, rows
        if ndim == 2 and len(vals) == 2:
            col = vals[1].expr
            if isinstance(col, ir.ReadVar) and self.stride_loops.get(id(col.var)) == scope:
                return scope, rows
        return None

    def owned_index(self, vals: list[Val]) -> ir.Var | None:
        """The chunk loop variable when `vals` is a chunk's owned position: the variable alone (1-D),
        or after the row's ThreadIndex components in order (`out[b, t, k]` of a chunk_3d loop)."""
        last = vals[-1].expr if vals else None
        if not (isinstance(last, ir.ReadVar) and id(last.var) in self.chunk_loops):
            return None
        nd = self.chunk_loops[id(last.var)].ndim
        if len(vals) != nd:
            return None
        for k, v in enumerate(vals[:-1]):
            e = v.expr
            if not (isinstance(e, ir.TupleGet) and isinstance(e.value, ir.ThreadIndexValue)
                    and e.k == k and e.value.ndim == nd):
                return None
        return last.var

    def guard_facts(self, array: str, exprs: list[ir.Expr]) -> Facts:
        """Facts inside a guarded region: each index is within `array` along its axis."""
        facts = self.facts.copy()
        for k, e in enumerate(exprs):
            key = index_key(e)
            if key is not None:
                facts.add_extent(key, (array, k))
                facts.nonneg.add(key)
        return facts

    def write_target(self, target: ast.Subscript) -> tuple[Val, list[Val], int | None]:
        base = self.expr(target.value)
        if isinstance(target.slice, ast.Slice):
            self.err(target.slice, "slice assignment is not supported in kernels",
                     "write element by element")
        if not (isinstance(base, Val) and isinstance(base.type, irt.ArrayType)):
            self.err(target, f"cannot assign into {self.describe(base)}")
        vals, whole = self.index_vals(target.slice)
        self.check_rank(base, target.value, len(vals), target)
        return base, vals, whole

    def store_mode(self, base: Val, vals: list[Val], whole: int | None, target: ast.AST) -> str:
        """How a write may happen: "guarded" (ThreadIndex / owned index) or "unsafe"."""
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        name = array_name(base.expr)
        if not self.writable(base):
            self.err(target, f"write to Array parameter '{name}' (simt.Array is read-only)",
                     f"declare it as simt.DisjointSlice[{t.dtype}{', ' + str(t.ndim) if t.ndim > 1 else ''}]"
                     " if the kernel writes it")
        if t.space == "shared":
            self.require_shared_unsafe(base, target)
            return "unsafe"
        if self.thread_index_of(vals, whole) == t.ndim:
            self.claim(base, thread_form(t.ndim), target)
            return "guarded"
        group = self.group_index_of(vals, t.ndim)
        if group is not None:
            self.claim(base, group_form(group[0], t.ndim, group[1]), target)
            return "guarded" if t.ndim == 2 else "leader"
        owned = self.owned_index(vals)
        if owned is not None:
            ct = self.chunk_loops[id(owned)]
            self.claim(base, chunk_form(ct.n, ct.ndim), target)
            return "owned"
        if self.unsafe_depth > 0:
            return "unsafe"
        used = {v.expr.value.ndim for v in vals if isinstance(v.expr, ir.TupleGet)
                and isinstance(v.expr.value, ir.ThreadIndexValue)}
        if whole is None and len(used) == 1:
            whole = used.pop()
        if whole is not None and whole != t.ndim:
            self.err(target, f"'{name}' is {t.ndim}-D but it is written at a {whole}-D ThreadIndex",
                     f"use simt.thread.index_{t.ndim}d() for a {t.ndim}-D DisjointSlice")
        self.err(target, f"write to DisjointSlice '{name}' at an index that is not this thread's "
                 "ThreadIndex", f"write at the index itself: `i = simt.thread.index_{t.ndim}d()` then "
                 f"`{name}[i] = ...` (arithmetic on i gives a plain int), use {name}.get_mut(i), or "
                 "wrap the write in `with simt.unsafe():`")

    def claim(self, base: Val, form: Form, target: ast.AST) -> None:
        """Record a safe write of a DisjointSlice parameter (dsl/frontend/ownership.py); writes inside
        `with simt.unsafe():` are the author's to vouch for and claim nothing."""
        if self.unsafe_depth == 0 and isinstance(base.expr, ir.ParamRef):
            self.claims.append(Claim(base.expr.param.index, form, self.src.span(target)))

    def lower_store(self, target: ast.Subscript, value_fn: Any, node: ast.AST) -> None:
        """`target = value_fn(load_of_target)`: emit the store with the right guard/check."""
        base, vals, whole = self.write_target(target)
        mode = self.store_mode(base, vals, whole, target)
        exprs = self.index_exprs(vals, target.slice)
        loc = self.loc(node)
        if mode in ("guarded", "leader"):
            region = self.guarded_region(base, exprs, value_fn, node, target)
            if mode == "leader":     # a group's own element: written once, by its first lane / thread
                width = ir.scope_width(self.group_index_of(vals, 1)[0])
                rank: ir.Expr = ir.Special("tid.x" if width is None else "laneid", loc)
                if width is not None and width < 32:
                    rank = ir.BinOp("and_", rank, ir.Const(width - 1, irt.INDEX, loc), irt.INDEX, loc)
                first = ir.Compare("eq", rank, ir.Const(0, irt.INDEX, loc), loc)
                region = ir.If(first, [region], [], loc)
            self.emit(region)
            return
        if mode == "owned":
            value = self.store_value(base, exprs, value_fn, node, target)
            self.emit(ir.Store(base.expr, exprs, value, "guarded", 0, loc))
            return
        value = self.store_value(base, exprs, value_fn, node, target)
        self.static_check(base, exprs, target)
        check, site = self.check_mode(base, exprs, target)
        self.emit(ir.Store(base.expr, exprs, value, "checked" if check == "fault" else "unchecked",
                           site, loc))

    def guarded_region(self, base: Val, exprs: list[ir.Expr], value_fn: Any, node: ast.AST,
                       target: ast.Subscript) -> ir.GuardedRegion:
        """The store and the loads feeding it, run only where the indices are in range. Proven in range
        here (e.g. inside `if 0 < r < u.shape[0] - 1 ...` with u.shape == out.shape), the guard can never
        fail, so the backend emits no test (the semantics are unchanged)."""
        loc, name = self.loc(node), array_name(base.expr)
        proven = self.proven(base, exprs)
        saved_block, saved_facts = self.block, self.facts
        self.block, self.facts = [], self.guard_facts(name, exprs)
        self.guarded_depth = getattr(self, "guarded_depth", 0) + 1
        try:
            value = self.store_value(base, exprs, value_fn, node, target)
            self.emit(ir.Store(base.expr, exprs, value, "guarded", 0, loc, proven=proven))
            body = self.block
        finally:
            self.block, self.facts = saved_block, saved_facts
            self.guarded_depth -= 1
        return ir.GuardedRegion(base.expr, exprs, body, loc, proven=proven)

    def store_value(self, base: Val, exprs: list[ir.Expr], value_fn: Any, node: ast.AST,
                    target: ast.Subscript) -> ir.Expr:
        t: irt.ArrayType = base.type  # type: ignore[assignment]

        def current() -> Val:
            check, site = self.check_mode(base, exprs, target)
            return Val(ir.Load(base.expr, exprs, check, site, t.dtype, self.loc(target)))

        v = value_fn(current)
        return self.rule(node, tr.implicit, v, t.dtype, self.loc(node),
                         f"'{array_name(base.expr)}' element")

    # ------------------------------------------------------------------ get_mut / slots
    def get_mut(self, base: Val, args: list[ast.expr], node: ast.AST) -> SlotBinding:
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        name = array_name(base.expr)
        if not self.writable(base) or t.space != "global":
            self.err(node, f"get_mut() needs a DisjointSlice parameter, '{name}' is {t!r}",
                     "declare the parameter as simt.DisjointSlice[...]")
        if len(args) != 1:
            self.err(node, "get_mut() takes one argument: the ThreadIndex")
        vals, whole = self.index_vals(args[0])
        if self.thread_index_of(vals, whole) != t.ndim:
            self.err(args[0], f"get_mut() needs this thread's {t.ndim}-D ThreadIndex",
                     f"pass `simt.thread.index_{t.ndim}d()` (not an int computed from it)")
        exprs = self.index_exprs(vals, args[0])
        return SlotBinding(ir.GetMut(base.expr, exprs, self.loc(node)), name)

    def slot_set(self, slot: SlotBinding, args: list[ast.expr], node: ast.AST) -> None:
        if id(slot.expr) not in self.facts.slots:
            self.err(node, "slot.set() on a get_mut() slot that may be None",
                     "test it first: `if slot is not None: slot.set(value)`")
        if len(args) != 1:
            self.err(node, "slot.set() takes one value")
        arr_t: irt.ArrayType = slot.expr.array.type  # type: ignore[assignment]
        self.claim(Val(slot.expr.array), thread_form(arr_t.ndim), node)
        v = self.scalar(args[0], "the value")
        value = self.rule(node, tr.implicit, v, arr_t.dtype, self.loc(node), f"'{slot.array_name}' element")
        self.emit(ir.SlotSet(slot.expr, value, self.loc(node)))

    def prove_slot(self, facts: Facts, slot: SlotBinding) -> None:
        """Record that `slot` is not None in `facts` (its index is in range of its array)."""
        facts.slots.add(id(slot.expr))
        for k, e in enumerate(slot.expr.indices):
            key = index_key(e)
            if key is not None:
                facts.add_extent(key, (slot.array_name, k))
                facts.nonneg.add(key)
