"""Tile front end: the Python AST of a @tile.kernel → tile IR (dsl/tile/ir.py), for one signature.

Values during translation are either compile-time Python values (ints, floats, tuples, dtypes,
modules, intrinsics, the handles of dsl/tile/values.py) or typed tile expressions. Shapes are always static; typing
and broadcasting rules live in dsl/tile/ops.py.
"""
from __future__ import annotations

import ast
import builtins
import math

from dsl.source import Source, Span, get_source
from dsl.ir.types import BOOL, I32, ScalarType
from dsl.tile import ir as T
from dsl.tile import launch as launch_ops
from dsl.tile import ops, tileops
from dsl.tile.api import PY_MATH, Intrinsic
from dsl.tile.errors import TileCompileError
from dsl.tile.forward import forward_loads
from dsl.tile.funcs import TileFunc, inline_call
from dsl.tile.intrinsics import call_intrinsic, call_method
from dsl.tile.types import ArrayParamType, ConstParamType, PartitionParamType, ScalarParamType, TileType, as_scalar_type
from dsl.tile.values import Method, ParamHandle, ShapeHandle
from dsl.vocab.numpy_calls import numpy_call_hint

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
           ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and_",
           ast.BitOr: "or_", ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift",
           ast.MatMult: "matmul"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}


def _assigned_names(fdef: ast.FunctionDef) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in ast.walk(fdef):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    weight = 2 if isinstance(node, (ast.AugAssign, ast.For)) else 1
                    counts[n.id] = counts.get(n.id, 0) + weight
    return counts


class TileFrontend:
    assigned_names = staticmethod(_assigned_names)     # for the helpers it inlines (dsl/tile/funcs.py)

    def __init__(self, pyfunc, signature: list, name: str | None = None,
                 requires: tuple[str, ...] = (), group_m: int | None = None, launch: object = None) -> None:
        self.pyfunc = pyfunc
        self.requires = tuple(requires)      # the kernel's relations, carried by the tile IR
        self.group_m = group_m               # the kernel's block order (dsl/tile/lower/tiles.py)
        self.launch = launch                 # the kernel's launch features (dsl/tile/launch.py)
        self.block_order: tuple | None = None     # tile.block_order's (run, group) (handlers.block_order)
        self.inlining: list = []             # the @tile.func helpers being inlined, outermost first
        self.src: Source = get_source(pyfunc)      # the SIMT front end's source, positions and carets
        self.fdef = self.src.tree
        self.signature = signature
        self.name = name or pyfunc.__name__
        self.globals = dict(pyfunc.__globals__)
        if pyfunc.__closure__:
            for n, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__):
                self.globals[n] = cell.cell_contents
        self.env: dict[str, object] = {}
        self.locals: list[T.TVar] = []
        self.multi = _assigned_names(self.fdef)
        self.int_literal_vars: dict[T.TVar, int] = {}   # `acc = 0`: the literal (the float-start hint)
        self.body_stack: list[list[T.TStmt]] = []
        self.arrivals: list[T.Arrival] = []             # the `if tile.arrive(...)` branches we are in (arrivals.py)
        self.arrival_test: ast.expr | None = None       # the `if` test being read: where tile.arrive may stand
        self.store_at_shapes: dict[str, tuple[int, ...]] = {}   # tile.store_at: each array's one tile shape

    # ---------------------------------------------------------------------------------- helpers
    def loc(self, node: ast.AST) -> Span:
        """Position of `node` in the user's file, as the SIMT front end gives it (the Span keeps the
        construct's extent, so errors raised later from the IR location get the same caret)."""
        return self.src.span(node)

    def err(self, node: ast.AST, msg: str) -> TileCompileError:
        return TileCompileError(msg, self.loc(node))

    def emit(self, stmt: T.TStmt) -> None:
        self.body_stack[-1].append(stmt)

    # ---------------------------------------------------------------------------------- entry
    def build(self) -> T.TileFunction:
        args = self.fdef.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise self.err(self.fdef, "tile kernels take plain positional parameters only")
        if len(args.args) != len(self.signature):
            raise self.err(self.fdef, f"kernel has {len(args.args)} parameters, signature has "
                                      f"{len(self.signature)}")
        params: list[T.TParam] = []
        grid_param = None
        for i, (a, ty) in enumerate(zip(args.args, self.signature)):
            if isinstance(ty, ConstParamType):
                self.env[a.arg] = ty.value
                continue
            p = T.TParam(a.arg, ty, i)
            params.append(p)
            if isinstance(ty, ScalarParamType):
                self.env[a.arg] = T.ScalarArg(p, TileType(ty.dtype, ()), self.loc(a))
            else:
                self.env[a.arg] = ParamHandle(p)
                if isinstance(ty, PartitionParamType) and grid_param is None:
                    grid_param = p
        if grid_param is None:
            raise self.err(self.fdef, "a tile kernel needs a tile.Partition parameter: the partition "
                                      "defines the grid and the only writable region of each tile block")
        self.grid_param = grid_param
        body: list[T.TStmt] = []
        self.body_stack.append(body)
        for stmt in self.fdef.body:
            self.stmt(stmt)
        self.body_stack.pop()
        fn = T.TileFunction(self.name, params, body, grid_param, self.locals, self.loc(self.fdef),
                            self.requires, self.group_m, self.launch, self.block_order)
        forward_loads(fn)          # named single-use loads back into their use (dsl/tile/forward.py)
        return fn

    # ---------------------------------------------------------------------------------- statements
    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Expr):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return  # docstring
            v = self.expr(node.value)
            if v is not None and not isinstance(v, _StoreDone):
                raise self.err(node, "this expression's value is unused; assign it or store it with "
                                     "out.store(...)")
            return
        if isinstance(node, ast.Assign):
            value = self.expr(node.value)
            for tgt in node.targets:
                self.assign(tgt, value, node)
            return
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, self.expr(node.value), node)
            return
        if isinstance(node, ast.AugAssign):
            if not isinstance(node.target, ast.Name):
                raise self.err(node, "augmented assignment only to a local name (tiles are values; "
                                     "write results with out.store)")
            cur = self.lookup(node.target.id, node.target)
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.err(node, "unsupported augmented operator")
            self.assign(node.target, self.binop(op, cur, self.expr(node.value), node), node)
            return
        if isinstance(node, ast.For):
            return self.for_stmt(node)
        if isinstance(node, ast.If):
            return self.if_stmt(node)
        if isinstance(node, ast.Pass):
            return
        if isinstance(node, ast.Return):
            if node.value is not None:
                raise self.err(node, "a tile kernel returns nothing; store results with out.store(...)")
            raise self.err(node, "early `return` is not supported in tile kernels; use `if` around "
                                 "the rest of the body")
        what = {ast.While: "while loops (use for ... in range(...))", ast.Try: "try/except",
                ast.With: "with blocks", ast.FunctionDef: "nested functions", ast.ClassDef: "classes",
                ast.Delete: "del", ast.Global: "global", ast.Nonlocal: "nonlocal",
                ast.Raise: "raise", ast.Assert: "assert", ast.Import: "import",
                ast.ImportFrom: "import"}.get(type(node), type(node).__name__)
        raise self.err(node, f"{what} not supported in a tile kernel")

    def assign(self, tgt: ast.expr, value: object, node: ast.AST) -> None:
        if isinstance(tgt, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(tgt.elts):
                raise self.err(tgt, "tuple assignment needs a tuple of the same length on the right")
            # Python evaluates the whole right side first: `m, s = m_new, s * exp(m - m_new)` must read
            # the old m, so a tile value that reads a target variable is copied before any is assigned
            targets = {id(self.env[n.id]) for n in ast.walk(tgt)
                       if isinstance(n, ast.Name) and isinstance(self.env.get(n.id), T.TVar)}
            value = tuple(self.snapshot(v, node, targets) for v in value)
            for t, v in zip(tgt.elts, value):
                self.assign(t, v, node)
            return
        if not isinstance(tgt, ast.Name):
            raise self.err(tgt, "only local names can be assigned in a tile kernel; tiles are values "
                                "(write results with out.store(value))")
        name = tgt.id
        cur = self.env.get(name)
        if isinstance(cur, T.TVar):
            e = self.as_expr(value, node, like=cur.type.dtype)
            if cur in self.int_literal_vars and e.type.dtype.is_float and e.type != cur.type \
                    and not isinstance(value, (int, float, bool)):
                raise self.literal_start_error(name, cur, e, node)
            if e.type.shape != cur.type.shape:
                raise self.err(node, f"`{name}` was a {cur.type} and is assigned a {e.type}: a variable "
                                     f"keeps its shape; use a new name")
            if e.type.dtype != cur.type.dtype:
                if isinstance(value, (int, float, bool)):
                    e = ops.cast(e, cur.type.dtype, self.loc(node))
                else:
                    raise self.err(node, f"`{name}` was a {cur.type} and is assigned a {e.type}; cast "
                                         f"explicitly with .astype({cur.type.dtype})")
            self.emit(T.Assign(cur, e, self.loc(node)))
            return
        if isinstance(value, T.TExpr) or (isinstance(value, (int, float, bool))
                                          and self.multi.get(name, 0) > 1):
            e = self.as_expr(value, node)
            var = T.TVar(name, e.type)
            self.locals.append(var)
            self.env[name] = var
            self.emit(T.Assign(var, e, self.loc(node)))
            if isinstance(value, int) and not isinstance(value, bool):
                self.int_literal_vars[var] = value
            return
        self.env[name] = value   # compile-time value

    def snapshot(self, value: object, node: ast.AST, targets: set[int]) -> object:
        """`value` with each tile expression in it that reads a variable of `targets` (ids) copied into
        a fresh local (other values, compile-time ones included, as they are)."""
        if isinstance(value, tuple):
            return tuple(self.snapshot(v, node, targets) for v in value)
        if not isinstance(value, T.TExpr) or not any(
                isinstance(e, T.Read) and id(e.var) in targets for e in T.walk_exprs(value)):
            return value
        var = T.TVar("_rhs", value.type)
        self.locals.append(var)
        self.emit(T.Assign(var, value, self.loc(node)))
        return var

    def literal_start_error(self, name: str, cur: T.TVar, e: T.TExpr, node: ast.AST) -> TileCompileError:
        """A float (tile) assigned to a variable an int literal started (`acc = 0; acc += x`): start it
        as what it accumulates; an .astype cast to the int type would truncate every value."""
        literal, dtype = self.int_literal_vars[cur], e.type.dtype
        if e.type.shape:
            start = f"tile.zeros({e.type.shape}, {dtype})" if literal == 0 else \
                f"tile.full({e.type.shape}, {float(literal)!r}, {dtype})"
        else:
            start = f"{dtype}({literal})" + (f"` or `{name} = {float(literal)!r}" if dtype.name == "f32" else "")
        return TileCompileError(f"`{name}` was a {cur.type} and is assigned a {e.type}", self.loc(node),
                                f"`{name}` started as the int literal {literal}; start it as a float: "
                                f"`{name} = {start}`")

    def for_stmt(self, node: ast.For) -> None:
        if node.orelse:
            raise self.err(node, "for/else is not supported")
        it = node.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range"
                and self.resolve_name(it.func.id, it.func) is builtins.range):
            raise self.err(it, "tile kernels loop only over range(...)")
        if not isinstance(node.target, ast.Name):
            raise self.err(node.target, "the loop variable must be a plain name")
        bounds = [self.expr(a) for a in it.args]
        if not 1 <= len(bounds) <= 3 or it.keywords:
            raise self.err(it, "range takes 1 to 3 positional arguments")
        if len(bounds) == 1:
            bounds = [0, bounds[0], 1]
        elif len(bounds) == 2:
            bounds = [bounds[0], bounds[1], 1]
        exprs = []
        for b in bounds:
            e = self.as_expr(b, it, like=I32)
            if e.type.shape != () or not e.type.dtype.is_int:
                raise self.err(it, f"range bounds must be integer scalars, got {e.type}")
            exprs.append(ops.cast(e, I32, self.loc(it)))
        if isinstance(bounds[2], int) and bounds[2] == 0:
            raise self.err(it, "range step must not be zero")
        var = T.TVar(node.target.id, TileType(I32, ()))
        self.locals.append(var)
        self.env[node.target.id] = var
        body: list[T.TStmt] = []
        self.body_stack.append(body)
        for s in node.body:
            self.stmt(s)
        self.body_stack.pop()
        self.emit(T.For(var, exprs[0], exprs[1], exprs[2], body, self.loc(node)))

    def if_stmt(self, node: ast.If) -> None:
        outer, self.arrival_test = self.arrival_test, node.test
        try:
            cond = self.expr(node.test)
        finally:
            self.arrival_test = outer
        if isinstance(cond, T.Arrival):     # the branch owns the arrival's tiles (arrivals.py)
            from dsl.tile.arrivals import open_branch
            open_branch(self, node, cond)
        elif not isinstance(cond, T.TExpr):
            for s in (node.body if cond else node.orelse):
                self.stmt(s)
            return
        elif cond.type.shape != ():
            raise self.err(node.test, f"an `if` condition must be a scalar, got {cond.type}; use "
                                      f"tile.where(cond, a, b) for elementwise choice")
        else:
            cond = ops.to_bool(cond, self.loc(node.test))
        then: list[T.TStmt] = []
        else_: list[T.TStmt] = []
        owner = [cond] if isinstance(cond, T.Arrival) else []
        for branch, stmts, owns in ((then, node.body, owner), (else_, node.orelse, [])):
            self.body_stack.append(branch)
            self.arrivals += owns
            try:
                for s in stmts:
                    self.stmt(s)
            finally:
                del self.arrivals[len(self.arrivals) - len(owns):]
                self.body_stack.pop()
        self.emit(T.If(cond, then, else_, self.loc(node)))

    # ---------------------------------------------------------------------------------- expressions
    def as_expr(self, v: object, node: ast.AST, like: ScalarType | None = None) -> T.TExpr:
        if isinstance(v, T.TVar):
            return T.Read(v, self.loc(node))
        if isinstance(v, T.TExpr):
            return v
        if isinstance(v, (bool, int, float)):
            return ops.literal(v, like, self.loc(node))
        raise self.err(node, f"expected a tile or a number here, got {type(v).__name__} {v!r}")

    def resolve_name(self, name: str, node: ast.AST) -> object:
        if name in self.env:
            return self.env[name]
        if name in self.globals:
            return self.globals[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.err(node, f"unknown name `{name}`")

    def lookup(self, name: str, node: ast.AST) -> object:
        v = self.resolve_name(name, node)
        if isinstance(v, T.TVar):
            return T.Read(v, self.loc(node))
        return v

    def expr(self, node: ast.expr) -> object:
        loc = self.loc(node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float, str)) or node.value is None:
                return node.value   # strings only make sense as compile-time arguments: float("inf")
            raise self.err(node, f"constant {node.value!r} is not a number")
        if isinstance(node, ast.Name):
            return self.lookup(node.id, node)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.expr(e) for e in node.elts)
        if isinstance(node, ast.Attribute):
            return self.attribute(self.expr(node.value), node.attr, node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.err(node, "unsupported operator")
            return self.binop(op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand)
            if not isinstance(v, T.TExpr):
                try:
                    return {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Not: lambda x: not x,
                            ast.Invert: lambda x: ~x}[type(node.op)](v)
                except TypeError as exc:
                    raise self.err(node, str(exc)) from None
            op = {ast.USub: "neg", ast.UAdd: "pos", ast.Not: "not_", ast.Invert: "invert"}[type(node.op)]
            return ops.unary(op, v, loc)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.BoolOp):
            vals = [self.expr(v) for v in node.values]
            out = vals[0]
            for v in vals[1:]:
                if not isinstance(out, T.TExpr) and not isinstance(v, T.TExpr):
                    out = (out and v) if isinstance(node.op, ast.And) else (out or v)
                    continue
                a = ops.to_bool(self.as_expr(out, node), loc)
                b = ops.to_bool(self.as_expr(v, node), loc)
                if a.type.shape != () or b.type.shape != ():
                    raise self.err(node, "`and`/`or` need scalars; use `&` / `|` on tiles")
                out = ops.binary("and_" if isinstance(node.op, ast.And) else "or_", a, b, loc)
            return out
        if isinstance(node, ast.IfExp):
            c = self.expr(node.test)
            if not isinstance(c, T.TExpr):
                return self.expr(node.body if c else node.orelse)
            return self.where(c, self.expr(node.body), self.expr(node.orelse), node)
        if isinstance(node, ast.Call):
            return self.call(node)
        kind = {ast.Lambda: "lambda", ast.GeneratorExp: "generator expressions",
                ast.ListComp: "list comprehensions", ast.JoinedStr: "f-strings",
                ast.Dict: "dicts", ast.Set: "sets"}.get(type(node), type(node).__name__)
        raise self.err(node, f"{kind} not supported in a tile kernel")

    def binop(self, op: str, a: object, b: object, node: ast.AST) -> object:
        if not isinstance(a, T.TExpr) and not isinstance(b, T.TExpr):
            if op == "matmul":
                raise self.err(node, "@ needs tiles")
            try:
                return ops.PY_BINOPS[op](a, b)
            except (TypeError, ZeroDivisionError) as exc:
                raise self.err(node, f"compile-time {op} failed: {exc}") from None
        if op == "matmul":
            return self.matmul(a, b, None, node)
        if op == "pow" and isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 8:
            x = self.as_expr(a, node)
            if b == 0:
                one = ops.literal(1, x.type.dtype, self.loc(node))
                return ops.broadcast(one, x.type.shape, self.loc(node))
            out = x
            for _ in range(b - 1):
                out = ops.binary("mul", out, x, self.loc(node))
            return out
        try:
            return ops.binary(op, a, b, self.loc(node))
        except ops.TileTypeError as exc:
            raise self.err(node, str(exc)) from None

    def compare(self, node: ast.Compare) -> object:
        left = self.expr(node.left)
        result: object = True
        for opnode, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            op = _CMPOPS.get(type(opnode))
            if op is None:
                raise self.err(node, "only == != < <= > >= comparisons are supported")
            if not isinstance(left, T.TExpr) and not isinstance(right, T.TExpr):
                r = ops.PY_CMPOPS[op](left, right)
            else:
                try:
                    r = ops.compare(op, left, right, self.loc(node))
                except ops.TileTypeError as exc:
                    raise self.err(node, str(exc)) from None
            if result is True:
                result = r
            elif isinstance(result, T.TExpr) or isinstance(r, T.TExpr):
                result = ops.binary("and_", self.as_expr(result, node), self.as_expr(r, node), self.loc(node))
            else:
                result = result and r
            left = right
        return result

    def subscript(self, node: ast.Subscript) -> object:
        base = self.expr(node.value)
        if isinstance(base, ShapeHandle):
            k = self.expr(node.slice)
            p = base.param
            if not isinstance(k, int) or not -p.type.ndim <= k < p.type.ndim:
                raise self.err(node, f"`{p.name}.shape[k]` needs a constant k in range "
                                     f"[0, {p.type.ndim})")
            return T.ArrayDim(p, k % p.type.ndim, TileType(I32, ()), self.loc(node))
        if isinstance(base, T.TExpr):
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return self.expand_index(base, items, node)
        if isinstance(base, ParamHandle):
            raise self.err(node, f"`{base.param.name}[...]`: tile kernels access arrays by tiles; use "
                                 f"tile.load({base.param.name}, index, shape)")
        idx = self.expr(node.slice)
        try:
            return base[idx]  # type: ignore[index]
        except Exception as exc:  # noqa: BLE001 - compile-time indexing of a user value
            raise self.err(node, f"compile-time indexing failed: {exc}") from None

    def expand_index(self, x: T.TExpr, items: list[ast.expr], node: ast.AST) -> T.TExpr:
        """x[None, :] style: only `:` and `None` (adds a unit axis) are allowed on tiles."""
        shape: list[int] = []
        src = list(x.type.shape)
        for it in items:
            if isinstance(it, ast.Constant) and it.value is None:
                shape.append(1)
            elif isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
                if not src:
                    raise self.err(node, "too many `:` for this tile")
                shape.append(src.pop(0))
            else:
                raise self.err(node, "tiles accept only `:` and `None` subscripts (to add unit axes); "
                                     "load sub-tiles with tile.load")
        shape.extend(src)
        return T.Reshape(x, TileType(x.type.dtype, tuple(shape)), self.loc(node))

    def attribute(self, base: object, attr: str, node: ast.AST) -> object:
        if isinstance(base, ParamHandle):
            ty = base.param.type
            if attr == "shape":
                return ShapeHandle(base.param)
            if attr == "ndim":
                return ty.ndim
            if attr == "dtype":
                return ty.dtype
            if isinstance(ty, PartitionParamType):
                if attr == "tile_shape":
                    return ty.tile_shape
                if attr in tileops.method_names(tileops.PARTITION):
                    return Method(attr, base)
            raise self.err(node, f"`{base.param.name}` has no attribute `{attr}` usable in a tile kernel")
        if isinstance(base, T.TExpr):
            if attr == "shape":
                return base.type.shape
            if attr == "dtype":
                return base.type.dtype
            if attr == "ndim":
                return base.type.ndim
            if attr == "T":
                return ops.permute(base, tuple(reversed(range(base.type.ndim))), self.loc(node))
            if attr in tileops.method_names(tileops.TILE):
                return Method(attr, base)
            raise self.err(node, f"a tile has no attribute `{attr}`")
        try:
            return getattr(base, attr)
        except AttributeError:
            raise self.err(node, f"{base!r} has no attribute `{attr}`") from None

    # ---------------------------------------------------------------------------------- calls
    def call(self, node: ast.Call) -> object:
        fn = self.expr(node.func)
        args = [self.expr(a) for a in node.args]
        kwargs = {k.arg: self.expr(k.value) for k in node.keywords if k.arg}
        if any(k.arg is None for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            raise self.err(node, "*args / **kwargs are not supported in tile kernels")
        loc = self.loc(node)
        if isinstance(fn, TileFunc):            # a @tile.func helper: inlined here (dsl/tile/funcs.py)
            return inline_call(self, fn, args, kwargs, node)
        try:
            if isinstance(fn, Method):
                return self.method(fn, args, kwargs, node)
            if isinstance(fn, Intrinsic):
                return self.intrinsic(fn.name, args, kwargs, node)
            if isinstance(fn, launch_ops.LaunchIntrinsic):     # tile.pdl.wait(), tile.grid_sync(), ...
                return launch_ops.call(self, fn, args, kwargs, node)
            if fn in PY_MATH and not any(isinstance(a, T.TExpr) for a in args):
                return fn(*args)  # type: ignore[operator]
            if fn in PY_MATH:
                name = PY_MATH[fn]  # type: ignore[index]
                return self.intrinsic("abs" if name == "fabs" else name, args, kwargs, node)
            if fn in (builtins.min, builtins.max) and any(isinstance(a, T.TExpr) for a in args):
                out = args[0]
                for a in args[1:]:
                    out = ops.binary(fn.__name__, out, a, loc)  # type: ignore[union-attr]
                return out
            if fn is builtins.abs and args and isinstance(args[0], T.TExpr):
                return ops.unary("abs", args[0], loc)
            if fn in (builtins.float, builtins.int, builtins.bool) and args and isinstance(args[0], T.TExpr):
                st = as_scalar_type(fn)
                assert st is not None
                return ops.cast(args[0], st, loc)
            is_dtype = isinstance(fn, ScalarType) or isinstance(getattr(fn, "ir", None), ScalarType)
            st = as_scalar_type(fn) if is_dtype else None
            if st is not None and len(args) == 1 and not kwargs:
                if isinstance(args[0], T.TExpr):
                    return ops.cast(args[0], st, loc)
                return ops.cast(ops.literal(args[0], st, loc), st, loc)
            if fn in (builtins.range,):
                raise self.err(node, "range() is only usable as a for-loop iterable")
            if fn in (builtins.len, builtins.min, builtins.max, builtins.abs, builtins.float,
                      builtins.int, builtins.bool, builtins.round, builtins.tuple) or fn in PY_MATH:
                return fn(*args, **kwargs)  # type: ignore[operator]
        except ops.TileTypeError as exc:
            raise self.err(node, str(exc)) from None
        foreign = numpy_call_hint(fn, "tile")       # np.sqrt: name tile.sqrt
        if foreign is not None:
            raise TileCompileError(foreign[0], self.loc(node.func), foreign[1])
        raise self.err(node, f"cannot call {fn!r} in a tile kernel (only tile.* functions, @tile.func "
                             f"helpers, math functions, casts and min/max/abs)")

    def method(self, m: Method, args: list, kwargs: dict, node: ast.Call) -> object:
        """`x.sum(...)`, `out.store(v)`: the method form of a tile op (dsl/tile/tileops.py)."""
        return call_method(self, m, args, kwargs, node)

    def store(self, p: T.TParam, value: object, node: ast.AST, chunk: object = None) -> "_StoreDone":
        ty = p.type
        assert isinstance(ty, PartitionParamType)
        if chunk is not None:         # a sub-tile of the block's own tile (dsl/tile/chunks.py)
            from dsl.tile.chunks import chunk_store
            self.emit(chunk_store(self, p, value, chunk, node))
            return _StoreDone()
        loc = self.loc(node)
        v = self.as_expr(value, node, like=ty.dtype)
        try:
            if v.type.shape != ty.tile_shape:
                if v.type.size == ops.prod(ty.tile_shape) and v.type.shape and \
                        tuple(s for s in v.type.shape if s != 1) == tuple(s for s in ty.tile_shape if s != 1):
                    v = T.Reshape(v, TileType(v.type.dtype, ty.tile_shape), loc)
                else:
                    v = ops.broadcast(v, ty.tile_shape, loc)
        except ops.TileTypeError:
            raise self.err(node, f"{p.name}.store: value of shape {v.type.shape} does not fit the "
                                 f"partition's tile shape {ty.tile_shape}") from None
        if v.type.dtype != ty.dtype:
            v = ops.cast(v, ty.dtype, loc)
        self.emit(T.Store(p, v, loc))
        return _StoreDone()

    def make_load(self, p: T.TParam, index: list, shape: object, padding: object, node: ast.AST) -> T.TExpr:
        ty = p.type
        loc = self.loc(node)
        if not isinstance(shape, tuple) or not all(isinstance(s, int) for s in shape):
            raise self.err(node, f"tile shape must be a compile-time tuple of ints, got {shape!r}")
        if len(shape) != ty.ndim:
            raise self.err(node, f"tile shape {shape} has {len(shape)} dims, `{p.name}` has {ty.ndim}")
        ops.check_shape(shape, loc)
        if len(index) != ty.ndim:
            raise self.err(node, f"tile index has {len(index)} components, `{p.name}` has {ty.ndim} dims")
        idx = []
        for c in index:
            e = self.as_expr(c, node, like=I32)
            if e.type.shape != () or not (e.type.dtype.is_int or e.type.dtype == BOOL):
                raise self.err(node, f"tile index components must be integer scalars, got {e.type}")
            idx.append(ops.cast(e, I32, loc))
        if isinstance(ty, ArrayParamType) and ty.atomic:     # read only where an arrival owns the tile
            from dsl.tile.arrivals import owned_index
            owned_index(self, p, idx, node, f"tile.load({p.name}, index, shape)")
        if not isinstance(padding, (int, float, bool)):
            raise self.err(node, "padding must be a compile-time number (e.g. 0, -math.inf)")
        if isinstance(padding, float) and not ty.dtype.is_float and not math.isfinite(padding):
            raise self.err(node, f"padding {padding} does not fit {ty.dtype}")
        return T.Load(p, idx, padding, TileType(ty.dtype, shape), loc)

    def matmul(self, a: object, b: object, acc: object, node: ast.AST) -> T.TExpr:
        try:
            return ops.matmul(self.as_expr(a, node), self.as_expr(b, node),
                              None if acc is None else self.as_expr(acc, node), self.loc(node))
        except ops.TileTypeError as exc:
            raise self.err(node, str(exc)) from None

    def where(self, c: object, a: object, b: object, node: ast.AST) -> T.TExpr:
        try:
            return ops.where(self.as_expr(c, node), a, b, self.loc(node))
        except ops.TileTypeError as exc:
            raise self.err(node, str(exc)) from None

    def intrinsic(self, name: str, args: list, kwargs: dict, node: ast.Call) -> object:
        return call_intrinsic(self, name, args, kwargs, node)


class _StoreDone:
    """Value of an `out.store(...)` call: only valid as an expression statement."""
