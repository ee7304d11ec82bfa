"""Extent relations a kernel's `requires=` states (`len(a) == len(b)`, `u.shape == out.shape`,
`x.shape[0] <= y.shape[1]`): read by the frontend's range proofs and grid rule and by the back end,
which reads extents the relations make equal from one parameter. The launch contract checks the
relations before every launch, so what follows from them holds inside the kernel."""
from __future__ import annotations

import ast

Extent = tuple[str, int]   # (array name, axis)


class Relations:
    """Extent equalities / orderings from `requires=` (x <= y edges; == is two edges)."""

    def __init__(self, requires: tuple[str, ...], ndims: dict[str, int]) -> None:
        self.le: set[tuple[Extent, Extent]] = set()
        self.ndims = ndims
        for text in requires:
            try:
                tree = ast.parse(text, mode="eval").body
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                continue   # reported at the def (dsl/options.py)
            self._add(tree)

    def _extent_terms(self, node: ast.expr) -> list[Extent] | None:
        """`len(a)` -> [(a,0)]; `a.shape[k]` -> [(a,k)]; `a.shape` -> all axes; a bare scalar name
        `V` -> [(V, -1)] (a range bound: dsl/frontend/proofs.py scalar_param_bound)."""
        if isinstance(node, ast.Name) and node.id not in self.ndims:
            return [(node.id, -1)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
                and len(node.args) == 1 and isinstance(node.args[0], ast.Name):
            return [(node.args[0].id, 0)]
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and \
                node.value.attr == "shape" and isinstance(node.value.value, ast.Name) and \
                isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            return [(node.value.value.id, node.slice.value)]
        if isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(node.value, ast.Name):
            nd = self.ndims.get(node.value.id, 0)
            return [(node.value.id, k) for k in range(nd)]
        return None

    def _add(self, node: ast.expr) -> None:
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
            for v in node.values:
                self._add(v)
            return
        if not isinstance(node, ast.Compare):
            return
        terms = [node.left, *node.comparators]
        for op, lhs, rhs in zip(node.ops, terms, terms[1:]):
            a, b = self._extent_terms(lhs), self._extent_terms(rhs)
            if a is None or b is None or len(a) != len(b):
                continue
            for x, y in zip(a, b):
                if isinstance(op, (ast.Eq, ast.LtE, ast.Lt)):
                    self.le.add((x, y))
                if isinstance(op, (ast.Eq, ast.GtE, ast.Gt)):
                    self.le.add((y, x))

    def at_most(self, x: Extent, y: Extent) -> bool:
        """extent x <= extent y follows from the relations (reflexive, transitive)."""
        if x == y:
            return True
        seen, todo = {x}, [x]
        while todo:
            cur = todo.pop()
            for a, b in self.le:
                if a == cur and b not in seen:
                    if b == y:
                        return True
                    seen.add(b)
                    todo.append(b)
        return False
