"""`for` loops: `for j in range(...)` (ForRange) and `for k in chunk` (ChunkLoop), with the range
facts they give their body (see dsl/frontend/proofs.py)."""
from __future__ import annotations

import ast
import builtins

from dsl.frontend import typing_rules as tr
from dsl.frontend.proofs import index_key, nonnegative_expr, scalar_param_bound, strip_int_casts
from dsl.frontend.unroll import UnrollMixin
from dsl.frontend.values import PyObj, StrideVal, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.vocab.simt import range as simt_range


class LoopMixin(UnrollMixin):
    innermost_chunk: bool = False

    def visit_For(self, node: ast.For) -> None:
        if node.orelse:
            self.err(node.orelse[0], "for ... else is not supported in kernels", "use a flag variable")
        if not isinstance(node.target, ast.Name):
            self.err(node.target, "a kernel `for` loop binds one name",
                     "write `for i in range(n):` and index inside the loop")
        name = node.target.id
        if name in self.assigned_in(node.body):
            self.err(self.store_in(node.body, name), f"loop variable '{name}' is assigned inside the "
                     "loop", "use another name for the new value")
        existing = self.bindings.get(name)
        if existing is not None and not isinstance(existing, ir.Var):
            self.err(node.target, f"cannot reuse '{name}' as a loop variable: it holds "
                     f"{self.describe_binding(existing)}", "use another name")
        unroll, it = self.split_unroll(node.iter)      # `unroll=N` (dsl/frontend/unroll.py)
        if isinstance(it, ast.Call) and not it.keywords:
            f = self.expr(it.func) if isinstance(it.func, (ast.Name, ast.Attribute)) else None
            if isinstance(f, PyObj) and (f.obj is builtins.range or f.obj is simt_range):
                self.range_loop(node, name, it, unroll)
                return
        v = self.expr(it)
        if isinstance(v, Val) and isinstance(v.type, irt.ChunkType):
            self.chunk_loop(node, name, v)
            return
        if isinstance(v, StrideVal):
            self.stride_loop(node, name, v, unroll)
            return
        self.err(it, f"kernels iterate over range(...), a simt.thread.chunk_1d() chunk, "
                 "simt.warp.lanes(n) or simt.block.threads(n), not "
                 f"{self.describe(v)}", "write `for i in range(len(a)):` and index a[i]")

    @staticmethod
    def assigned_in(body: list[ast.stmt]) -> set[str]:
        return {n.id for st in body for n in ast.walk(st)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}

    @staticmethod
    def store_in(body: list[ast.stmt], name: str) -> ast.AST:
        for st in body:
            for n in ast.walk(st):
                if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                    return n
        return body[0]

    def range_loop(self, node: ast.For, name: str, call: ast.Call, unroll: int = 1) -> None:
        loc = self.loc(node)
        if not 1 <= len(call.args) <= 3:
            self.err(call, f"range() takes 1 to 3 arguments, got {len(call.args)}")
        vals = [self.scalar(a, "a range() bound") for a in call.args]
        for a, v in zip(call.args, vals):
            if not v.scalar.is_int:  # type: ignore[union-attr]   (a bool is no loop bound)
                self.err(a, f"range() bounds must be integers, got {v.scalar}",
                         "convert with i32(...) / i64(...)")
        from dsl.frontend.values import weak_const
        if len(vals) == 1:
            vals = [weak_const(0, loc), vals[0]]
        if len(vals) == 2:
            vals.append(weak_const(1, loc))
        start, stop, step = vals
        if step.weak and step.const_value == 0:
            self.err(call.args[2], "range() step must not be zero")
        typed = [v for v in vals if not v.weak]
        t = typed[0].scalar if typed else irt.I64
        for v in typed[1:]:
            t = self.rule(call, tr.unify, Val(ir.Const(0, t, loc)), v)
        exprs = [self.rule(call, tr.convert, v, t, loc) for v in (start, stop, step)]
        var = self.new_var(name, t, self.loc(node.target))
        self.bindings[name] = var
        facts = self.facts.copy()
        self.range_facts(facts, var, call, start, stop, step)
        self.loop_depth += 1
        saved_chunk, self.innermost_chunk = self.innermost_chunk, False
        try:
            body = self.sub_block(node.body, facts)
        finally:
            self.loop_depth -= 1
            self.innermost_chunk = saved_chunk
        self.emit(ir.ForRange(var, exprs[0], exprs[1], exprs[2], body, loc, unroll))

    def range_facts(self, facts, var: ir.Var, call: ast.Call, start: Val, stop: Val,
                    step: Val) -> None:
        """j in [start, stop) with start >= 0 and a positive constant step: 0 <= j < stop."""
        key = ("var", id(var))
        nargs = len(call.args)
        if step.weak and step.const_value > 0:
            start_ok = (start.weak and start.const_value >= 0) or nonnegative_expr(start.expr) or \
                (index_key(start.expr) in facts.nonneg)
            if start_ok:
                facts.nonneg.add(key)
            self.bound_fact(facts, key, stop, call.args[1 if nargs > 1 else 0], minus_one=False)
            by_param = scalar_param_bound(stop.expr, var.type)     # `requires=["V <= a.shape[1]"]`
            if by_param is not None:
                facts.add_extent(key, by_param)
            if start.weak and stop.weak and isinstance(start.const_value, int) and \
                    isinstance(stop.const_value, int) and stop.const_value > start.const_value:
                last = start.const_value + (stop.const_value - start.const_value - 1) // \
                    step.const_value * step.const_value
                facts.add_const(key, last + 1)      # range(0, 32, 8): j <= 24
        elif step.weak and step.const_value < 0 and stop.weak and stop.const_value >= -1:
            facts.nonneg.add(key)     # range(len(a) - 1, -1, -1): j > stop >= -1
            st = call.args[0]
            if isinstance(st, ast.BinOp) and isinstance(st.op, ast.Sub) and \
                    isinstance(st.right, ast.Constant) and st.right.value == 1:
                bound = self.pure_value(st.left)
                if isinstance(bound, Val):
                    self.bound_fact(facts, key, bound, st.left, minus_one=False)

    def bound_fact(self, facts, key: tuple, stop: Val, stop_node: ast.expr, minus_one: bool) -> None:
        if stop.weak and isinstance(stop.const_value, int):
            facts.add_const(key, stop.const_value)
            return
        e = stop.expr
        if isinstance(e, ir.ArrayLen):
            from dsl.frontend.access import array_name
            facts.add_extent(key, (array_name(e.array), e.axis))

    def stride_loop(self, node: ast.For, name: str, sv: StrideVal, unroll: int = 1) -> None:
        """`for c in simt.warp.lanes(n)` (c = lane, lane + 32, ... < n) or `simt.block.threads(n)`
        (c = threadIdx.x, + blockDim.x, ...): the columns this lane (thread) owns of its group's row;
        `for r in simt.warp.rows(n)` (r = the warp's index, + the launch's warps, ... < n; blocks and
        lane groups alike): the rows the group owns when groups stride over the rows, so any grid is
        correct (dsl/frontend/ownership.py). A rows loop runs the same iterations on the whole group,
        so group operations are allowed in its body; a lanes loop does not."""
        loc = self.loc(node)
        width = ir.scope_width(sv.scope)
        if sv.rows:
            start: ir.Expr = ir.TupleGet(ir.OwnerIndexValue(sv.scope, loc), 0, irt.INDEX, loc)
            if width is None:
                step: ir.Expr = ir.Special("nctaid.x", loc)
            else:
                threads = ir.BinOp("mul", ir.Special("nctaid.x", loc), ir.Special("ntid.x", loc), irt.INDEX, loc)
                step = ir.BinOp("rshift", threads, ir.Const(width.bit_length() - 1, irt.INDEX, loc),
                                irt.INDEX, loc)
        elif width == 32:
            start, step = ir.Special("laneid", loc), ir.Const(32, irt.INDEX, loc)
        elif width is not None:       # a lane group: its rank, strided by its width
            start = ir.BinOp("and_", ir.Special("laneid", loc), ir.Const(width - 1, irt.INDEX, loc),
                             irt.INDEX, loc)
            step = ir.Const(width, irt.INDEX, loc)
        else:
            start, step = ir.Special("tid.x", loc), ir.Special("ntid.x", loc)
        var = self.new_var(name, irt.INDEX, self.loc(node.target))
        self.bindings[name] = var
        (self.row_loops if sv.rows else self.stride_loops)[id(var)] = sv.scope
        facts = self.facts.copy()
        key = ("var", id(var))
        facts.nonneg.add(key)
        stop = strip_int_casts(sv.stop)
        if isinstance(stop, ir.Const) and isinstance(stop.value, int):
            facts.add_const(key, stop.value)
        elif isinstance(stop, ir.ArrayLen):
            from dsl.frontend.access import array_name
            facts.add_extent(key, (array_name(stop.array), stop.axis))
        self.loop_depth += 1
        saved = self.innermost_chunk, self.stride_scope
        self.innermost_chunk = False
        if not sv.rows:
            self.stride_scope = sv.scope
        try:
            body = self.sub_block(node.body, facts)
        finally:
            self.loop_depth -= 1
            self.innermost_chunk, self.stride_scope = saved
        self.emit(ir.ForRange(var, start, sv.stop, step, body, loc, unroll))

    def chunk_loop(self, node: ast.For, name: str, chunk: Val) -> None:
        loc = self.loc(node)
        ct: irt.ChunkType = chunk.type  # type: ignore[assignment]
        array = self.chunk_array(node, name, ct.ndim)
        var = self.new_var(name, irt.INDEX, self.loc(node.target))   # owned: see chunk_loops
        self.bindings[name] = var
        self.chunk_loops[id(var)] = ct
        # the row: the ThreadIndex components along the other axes (the loop runs only inside `array`)
        index = ir.ThreadIndexValue(ct.ndim, loc)
        lead: list[ir.Expr] = [ir.TupleGet(index, k, irt.INDEX, loc) for k in range(ct.ndim - 1)]
        facts = self.facts.copy()
        for axis, e in enumerate([*lead, ir.ReadVar(var, loc)]):
            key = index_key(e)
            facts.nonneg.add(key)
            facts.add_extent(key, (array.param.name, axis))
        saved_chunk, self.innermost_chunk = self.innermost_chunk, True
        try:
            body = self.sub_block(node.body, facts)
        finally:
            self.innermost_chunk = saved_chunk
        self.emit(ir.ChunkLoop(var, chunk.expr, ir.ParamRef(array.param, loc), body, loc, lead))

    def chunk_array(self, node: ast.For, name: str, ndim: int) -> ir.ParamRef:
        """The array the chunk loop guards on: the first DisjointSlice of `ndim` axes written with the
        loop variable as its last index, else the first such array read."""
        writes, reads = [], []
        for st in node.body:
            for n in ast.walk(st):
                if not (isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)):
                    continue
                idx = n.slice.elts if isinstance(n.slice, ast.Tuple) else [n.slice]
                if len(idx) == ndim and isinstance(idx[-1], ast.Name) and idx[-1].id == name:
                    (writes if isinstance(n.ctx, ast.Store) or isinstance(
                        getattr(n, "_kb_parent", None), ast.AugAssign) else reads).append(n.value.id)
        for cand in writes + reads:
            b = self.bindings.get(cand)
            if isinstance(b, ir.ParamRef) and isinstance(b.param.type, irt.ArrayType) and \
                    b.param.type.ndim == ndim and b.param.type.space == "global" and \
                    (b.param.type.writable or not writes):
                return b
        if ndim == 1:
            self.err(node.iter, "a chunk loop must index a 1-D array parameter with its loop variable",
                     f"write e.g. `for {name} in chunk: out[{name}] = a[{name}]`")
        rows = "b, t" if ndim == 3 else "r"
        self.err(node.iter, f"a chunk_{ndim}d loop must index a {ndim}-D array parameter with its loop "
                 "variable as the last index",
                 f"write e.g. `{rows}, ch = simt.thread.chunk_{ndim}d(4)`, then `for {name} in ch: "
                 f"out[{rows}, {name}] = a[{rows}, {name}]`")
