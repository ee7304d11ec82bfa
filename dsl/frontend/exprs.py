"""Expressions: names, constants, operators, comparisons, attributes and subscripts."""
from __future__ import annotations

import ast
import math
import operator
from types import ModuleType
from typing import Any

import numpy as np

from dsl.frontend import typing_rules as tr
from dsl.frontend.scope import MISSING
from dsl.frontend.values import PyObj, SlotBinding, StrideVal, TupleVal, Val, weak_const
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.vocab.simt import Register
from dsl.types import BY_IR, ir_scalar_from_dtype, is_typevar

BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv",
          ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and_",
          ast.BitOr: "or_", ast.BitXor: "xor", ast.LShift: "lshift", ast.RShift: "rshift"}
CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PYCMP = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
          "gt": operator.gt, "ge": operator.ge}

# constructs that have no kernel meaning, with what to write instead
UNSUPPORTED_EXPR = {
    ast.Lambda: ("lambda functions are not supported in kernels",
                 "define a @simt.device function at module level and call it"),
    ast.GeneratorExp: ("generator expressions are not supported in kernels",
                       "write a `for i in range(n):` loop"),
    ast.ListComp: ("list comprehensions are not supported in kernels", "write a `for` loop"),
    ast.SetComp: ("set comprehensions are not supported in kernels", "write a `for` loop"),
    ast.DictComp: ("dict comprehensions are not supported in kernels", "write a `for` loop"),
    ast.JoinedStr: ("f-strings are not supported in kernels",
                    "kernels cannot build text; report values through an output array"),
    ast.List: ("lists are not supported in kernels",
               "use a tuple for a multi-dimensional index, or simt.shared.array for scratch memory"),
    ast.Dict: ("dicts are not supported in kernels", "pass values as kernel arguments"),
    ast.Set: ("sets are not supported in kernels", "pass values as kernel arguments"),
    ast.Starred: ("star-unpacking is not supported in kernels", "pass each value explicitly"),
    ast.NamedExpr: ("assignment expressions (:=) are not supported in kernels",
                    "assign in a separate statement"),
    ast.Await: ("await is not supported in kernels", "kernels are synchronous per thread"),
    ast.Yield: ("yield is not supported in kernels", "kernels cannot be generators"),
    ast.YieldFrom: ("yield is not supported in kernels", "kernels cannot be generators"),
    ast.Slice: ("slicing is not supported in kernels", "index element by element in a loop"),
}


class ExprMixin:
    # ------------------------------------------------------------------ dispatch
    def expr(self, node: ast.expr) -> Any:
        entry = UNSUPPORTED_EXPR.get(type(node))
        if entry is not None:
            self.err(node, *entry)
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            self.err(node, f"{type(node).__name__} expressions are not supported in kernels")
        return method(node)

    def scalar(self, node: ast.expr, what: str = "this expression") -> Val:
        """Lower `node` to a number (a 1-D ThreadIndex reads as its plain integer)."""
        v = self.expr(node)
        v = self.as_scalar(v)
        if v is None:
            got = self.describe(self.expr(node))
            self.err(node, f"{what} must be a number, but it is {got}",
                     "a 2-D/3-D ThreadIndex is a tuple: unpack it, e.g. `row, col = idx`"
                     if "ThreadIndex" in got else "")
        return v

    def as_scalar(self, v: Any) -> Val | None:
        if not isinstance(v, Val):
            return None
        t = v.type
        if isinstance(t, irt.ThreadIndexType) and t.ndim == 1:
            return Val(ir.TupleGet(v.expr, 0, irt.INDEX, v.expr.loc))
        if isinstance(t, irt.ScalarType):
            return v
        return None

    @staticmethod
    def describe(v: Any) -> str:
        if isinstance(v, Val):
            t = v.type
            if isinstance(t, irt.ThreadIndexType):
                return f"a {t.ndim}-D ThreadIndex"
            if isinstance(t, irt.ArrayType):
                return f"an array ({t!r})"
            if isinstance(t, irt.ChunkType):
                return "a chunk (iterate over it with `for k in chunk:`)"
            return f"a value of type {t!r}"
        if isinstance(v, TupleVal):
            return "a tuple"
        if isinstance(v, StrideVal):
            return "a lanes / threads range (iterate over it with `for c in ...:`)"
        if isinstance(v, SlotBinding):
            return "a get_mut() slot"
        if isinstance(v, PyObj):
            return f"the Python object {v.obj!r}"
        return repr(v)

    # ------------------------------------------------------------------ names and constants
    def visit_Name(self, node: ast.Name) -> Any:
        b = self.bindings.get(node.id)
        loc = self.loc(node)
        if isinstance(b, ir.Var):
            return Val(ir.ReadVar(b, loc))
        if isinstance(b, ir.ParamRef):
            self.require_present(b.param, node)
            return Val(ir.ParamRef(b.param, loc))
        if isinstance(b, ir.SharedAlloc):
            if self.unsafe_depth == 0:
                self.err(node, f"shared memory '{node.id}' used outside `with simt.unsafe():`",
                         "every use of shared memory goes inside `with simt.unsafe():`")
            return Val(ir.SharedArray(b, loc))
        if b is not None:
            return b
        value = self.scope.lookup(node.id)
        if value is MISSING:
            self.err(node, f"unknown name '{node.id}'",
                     "define it before use, pass it as a kernel argument, or import it at module "
                     "level")
        return self.fold(value, node, node.id)

    def optional_param(self, node: ast.expr) -> ir.Param | None:
        """The kernel parameter `node` names when it is an optional array (`simt.Array[f32] | None`)."""
        b = self.bindings.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(b, ir.ParamRef) and isinstance(b.param.type, irt.ArrayType) and b.param.type.optional:
            return b.param
        return None

    def require_present(self, param: ir.Param, node: ast.AST) -> None:
        """An optional array may be used only where a test proved it is not None (kernels; a device
        function receives it from such a place)."""
        t = param.type
        if self.is_kernel and isinstance(t, irt.ArrayType) and t.optional and param.name not in self.facts.present:
            self.err(node, f"'{param.name}' is an optional array (it may be None) and is used where it was "
                     "not tested", f"test it first: `if {param.name} is not None:` ... (or return early with "
                     f"`if {param.name} is None: return`)")

    def fold(self, value: Any, node: ast.AST, name: str) -> Any:
        """A Python object seen from a kernel: numbers become constants, the rest compile-time objects."""
        loc = self.loc(node)
        if isinstance(value, (bool, int, float)) and not isinstance(value, np.generic):
            return weak_const(value, loc)
        if isinstance(value, np.generic):
            t = ir_scalar_from_dtype(value.dtype)
            if t is None:
                self.err(node, f"'{name}' is a NumPy {value.dtype} scalar, which kernels do not support")
            return Val(tr.const_of(value.item(), t, loc))
        if is_typevar(value):
            t = self.typevars.get(value)
            if t is None:
                self.err(node, f"type variable '{name}' is not bound by any parameter",
                         "use it in a parameter annotation, e.g. simt.Array[T]")
            return PyObj(BY_IR[t])
        if isinstance(value, tuple):
            return TupleVal([self.fold(v, node, name) for v in value])
        if isinstance(value, Register):
            return Val(ir.Special(value.name, loc))
        if isinstance(value, np.ndarray):
            self.err(node, f"'{name}' is a NumPy array captured from Python",
                     "pass arrays as kernel arguments (only numbers and tuples are folded in)")
        if value is None or callable(value) or isinstance(value, ModuleType) or \
                type(value).__module__.startswith("dsl."):
            return PyObj(value)
        self.err(node, f"'{name}' refers to a {type(value).__name__} object, which cannot be used "
                 "inside a kernel", "only numbers, tuples of numbers, dsl types, simt intrinsics and "
                 "@simt.device functions can be used from kernels")

    def visit_Constant(self, node: ast.Constant) -> Any:
        v = node.value
        if v is None:
            return PyObj(None)
        if isinstance(v, (bool, int, float)):
            return weak_const(v, self.loc(node))
        if isinstance(v, str):
            self.err(node, "strings are not supported in kernels",
                     "kernels cannot handle text; report values through an output array")
        self.err(node, f"{type(v).__name__} constants are not supported in kernels")

    def visit_Tuple(self, node: ast.Tuple) -> TupleVal:
        return TupleVal([self.expr(e) for e in node.elts])

    # ------------------------------------------------------------------ operators
    def visit_BinOp(self, node: ast.BinOp) -> Val:
        op = BINOPS.get(type(node.op))
        if op is None:
            self.err(node, "the @ operator is not supported in kernels", "write the loops explicitly")
        a = self.scalar(node.left, "the left operand")
        b = self.scalar(node.right, "the right operand")
        return self.binop(op, a, b, node)

    def binop(self, op: str, a: Val, b: Val, node: ast.AST) -> Val:
        loc = self.loc(node)
        if a.weak and b.weak:
            return self.fold_binop(op, a, b, node)
        if op in ("lshift", "rshift", "and_", "or_", "xor"):
            return self.bitop(op, a, b, node)
        if op == "pow":
            return self.power(a, b, node)
        t = self.rule(node, tr.unify, a, b)
        if t.kind == "bool":
            t = irt.I64
        if op == "truediv" and t.is_int:
            t = tr.division_float_type(t)
        lhs, rhs = self.rule(node, tr.convert, a, t, loc), self.rule(node, tr.convert, b, t, loc)
        if op == "floordiv" and t.is_float:
            q = ir.BinOp("truediv", lhs, rhs, t, loc)
            return Val(ir.Math("floor", [q], t, loc))
        return Val(ir.BinOp(op, lhs, rhs, t, loc))

    def fold_binop(self, op: str, a: Val, b: Val, node: ast.AST) -> Val:
        x, y = a.const_value, b.const_value
        try:
            if op in ("floordiv", "mod") and isinstance(x, int) and isinstance(y, int):
                r = tr.c_floordiv(x, y) if op == "floordiv" else tr.c_mod(x, y)
            elif op == "floordiv":
                r = math.floor(x / y)
                r = float(r)
            elif op == "mod":
                r = math.fmod(x, y)
            else:
                r = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
                     "truediv": operator.truediv, "pow": operator.pow, "and_": operator.and_,
                     "or_": operator.or_, "xor": operator.xor, "lshift": operator.lshift,
                     "rshift": operator.rshift}[op](x, y)
        except ZeroDivisionError:
            self.err(node, "division by zero in a constant expression")
        except TypeError:
            self.err(node, f"operator {op} is not defined for these constants")
        return weak_const(r, self.loc(node))

    def bitop(self, op: str, a: Val, b: Val, node: ast.AST) -> Val:
        loc = self.loc(node)
        for v in (a, b):
            if v.scalar.is_float:  # type: ignore[union-attr]
                self.err(node, f"bitwise operator on a float ({v.scalar})",
                         "bitwise operators take integers or bools")
        if op in ("lshift", "rshift"):
            t = b.scalar if a.weak else a.scalar
            if t.kind == "bool":  # type: ignore[union-attr]
                t = irt.I64
            lhs = self.rule(node, tr.convert, a, t, loc)
            rhs = self.rule(node, tr.convert, b, t, loc) if b.weak else b.expr
            return Val(ir.BinOp(op, lhs, rhs, t, loc))
        t = self.rule(node, tr.unify, a, b)
        return Val(ir.BinOp(op, self.rule(node, tr.convert, a, t, loc),
                            self.rule(node, tr.convert, b, t, loc), t, loc))

    def power(self, a: Val, b: Val, node: ast.AST) -> Val:
        loc = self.loc(node)
        n = b.const_value if b.weak and isinstance(b.const_value, int) else None
        if n is not None and a.scalar.is_int:  # type: ignore[union-attr]
            if not 0 <= n <= 64:
                self.err(node, "integer ** needs a constant exponent between 0 and 64")
            result: ir.Expr = tr.const_of(1, a.scalar, loc)  # type: ignore[arg-type]
            for _ in range(n):
                result = ir.BinOp("mul", result, a.expr, a.scalar, loc)  # type: ignore[arg-type]
            return Val(result)
        if n is not None:
            t = a.scalar if not a.weak else irt.F32
            return Val(ir.BinOp("pow", self.rule(node, tr.convert, a, t, loc),
                                ir.Const(n, irt.I32, loc), t, loc))  # type: ignore[arg-type]
        t = self.rule(node, tr.unify, a, b)
        if t.is_int:
            self.err(node, "integer ** needs a constant non-negative exponent",
                     "convert the base to a float type, e.g. f32(x) ** y")
        return self.math_call("pow", [a, b], node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Val:
        loc = self.loc(node)
        if isinstance(node.op, ast.Not):
            return Val(ir.UnaryOp("not_", self.to_bool(node.operand), irt.BOOL, loc))
        v = self.scalar(node.operand, "the operand")
        if isinstance(node.op, ast.UAdd):
            return v
        if v.weak:
            x = v.const_value
            return weak_const(-x if isinstance(node.op, ast.USub) else ~x, loc)
        t = irt.compute_type(v.scalar)  # type: ignore[arg-type]
        if isinstance(node.op, ast.Invert):
            if not t.is_int:  # type: ignore[union-attr]
                self.err(node, f"~ needs an integer, got {t}", "use `not x` for bools")
            return Val(ir.UnaryOp("invert", v.expr, t, loc))  # type: ignore[arg-type]
        if t.kind == "bool":  # type: ignore[union-attr]
            t = irt.I64
        return Val(ir.UnaryOp("neg", tr.cast(v.expr, t, loc), t, loc))  # type: ignore[arg-type]

    def to_bool(self, node: ast.expr) -> ir.Expr:
        """A condition: bools as is, numbers compared with zero (Python truthiness)."""
        v = self.expr(node)
        if isinstance(v, SlotBinding):
            return ir.SlotCheck(v.expr, self.loc(node))
        v = self.as_scalar(v)
        if v is None:
            self.err(node, "a condition must be a bool or a number")
        return self.truth(v, self.loc(node))

    @staticmethod
    def truth(v: Val, loc: ir.Loc) -> ir.Expr:
        t = v.scalar
        if t.kind == "bool":  # type: ignore[union-attr]
            return v.expr
        if v.weak:
            return ir.Const(bool(v.const_value), irt.BOOL, loc)
        return ir.Compare("ne", tr.cast(v.expr, t, loc), tr.const_of(0, t, loc), loc)  # type: ignore

    def visit_BoolOp(self, node: ast.BoolOp) -> Val:
        op = "and" if isinstance(node.op, ast.And) else "or"
        result = self.to_bool(node.values[0])
        for v in node.values[1:]:
            result = ir.Logical(op, result, self.to_bool(v), self.loc(node))
        return Val(result)

    def visit_Compare(self, node: ast.Compare) -> Val:
        loc = self.loc(node)
        terms = [node.left, *node.comparators]
        result: ir.Expr | None = None
        for op, lhs, rhs in zip(node.ops, terms, terms[1:]):
            part = self.compare_one(op, lhs, rhs, node)
            result = part if result is None else ir.Logical("and", result, part, loc)
        return Val(result)  # type: ignore[arg-type]

    def compare_one(self, op: ast.cmpop, lhs: ast.expr, rhs: ast.expr, node: ast.AST) -> ir.Expr:
        loc = self.loc(node)
        if isinstance(op, (ast.Is, ast.IsNot)):
            opt = self.optional_param(lhs) or self.optional_param(rhs)
            other = rhs if self.optional_param(lhs) is not None else lhs
            if opt is not None and isinstance(other, ast.Constant) and other.value is None:
                # resolved per specialisation: None selects its own (ArrayType.absent), so no run-time test
                present = not opt.type.absent  # type: ignore[union-attr]
                return ir.Const(present == isinstance(op, ast.IsNot), irt.BOOL, loc)
            a, b = self.expr(lhs), self.expr(rhs)
            slot = a if isinstance(a, SlotBinding) else b if isinstance(b, SlotBinding) else None
            other = b if slot is a else a
            if slot is None or not (isinstance(other, PyObj) and other.obj is None):
                self.err(node, "`is` / `is not` only compare a get_mut() slot or an optional array with None",
                         "compare numbers with == and !=")
            check = ir.SlotCheck(slot.expr, loc)
            return check if isinstance(op, ast.IsNot) else ir.UnaryOp("not_", check, irt.BOOL, loc)
        if isinstance(op, (ast.In, ast.NotIn)):
            self.err(node, "`in` is not supported in kernels", "compare values explicitly")
        name = CMPOPS[type(op)]
        a, b = self.scalar(lhs, "the left operand"), self.scalar(rhs, "the right operand")
        if a.weak and b.weak:
            return ir.Const(bool(_PYCMP[name](a.const_value, b.const_value)), irt.BOOL, loc)
        t = self.rule(node, tr.unify, a, b)
        return ir.Compare(name, self.rule(node, tr.convert, a, t, loc),
                          self.rule(node, tr.convert, b, t, loc), loc)

    def visit_IfExp(self, node: ast.IfExp) -> Val:
        loc = self.loc(node)
        cond = self.to_bool(node.test)
        saved = self.facts
        try:
            self.facts = saved.copy()
            self.add_condition_facts(self.facts, node.test, positive=True, region=[])
            a = self.scalar(node.body)
            self.facts = saved.copy()
            self.add_condition_facts(self.facts, node.test, positive=False, region=[])
            b = self.scalar(node.orelse)
        finally:
            self.facts = saved
        if a.weak and b.weak and type(a.const_value) is type(b.const_value):
            t = a.scalar
        else:
            t = self.rule(node, tr.unify, a, b)
        return Val(ir.IfExp(cond, self.rule(node, tr.convert, a, t, loc),
                            self.rule(node, tr.convert, b, t, loc), t, loc))

    # ------------------------------------------------------------------ attributes and subscripts
    def visit_Attribute(self, node: ast.Attribute) -> Any:
        base = self.expr(node.value)
        loc = self.loc(node)
        if isinstance(base, PyObj):
            if not hasattr(base.obj, node.attr):
                self.err(node, f"{base.obj!r} has no attribute '{node.attr}'")
            return self.fold(getattr(base.obj, node.attr), node, node.attr)
        if isinstance(base, Val) and isinstance(base.type, irt.ArrayType):
            return self.array_attribute(base, node)
        if isinstance(base, Val) and isinstance(base.type, irt.ChunkType):
            if node.attr == "start":
                return Val(ir.ChunkStart(base.expr, loc))
            if node.attr == "n":
                return weak_const(base.type.n, loc)
        self.err(node, f"{self.describe(base)} has no attribute '{node.attr}'")

    def array_attribute(self, base: Val, node: ast.Attribute) -> Any:
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        loc = self.loc(node)
        if node.attr == "shape":
            return TupleVal([self.extent(base, k, loc) for k in range(t.ndim)])
        if node.attr == "ndim":
            return weak_const(t.ndim, loc)
        if node.attr == "dtype":
            return PyObj(BY_IR[t.dtype])
        if node.attr == "size":
            size = self.extent(base, 0, loc)
            for k in range(1, t.ndim):
                size = self.binop("mul", size, self.extent(base, k, loc), node)
            return size
        self.err(node, f"arrays have no attribute '{node.attr}' in kernels",
                 "available: shape, ndim, size, dtype, get_mut()")

    def extent(self, base: Val, axis: int, loc: ir.Loc) -> Val:
        t: irt.ArrayType = base.type  # type: ignore[assignment]
        if t.shape is not None and t.shape[axis] >= 0:
            return weak_const(t.shape[axis], loc)
        return Val(ir.ArrayLen(base.expr, axis, loc))

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        base = self.expr(node.value)
        if isinstance(node.slice, ast.Slice):
            self.err(node.slice, *UNSUPPORTED_EXPR[ast.Slice])
        if isinstance(base, TupleVal) or (isinstance(base, Val) and
                                           isinstance(base.type, irt.ThreadIndexType)):
            return self.tuple_item(base, node)
        if isinstance(base, Val) and isinstance(base.type, irt.ArrayType):
            return self.load(base, node.value, node.slice, node)
        self.err(node, f"cannot index {self.describe(base)}")

    def tuple_item(self, base: Any, node: ast.Subscript) -> Any:
        k = self.expr(node.slice)
        if not (isinstance(k, Val) and k.weak and isinstance(k.const_value, int)):
            self.err(node.slice, "a tuple index must be a constant integer")
        items = self.tuple_items(base, node)
        if not -len(items) <= k.const_value < len(items):
            self.err(node.slice, f"tuple index {k.const_value} out of range for {len(items)} items")
        return items[k.const_value]

    def tuple_items(self, base: Any, node: ast.AST) -> list[Any]:
        if isinstance(base, TupleVal):
            return base.items
        t = base.type
        return [Val(ir.TupleGet(base.expr, k, irt.INDEX, base.expr.loc)) for k in range(t.ndim)]
