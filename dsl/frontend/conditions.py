"""Facts learned from conditions: `if i < len(a):`, `if slot is not None:`, `if i >= n: return`.

`add_condition_facts(facts, test, positive, region)` adds what holds where `test` is true (positive)
or false (not positive). A fact about a mutable local is only added when `region` (the statements
where it will be used) never assigns that local.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.frontend.proofs import Facts, index_key, strip_int_casts
from dsl.frontend.values import SlotBinding, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.source import assigned_names

_FLIP = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Eq: ast.Eq,
         ast.NotEq: ast.NotEq}
_NEG = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt}


class ConditionFacts:
    def add_condition_facts(self, facts: Facts, test: ast.expr, *, positive: bool,
                            region: list[ast.stmt]) -> None:
        """Add to `facts` what is known where `test` evaluates to `positive`."""
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self.add_condition_facts(facts, test.operand, positive=not positive, region=region)
            return
        if isinstance(test, ast.BoolOp):
            # all conjuncts hold when `and` is true; all disjuncts fail when `or` is false
            if isinstance(test.op, ast.And) == positive:
                for v in test.values:
                    self.add_condition_facts(facts, v, positive=positive, region=region)
            return
        if isinstance(test, ast.Name) and positive:
            slot = self.bindings.get(test.id)
            if isinstance(slot, SlotBinding):
                self.prove_slot(facts, slot)
            return
        if not isinstance(test, ast.Compare):
            return
        terms = [test.left, *test.comparators]
        if len(test.ops) > 1 and not positive:
            return          # not (a < b < c) says little
        for op, lhs, rhs in zip(test.ops, terms, terms[1:]):
            self.compare_fact(facts, op, lhs, rhs, positive, region)

    def compare_fact(self, facts: Facts, op: ast.cmpop, lhs: ast.expr, rhs: ast.expr,
                     positive: bool, region: list[ast.stmt]) -> None:
        if isinstance(op, (ast.Is, ast.IsNot)):
            opt = self.optional_param(lhs)
            if opt is not None and isinstance(rhs, ast.Constant) and rhs.value is None \
                    and isinstance(op, ast.IsNot) == positive:
                facts.present.add(opt.name)      # `x is not None` / not `x is None`: x may be used here
                return
            if opt is not None:
                return
            slot = self.pure_value(lhs)
            if isinstance(slot, SlotBinding) and isinstance(rhs, ast.Constant) and rhs.value is None \
                    and isinstance(op, ast.IsNot) == positive:
                self.prove_slot(facts, slot)
            return
        kind = type(op)
        if not positive:
            if kind not in _NEG:
                return
            kind = _NEG[kind]
        if kind in (ast.Gt, ast.GtE):
            kind, lhs, rhs = _FLIP[kind], rhs, lhs
        if kind not in (ast.Lt, ast.LtE):
            return
        # lhs < rhs  or  lhs <= rhs
        stored = assigned_names(region)
        small, big = self.pure_value(lhs), self.pure_value(rhs)
        if isinstance(small, Val) and small.weak and isinstance(small.const_value, (int, float)):
            key = self.fact_key(rhs, big, stored)
            if key is not None and isinstance(small.const_value, int):
                facts.add_lower(key, small.const_value + (0 if kind is ast.LtE else 1))
            elif key is not None and small.const_value >= (0 if kind is ast.LtE else -1):
                facts.nonneg.add(key)
            return
        key = self.fact_key(lhs, small, stored)
        if key is None:
            return
        if isinstance(big, Val) and big.weak and isinstance(big.const_value, int):
            facts.add_const(key, big.const_value + (1 if kind is ast.LtE else 0))
            return
        if kind is ast.Lt and isinstance(big, Val) and isinstance(big.expr, ir.ArrayLen):
            from dsl.frontend.access import array_name
            facts.add_extent(key, (array_name(big.expr.array), big.expr.axis))
            return
        minus = _len_minus_const(big.expr) if isinstance(big, Val) else None
        if minus is not None:
            from dsl.frontend.access import array_name
            length, d = minus        # key < len - d  (or <= len - d, i.e. < len - (d - 1))
            facts.add_extent_minus(key, (array_name(length.array), length.axis), d if kind is ast.Lt else d - 1)

    def pure_value(self, node: ast.expr) -> Any:
        """Lower `node` only when it has no side effects (names, attributes, len(), shapes)."""
        if isinstance(node, ast.Constant):
            return self.expr(node)
        if isinstance(node, (ast.Name, ast.Attribute)):
            return self.expr(node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "shape":
            return self.expr(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            return self.expr(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and \
                isinstance(node.right, ast.Constant) and self.pure_value(node.left) is not None:
            return self.expr(node)      # `len(u) - 1`, `r - 1`
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)) and \
                self.pure_value(node.left) is not None and self.pure_value(node.right) is not None:
            return self.expr(node)      # index arithmetic: `by + ty + j`
        return None

    def fact_key(self, node: ast.expr, v: Any, stored: set[str]) -> tuple | None:
        s = self.as_scalar(v) if isinstance(v, Val) else None
        if s is None or not isinstance(s.scalar, irt.ScalarType) or not s.scalar.is_int:
            return None
        key = index_key(s.expr)
        if key is None:
            return None
        if key[0] == "var" and isinstance(node, ast.Name) and node.id in stored:
            return None
        if key[0] == "var" and not isinstance(node, ast.Name):
            return None
        if key[0] == "bin" and any(isinstance(n, ast.Name) and n.id in stored for n in ast.walk(node)):
            return None         # a term changes inside the region: the fact would go stale
        return key


def _len_minus_const(e: ir.Expr) -> tuple[ir.ArrayLen, int] | None:
    """`len(a) - d` / `a.shape[k] - d` (d an integer constant) -> (the length, d)."""
    e = strip_int_casts(e)
    if isinstance(e, ir.BinOp) and e.op in ("sub", "add"):
        lhs, rhs = strip_int_casts(e.lhs), strip_int_casts(e.rhs)
        if isinstance(lhs, ir.ArrayLen) and isinstance(rhs, ir.Const) and isinstance(rhs.value, int) \
                and not isinstance(rhs.value, bool):
            return lhs, (rhs.value if e.op == "sub" else -rhs.value)
    return None
