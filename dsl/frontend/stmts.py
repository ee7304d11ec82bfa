"""Statements: assignment, control flow, loops, `with simt.unsafe()`, returns."""
from __future__ import annotations

import ast
from typing import Any

from dsl.errors import DslCompileError
from dsl.frontend import typing_rules as tr
from dsl.frontend.conditions import ConditionFacts
from dsl.frontend.exprs import BINOPS
from dsl.frontend.proofs import pure_index_expr
from dsl.frontend.values import PyObj, SlotBinding, TupleVal, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.vocab.simt import Intrinsic
from dsl.types import ScalarDType

UNSUPPORTED_STMT = {
    ast.Try: ("try/except is not supported in kernels",
              "kernels cannot catch errors; failed bounds checks are reported as dsl.KernelFault"),
    ast.Raise: ("raise is not supported in kernels",
                "kernels cannot raise; failed bounds checks are reported as dsl.KernelFault"),
    ast.Assert: ("assert is not supported in kernels",
                 "test the condition with `if` and return, or check the inputs on the host"),
    ast.Global: ("kernels cannot rebind module variables",
                 "write results into a simt.DisjointSlice parameter"),
    ast.Nonlocal: ("kernels cannot rebind enclosing variables",
                   "write results into a simt.DisjointSlice parameter"),
    ast.Delete: ("del is not supported in kernels", "just stop using the name"),
    ast.Import: ("import inside a kernel is not supported", "import at module level"),
    ast.ImportFrom: ("import inside a kernel is not supported", "import at module level"),
    ast.FunctionDef: ("nested functions are not supported in kernels",
                      "define a @simt.device function at module level and call it"),
    ast.AsyncFunctionDef: ("nested functions are not supported in kernels",
                           "define a @simt.device function at module level and call it"),
    ast.ClassDef: ("classes cannot be defined in kernels", "define data as kernel arguments"),
    ast.AsyncFor: ("async for is not supported in kernels", "use a plain `for` loop"),
    ast.AsyncWith: ("async with is not supported in kernels", "use `with simt.unsafe():`"),
    ast.Match: ("match statements are not supported in kernels", "use if/elif/else"),
}
if hasattr(ast, "TryStar"):
    UNSUPPORTED_STMT[ast.TryStar] = UNSUPPORTED_STMT[ast.Try]
EXITS = (ast.Return, ast.Break, ast.Continue)
STATIC_SHARED_LIMIT = 48 * 1024


def _product(shape: tuple[int, ...] | None) -> int:
    n = 1
    for e in shape or ():
        n *= e
    return n


def internal_error_text(exc: Exception) -> tuple[str, str]:
    """(message, hint) for an exception that escaped the lowering of one statement."""
    if isinstance(exc, tr.TypeRuleError):
        return exc.message, exc.hint
    if isinstance(exc, RecursionError):
        return ("this statement is nested too deeply for the DSL front end",
                "split the expression into several statements using intermediate locals")
    if isinstance(exc, ArithmeticError):
        return (f"cannot evaluate a constant expression here ({type(exc).__name__}: {exc})",
                "keep constants within the range of the types they are used as (i64, f64)")
    return (f"the DSL front end failed on this statement ({type(exc).__name__}: {exc})",
            "this is a bug in the DSL; rewrite the statement in a simpler form and please report it")


def name_chain(node: ast.expr) -> bool:
    """`a`, `a.b.c`: expressions whose lowering has no side effects (no loads, no calls)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def root_name(node: ast.expr) -> str:
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else ""


class StmtMixin(ConditionFacts):
    def lower_stmts(self, stmts: list[ast.stmt]) -> None:
        for k, st in enumerate(stmts):
            entry = UNSUPPORTED_STMT.get(type(st))
            if entry is not None:
                self.err(st, *entry)
            method = getattr(self, "visit_" + type(st).__name__, None)
            if method is None:
                self.err(st, f"{type(st).__name__} statements are not supported in kernels")
            try:
                method(st)
            except DslCompileError:
                raise
            except Exception as exc:   # noqa: BLE001 - nothing internal may escape the front end
                self.err(st, *internal_error_text(exc))
            if isinstance(st, ast.If) and not st.orelse and st.body and isinstance(st.body[-1], EXITS):
                self.add_condition_facts(self.facts, st.test, positive=False, region=stmts[k + 1:])

    # ------------------------------------------------------------------ assignment
    def visit_Assign(self, node: ast.Assign) -> None:
        if self.is_shared_decl(node.value):
            if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
                self.err(node, "shared memory must be assigned to a single name")
            self.declare_shared(node.targets[0], node.value)
            return
        if len(node.targets) == 1:
            self.assign_to(node.targets[0], node.value, node)
            return
        v = self.materialise(self.expr(node.value), node)
        for t in node.targets:
            self.assign_value(t, v, node)

    def assign_to(self, target: ast.expr, value: ast.expr, node: ast.AST) -> None:
        if isinstance(target, ast.Subscript):
            self.lower_store(target, lambda current: self.scalar(value, "the stored value"), node)
            return
        if isinstance(target, ast.Tuple):
            if isinstance(value, ast.Tuple):
                v: Any = TupleVal([self.expr(e) for e in value.elts])
            else:
                v = self.expr(value)
            self.assign_value(target, self.materialise(v, node), node)
            return
        self.assign_value(target, self.expr(value), node)

    def materialise(self, v: Any, node: ast.AST) -> Any:
        """Copy impure scalars of a tuple into temporaries (so `a, b = b, a` swaps)."""
        if isinstance(v, TupleVal):
            return TupleVal([self.materialise(it, node) for it in v.items])
        if isinstance(v, Val) and isinstance(v.type, irt.ScalarType) and not v.weak and \
                not isinstance(v.expr, (ir.Const, ir.TupleGet, ir.Special, ir.ParamRef)):
            tmp = self.new_var("_tmp", v.type, self.loc(node))
            self.emit(ir.Assign(tmp, v.expr, self.loc(node)))
            return Val(ir.ReadVar(tmp, self.loc(node)))
        return v

    def assign_value(self, target: ast.expr, v: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self.bind_name(target.id, v, target)
            return
        if isinstance(target, ast.Tuple):
            if isinstance(v, Val) and isinstance(v.type, irt.ThreadIndexType):
                items = self.tuple_items(v, node)
            elif isinstance(v, TupleVal):
                items = v.items
            else:
                self.err(node.value if hasattr(node, "value") else node,
                         f"cannot unpack {self.describe(v)}")
            if len(items) != len(target.elts):
                self.err(target, f"cannot unpack {len(items)} values into {len(target.elts)} names")
            for t, it in zip(target.elts, items):
                self.assign_value(t, it, node)
            return
        if isinstance(target, ast.Subscript):
            self.lower_store(target, lambda current: self.as_scalar(v) or self.scalar(target), node)
            return
        if isinstance(target, ast.Attribute):
            self.err(target, "assigning to attributes is not supported in kernels",
                     "array shapes are fixed; use a local variable")
        self.err(target, f"cannot assign to {type(target).__name__}")

    def bind_name(self, name: str, v: Any, target: ast.Name) -> None:
        loc = self.loc(target)
        existing = self.bindings.get(name)
        if isinstance(existing, ir.Var):
            s = self.as_scalar(v)
            if s is None:
                self.err(target, f"'{name}' holds a {existing.type!r} number; cannot assign "
                         f"{self.describe(v)} to it", "use a new name")
            self.emit(ir.Assign(existing, self.convert_to_var(target, s, existing, name), loc))
            return
        if existing is not None:
            self.err(target, f"cannot reassign '{name}': it holds {self.describe_binding(existing)}",
                     "use a new name")
        s = self.as_scalar(v) if not (isinstance(v, Val) and isinstance(v.type, irt.ThreadIndexType)) \
            else None
        single = self.assigned.get(name, 0) <= 1
        pure = (isinstance(s.expr, (ir.TupleGet, ir.Special, ir.ArrayLen)) or
                (isinstance(s.expr, ir.BinOp) and not s.weak and pure_index_expr(s.expr))) \
            if s is not None else False
        if s is not None and not (pure and single):
            if s.weak and single:
                self.bindings[name] = s          # a named constant: stays weak like a literal
                return
            t = s.scalar
            var = self.new_var(name, t, loc)
            self.emit(ir.Assign(var, tr.convert(s, t, loc) if s.weak else s.expr, loc))
            self.bindings[name] = var
            if s.weak and t.is_int and isinstance(s.const_value, int):
                self.int_literal_vars[var] = s.const_value
            return
        if not single:
            self.err(target, f"'{name}' is assigned more than once but holds {self.describe(v)}",
                     "ThreadIndex values, arrays, slots and tuples are bound once; use new names")
        self.bindings[name] = self.materialise(v, target) if isinstance(v, TupleVal) else v

    def describe_binding(self, b: Any) -> str:
        if isinstance(b, ir.ParamRef):
            return f"parameter {b.param.name!r} ({b.param.type!r})"
        if isinstance(b, ir.SharedAlloc):
            return "shared memory"
        return self.describe(b)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        op = BINOPS.get(type(node.op))
        if op is None:
            self.err(node, "this augmented assignment is not supported in kernels")
        target = node.target
        if isinstance(target, ast.Subscript):
            self.lower_store(target, lambda current: self.binop(
                op, current(), self.scalar(node.value, "the right operand"), node), node)
            return
        if not isinstance(target, ast.Name):
            self.err(target, "augmented assignment needs a name or an array element")
        existing = self.bindings.get(target.id)
        if not isinstance(existing, ir.Var):
            if existing is None and self.scope.lookup(target.id) is not None:
                self.err(target, f"'{target.id}' is not a local variable of the kernel",
                         "kernels cannot rebind module variables; assign it first inside the kernel")
            self.err(target, f"cannot update '{target.id}': it holds "
                     f"{self.describe_binding(existing)}", "use a new name")
        cur = Val(ir.ReadVar(existing, self.loc(target)))
        result = self.binop(op, cur, self.scalar(node.value, "the right operand"), node)
        self.emit(ir.Assign(existing, self.convert_to_var(node, result, existing, target.id), self.loc(node)))

    def convert_to_var(self, node: ast.AST, v: Val, var: ir.Var, name: str) -> ir.Expr:
        """`v` converted for assignment to `var` (tr.implicit). A float into a variable that an int
        literal started (`acc = 0; acc += a[i]`) is told to start it as a float: an int cast would
        truncate every value."""
        try:
            return tr.implicit(v, var.type, self.loc(node), f"variable '{name}'")
        except tr.TypeRuleError as exc:
            vt = v.scalar
            if var not in self.int_literal_vars or vt is None or not vt.is_float:
                self.err(node, exc.message, exc.hint)
            literal = self.int_literal_vars[var]
            start = f"f64({literal})`" if vt.bits == 64 else f"f32({literal})` or `{name} = {float(literal)!r}`"
            self.err(node, exc.message, f"'{name}' started as the int literal {literal}, so it holds "
                     f"{var.type} values; start it as a float: `{name} = {start}")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if not isinstance(node.target, ast.Name):
            self.err(node.target, "annotated assignment needs a plain name")
        ann = self.expr(node.annotation)
        if not (isinstance(ann, PyObj) and isinstance(ann.obj, ScalarDType)):
            self.err(node.annotation, "local variables are annotated with a dsl scalar type",
                     "write e.g. `acc: f32 = 0`")
        t = ann.obj.ir
        name = node.target.id
        existing = self.bindings.get(name)
        if existing is None:
            self.bindings[name] = self.new_var(name, t, self.loc(node.target))
        elif not (isinstance(existing, ir.Var) and existing.type == t):
            self.err(node.target, f"'{name}' already holds {self.describe_binding(existing)}")
        if node.value is not None:
            self.bind_name(name, self.expr(node.value), node.target)

    # ------------------------------------------------------------------ shared memory
    def is_shared_decl(self, value: ast.expr) -> bool:
        if not isinstance(value, ast.Call) or not name_chain(value.func) or \
                root_name(value.func) in self.bindings:
            return False
        f = self.expr(value.func)
        return isinstance(f, PyObj) and isinstance(f.obj, Intrinsic) and f.obj.key.startswith("shared.")

    def check_static_shared(self, call: ast.Call, t: irt.ArrayType) -> None:
        """Static shared memory is limited to 48 KiB per block on every arch (more is dynamic)."""
        total = t.dtype.itemsize
        for e in t.shape or ():
            total *= e
        used = sum(a.type.dtype.itemsize * _product(a.type.shape) for a in self.shared
                   if a.type.shape != (-1,))
        if used + total > STATIC_SHARED_LIMIT:
            self.err(call, f"static shared memory of {used + total} bytes exceeds the "
                     f"{STATIC_SHARED_LIMIT} bytes (48 KiB) a block may declare statically",
                     "use simt.shared.dynamic(dtype) with shared_mem= for more, or smaller arrays")

    def declare_shared(self, target: ast.Name, call: ast.Call) -> None:
        key = self.expr(call.func).obj.key
        if self.unsafe_depth == 0:
            self.err(call, f"simt.{key}() outside `with simt.unsafe():`",
                     "shared memory is shared between threads: declare and use it inside "
                     "`with simt.unsafe():`")
        if not self.is_kernel:
            self.err(call, "shared memory is declared in kernels, not device functions",
                     "declare it in the kernel and pass it as an argument")
        if call.keywords:
            self.err(call, f"simt.{key}() takes positional arguments")
        if key == "shared.array":
            if len(call.args) != 2:
                self.err(call, "simt.shared.array(shape, dtype) takes 2 arguments")
            shape_v = self.expr(call.args[0])
            items = shape_v.items if isinstance(shape_v, TupleVal) else [shape_v]
            shape = []
            for it in items:
                if not (isinstance(it, Val) and it.weak and isinstance(it.const_value, int)) or \
                        it.const_value <= 0:
                    self.err(call.args[0], "the shape of a static shared array must be positive "
                             "constant integers", "use literals or module-level constants; for a "
                             "size chosen at launch use simt.shared.dynamic(dtype)")
                shape.append(it.const_value)
            dtype_node = call.args[1]
        else:
            if len(call.args) != 1:
                self.err(call, "simt.shared.dynamic(dtype) takes 1 argument")
            if any(a.type.shape == (-1,) for a in self.shared):
                self.err(call, "only one simt.shared.dynamic() array per kernel",
                         "carve several views out of one dynamic array with index arithmetic")
            shape, dtype_node = [-1], call.args[0]
        d = self.expr(dtype_node)
        if not (isinstance(d, PyObj) and isinstance(d.obj, ScalarDType)):
            self.err(dtype_node, "the dtype must be a dsl scalar type (f32, i32, ...) or a TypeVar")
        if self.assigned.get(target.id, 0) > 1 or target.id in self.bindings:
            self.err(target, f"'{target.id}' names shared memory and cannot be reassigned")
        t = irt.ArrayType(d.obj.ir, len(shape), True, "C", False, "shared", tuple(shape))
        if shape != [-1]:
            self.check_static_shared(call, t)
        alloc = ir.SharedAlloc(target.id, t, self.loc(call))
        self.shared.append(alloc)
        self.bindings[target.id] = alloc

    # ------------------------------------------------------------------ control flow
    def visit_If(self, node: ast.If) -> None:
        cond = self.to_bool(node.test)
        then_facts = self.facts.copy()
        self.add_condition_facts(then_facts, node.test, positive=True, region=node.body)
        else_facts = self.facts.copy()
        self.add_condition_facts(else_facts, node.test, positive=False, region=node.orelse)
        then = self.sub_block(node.body, then_facts)
        else_ = self.sub_block(node.orelse, else_facts)
        self.emit(ir.If(cond, then, else_, self.loc(node)))

    def visit_While(self, node: ast.While) -> None:
        if node.orelse:
            self.err(node.orelse[0], "while ... else is not supported in kernels",
                     "use a flag variable")
        cond = self.to_bool(node.test)
        self.loop_depth += 1
        try:
            body = self.sub_block(node.body)
        finally:
            self.loop_depth -= 1
        self.emit(ir.While(cond, body, self.loc(node)))

    def visit_Break(self, node: ast.Break) -> None:
        self.check_chunk_exit(node, "break")
        self.emit(ir.Break(self.loc(node)))

    def visit_Continue(self, node: ast.Continue) -> None:
        self.check_chunk_exit(node, "continue")
        self.emit(ir.Continue(self.loc(node)))

    def check_chunk_exit(self, node: ast.AST, what: str) -> None:
        if self.innermost_chunk:
            self.err(node, f"{what} inside a chunk loop is not supported",
                     "chunk loops always cover the whole chunk; use `if` inside the body")

    def visit_Return(self, node: ast.Return) -> None:
        loc = self.loc(node)
        if self.is_kernel:
            if node.value is not None:
                self.err(node.value, "a kernel cannot return a value",
                         "write the result into a simt.DisjointSlice parameter")
            self.emit(ir.Return(None, loc))
            return
        if node.value is None:
            if self.return_type not in (None, irt.VOID):
                self.err(node, f"device function must return a {self.return_type!r} value")
            self.return_type = irt.VOID
            self.emit(ir.Return(None, loc))
            return
        v = self.scalar(node.value, "the returned value")
        if self.return_type is None:
            self.return_type = v.scalar
        if self.return_type == irt.VOID:
            self.err(node.value, "this device function is declared `-> None` but returns a value")
        value = self.rule(node.value, tr.implicit, v, self.return_type, loc, "the return value")
        self.emit(ir.Return(value, loc))

    def visit_Expr(self, node: ast.Expr) -> None:
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            return          # docstring / comment string
        if isinstance(value, ast.Call):
            func = value.func
            f: Any = None
            if isinstance(func, ast.Attribute) and name_chain(func.value):
                base = self.expr(func.value)
                if isinstance(base, SlotBinding) and func.attr == "set":
                    self.slot_set(base, value.args, value)
                    return
                if isinstance(base, PyObj) and hasattr(base.obj, func.attr):
                    f = getattr(base.obj, func.attr)
            elif isinstance(func, ast.Name):
                got = self.expr(func)
                f = got.obj if isinstance(got, PyObj) else None
            if isinstance(f, Intrinsic) and f.key == "sync_threads":
                self.arity(value, 0)
                scope = getattr(self, "stride_scope", None)
                if scope is not None:
                    loop = "simt.warp.lanes(n)" if scope == "warp" else "simt.block.threads(n)"
                    self.err(value, f"simt.sync_threads() inside a `for .. in {loop}` loop: threads run "
                             "different numbers of iterations when n is not a multiple of the group, so "
                             "not every thread would reach the barrier",
                             "synchronise before or after the loop")
                self.emit(ir.SyncThreads(self.loc(value)))
                return
        v = self.expr(value)
        if isinstance(v, Val):
            self.emit(ir.ExprStmt(v.expr, self.loc(node)))

    def visit_Pass(self, node: ast.Pass) -> None:
        return

    def visit_With(self, node: ast.With) -> None:
        ok = len(node.items) == 1 and node.items[0].optional_vars is None and \
            isinstance(node.items[0].context_expr, ast.Call)
        if ok:
            f = self.expr(node.items[0].context_expr.func)
            ok = isinstance(f, PyObj) and isinstance(f.obj, Intrinsic) and f.obj.key == "unsafe"
        if not ok:
            self.err(node.items[0].context_expr, "only `with simt.unsafe():` is supported in kernels",
                     "kernels have no context managers other than simt.unsafe()")
        self.unsafe_depth += 1
        try:
            self.lower_stmts(node.body)
        finally:
            self.unsafe_depth -= 1
