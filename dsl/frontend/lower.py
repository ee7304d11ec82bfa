"""The front end proper: one `FunctionLowerer` turns one Python function into a typed IR Function.

It is a NodeVisitor split by concern: statements (stmts.py), expressions (exprs.py), calls and
intrinsics (calls.py), memory accesses and their safety rules (access.py); this file holds the state
they share (bindings, current block, facts for range proofs, unsafe depth).
"""
from __future__ import annotations

import ast
from typing import Any, Callable, NoReturn

from dsl.frontend.access import AccessMixin
from dsl.frontend.annotations import ParamAnnotation, annotation_of, check_plain_signature
from dsl.frontend.calls import CallMixin
from dsl.frontend.context import BuildContext
from dsl.frontend.exprs import ExprMixin
from dsl.frontend.groups import GroupMixin
from dsl.frontend.launch import LaunchMixin, check_launch_ops
from dsl.frontend.loops import LoopMixin
from dsl.frontend.ownership import Claim, check_claims
from dsl.frontend.proofs import Facts
from dsl.frontend.scope import Scope
from dsl.source import Source, get_source
from dsl.frontend.stmts import StmtMixin
from dsl.frontend.typing_rules import TypeRuleError
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.ir.relations import Relations
from dsl.typevars import TypeVarMismatch, bind_dtype, typevar_name


def assigned_names(nodes: list[ast.stmt] | ast.AST) -> dict[str, int]:
    """How many times each local name is bound in `nodes` (assignments, aug-assign, for targets)."""
    counts: dict[str, int] = {}
    roots = nodes if isinstance(nodes, list) else [nodes]
    for root in roots:
        for n in ast.walk(root):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                counts[n.id] = counts.get(n.id, 0) + 1
                if isinstance(getattr(n, "_kb_parent", None), ast.AugAssign):
                    counts[n.id] += 1
    return counts


def _mark_parents(tree: ast.AST) -> None:
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._kb_parent = parent  # type: ignore[attr-defined]


class FunctionLowerer(StmtMixin, LoopMixin, ExprMixin, CallMixin, GroupMixin, AccessMixin, LaunchMixin):
    """Lower one kernel or device function for one signature."""

    def __init__(self, pyfunc: Callable, signature: list[irt.Type], ctx: BuildContext, *,
                 is_kernel: bool, typevars: dict[Any, irt.ScalarType] | None = None,
                 return_type: irt.Type | None = None) -> None:
        self.pyfunc = pyfunc
        self.src: Source = get_source(pyfunc)
        self.scope = Scope(pyfunc)
        self.ctx = ctx
        self.options = ctx.options
        self.is_kernel = is_kernel
        self.what = "kernel" if is_kernel else "device function"
        self.signature = signature
        self.typevars: dict[Any, irt.ScalarType] = dict(typevars or {})
        self.return_type = return_type            # None: infer from the first `return value`
        self.bindings: dict[str, Any] = {}
        self.locals: list[ir.Var] = []
        self.shared: list[ir.SharedAlloc] = []
        self.callees: list[ir.Function] = []
        self.block: list[ir.Stmt] = []
        self.facts = Facts()
        self.unsafe_depth = 0
        self.loop_depth = 0
        self.chunk_loops: dict[int, irt.ChunkType] = {}   # id(Var) of a chunk loop -> its chunk's type
        self.stride_loops: dict[int, str] = {}    # id(Var) of a warp.lanes / block.threads loop -> scope
        self.row_loops: dict[int, str] = {}       # id(Var) of a warp.rows / block.rows loop -> scope
        self.stride_scope: str | None = None      # scope of the innermost such loop around the code
        self.claims: list[Claim] = []             # safe DisjointSlice writes (dsl/frontend/ownership.py)
        self.assigned: dict[str, int] = {}
        self.relations: Relations | None = None
        self.readonly_params: set[str] = set()    # writable arrays received as simt.Array
        self.int_literal_vars: dict[ir.Var, int] = {}   # `acc = 0`: the literal (the float-start hint)

    # ---------------------------------------------------------------- diagnostics and helpers
    def err(self, node: ast.AST | None, message: str, hint: str = "") -> NoReturn:
        self.src.error(node, message, hint)

    def rule(self, node: ast.AST, fn: Callable[..., Any], *args: Any) -> Any:
        """Apply a typing rule, turning its TypeRuleError into a compile error at `node`."""
        try:
            return fn(*args)
        except TypeRuleError as exc:
            self.err(node, exc.message, exc.hint)

    def loc(self, node: ast.AST) -> ir.Loc:
        return self.src.loc(node)

    def emit(self, stmt: ir.Stmt) -> None:
        self.block.append(stmt)

    def new_var(self, name: str, t: irt.Type, loc: ir.Loc) -> ir.Var:
        var = ir.Var(name, t, loc)
        self.locals.append(var)
        return var

    def sub_block(self, stmts: list[ast.stmt], facts: Facts | None = None) -> list[ir.Stmt]:
        """Lower `stmts` into a fresh block with its own (copied or given) facts."""
        saved_block, saved_facts = self.block, self.facts
        self.block, self.facts = [], (facts if facts is not None else saved_facts.copy())
        try:
            self.lower_stmts(stmts)
            return self.block
        finally:
            self.block, self.facts = saved_block, saved_facts

    # ---------------------------------------------------------------- entry
    def lower_device_function(self, pyfunc: Callable, signature: list[irt.Type], **kw: Any) -> ir.Function:
        """A device function this one calls, lowered for `signature` in the same build (CallMixin)."""
        return FunctionLowerer(pyfunc, signature, self.ctx, is_kernel=False, **kw).lower()

    def param_annotations(self) -> list[ParamAnnotation]:
        check_plain_signature(self.src, self.what)
        return [annotation_of(self.src, self.scope, a, "parameter") for a in self.src.tree.args.args]

    def lower(self) -> ir.Function:
        tree = self.src.tree
        _mark_parents(tree)
        anns = self.param_annotations()
        if len(anns) != len(self.signature):
            self.err(tree, f"{self.what} '{tree.name}' has {len(anns)} parameters but "
                     f"{len(self.signature)} argument types were given")
        self.assigned = assigned_names(tree.body)
        first_site = len(self.ctx.fault_sites)
        params = self.bind_params(anns)
        if self.is_kernel:
            ndims = {p.name: p.type.ndim for p in params if isinstance(p.type, irt.ArrayType)}
            self.relations = Relations(self.options.requires, ndims)
            self.block_facts()
        else:
            self.relations = Relations((), {})
        self.lower_stmts(tree.body)
        if self.return_type is None:
            self.return_type = irt.VOID
        if not self.is_kernel and self.return_type != irt.VOID and not self.always_returns(tree.body):
            self.err(tree, f"device function '{tree.name}' can reach its end without returning "
                     f"a {self.return_type!r} value", "end every path with `return value`")
        fn = ir.Function(
            name=tree.name, params=params, return_type=self.return_type, body=self.block,
            is_kernel=self.is_kernel, loc=self.loc(tree), locals=self.locals, shared=self.shared,
            fault_sites=list(self.ctx.fault_sites[0 if self.is_kernel else first_site:]), callees=self.callees,
            boundscheck=self.options.boundscheck)
        if self.is_kernel:
            fn.exact_block = self.options.block
            fn.max_threads = self.options.launch_bounds
            fn.pdl, fn.cooperative, fn.cluster = self.options.pdl, self.options.cooperative, self.options.cluster
            check_claims([p.name for p in params], self.claims, self.options)
            check_launch_ops(fn)
        else:
            self.ctx.claims[id(fn)] = self.claims
        return fn

    def block_facts(self) -> None:
        """threadIdx < blockDim is known when the kernel fixes the block (exact or launch bounds)."""
        dims = self.options.block or ((self.options.launch_bounds,) * 3
                                      if self.options.launch_bounds else None)
        if dims is None:
            return
        for axis, bound in zip("xyz", dims):
            key = ("reg", f"tid.{axis}")
            self.facts.add_const(key, bound)
            self.facts.nonneg.add(key)

    def bind_params(self, anns: list[ParamAnnotation]) -> list[ir.Param]:
        params = []
        for k, (ann, t) in enumerate(zip(anns, self.signature)):
            node = self.src.tree.args.args[k]
            self.check_param_type(node, ann, t)
            p = ir.Param(ann.name, t, k, self.loc(node))
            params.append(p)
            if isinstance(t, irt.ArrayType):
                if self.assigned.get(ann.name):
                    self.err(self.first_store(ann.name), f"cannot assign to array parameter "
                             f"'{ann.name}'", "use a new local name")
                self.bindings[ann.name] = ir.ParamRef(p, p.loc)
            elif self.assigned.get(ann.name):
                var = self.new_var(ann.name, t, p.loc)   # a mutable copy of a by-value parameter
                self.emit(ir.Assign(var, ir.ParamRef(p, p.loc), p.loc))
                self.bindings[ann.name] = var
            else:
                self.bindings[ann.name] = ir.ParamRef(p, p.loc)
        return params

    def check_param_type(self, node: ast.arg, ann: ParamAnnotation, t: irt.Type) -> None:
        """The signature must agree with the annotation; TypeVars bind (consistently) here."""
        if ann.kind == "array":
            relaxed = not self.is_kernel and isinstance(t, irt.ArrayType) and t.writable
            if not isinstance(t, irt.ArrayType) or t.ndim != ann.ndim or \
                    (t.writable != ann.writable and not relaxed):
                self.err(node, f"parameter '{ann.name}' is declared {ann.spelling()} but the signature "
                         f"gives {t!r}")
            if t.writable and not ann.writable:
                self.readonly_params.add(ann.name)
            self.bind_typevar(node, ann, t.dtype)
        else:
            if not isinstance(t, irt.ScalarType):
                self.err(node, f"parameter '{ann.name}' is a scalar but the signature gives {t!r}")
            self.bind_typevar(node, ann, t)

    def bind_typevar(self, node: ast.AST, ann: ParamAnnotation, dtype: irt.ScalarType) -> None:
        """The one binder (dsl/typevars.py); a mismatch is a compile error at the parameter."""
        try:
            bind_dtype(self.typevars, ann.dtype, dtype)
        except TypeVarMismatch as m:
            if m.typevar is None:
                self.err(node, f"parameter '{ann.name}' is declared with dtype {ann.dtype} but the "
                         f"signature gives {dtype}")
            self.err(node, f"type variable {typevar_name(m.typevar)} is {m.expected} from an earlier parameter "
                     f"but '{ann.name}' gives {dtype}",
                     "pass arguments of the same dtype, or use separate TypeVars")

    def first_store(self, name: str) -> ast.AST:
        for n in ast.walk(self.src.tree):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                return n
        return self.src.tree

    @staticmethod
    def always_returns(stmts: list[ast.stmt]) -> bool:
        if not stmts:
            return False
        last = stmts[-1]
        if isinstance(last, ast.Return):
            return True
        if isinstance(last, ast.If):
            return FunctionLowerer.always_returns(last.body) and \
                FunctionLowerer.always_returns(last.orelse)
        return False


def lower_function(pyfunc: Callable, signature: list[irt.Type], ctx: BuildContext, *,
                   is_kernel: bool, **kw: Any) -> ir.Function:
    return FunctionLowerer(pyfunc, signature, ctx, is_kernel=is_kernel, **kw).lower()
