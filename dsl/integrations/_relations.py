"""Output shapes from a kernel's `requires=` relations (`out.shape == x.shape`, `len(out) == len(a)`).

Why here and not in the validator: the validator CHECKS relations for given arrays; a generated op has
to ALLOCATE its outputs before there is anything to check. An equality whose one side names an output's
shape (or one extent of it) and whose other side only names inputs, scalars and outputs already
determined gives that shape. The launch still validates every relation with the one validator.

The relation language is the contract's (docs/architecture.md), which is valid Python syntax, so the
text is read with `ast`. Shapes are computed with ordinary Python arithmetic, so torch's symbolic sizes
(`SymInt`) under `torch.compile` work as well as ints.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

Env = Mapping[str, Any]          # name -> shape tuple (arrays) or value (scalars)
Evaluator = Callable[[Env], Any]


@dataclass
class ShapeRule:
    """How one output's shape follows from the inputs: a whole-shape evaluator, or one per axis."""
    whole: Evaluator | None = None
    axes: dict[int, Evaluator] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)     # relation texts used (for messages/docs)

    def complete(self, ndim: int | None) -> bool:
        if self.whole is not None:
            return True
        return ndim is not None and ndim > 0 and all(k in self.axes for k in range(ndim))

    def shape(self, env: Env, ndim: int | None) -> tuple:
        if self.whole is not None:
            return tuple(self.whole(env))
        return tuple(self.axes[k](env) for k in range(ndim or 0))


def _product(shape: Sequence[Any]) -> Any:
    n: Any = 1
    for s in shape:
        n = n * s
    return n


def _compile(node: ast.expr, arrays: set[str], scalars: set[str]) -> Evaluator | None:
    """An evaluator for a relation term over known arrays and scalars, or None when it names others."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        v = node.value
        return lambda env: v
    if isinstance(node, ast.Name):
        name = node.id
        return (lambda env: env[name]) if name in scalars else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in arrays:
        name = node.args[0].id
        return lambda env: env[name][0]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in arrays:
        name = node.value.id
        if node.attr == "shape":
            return lambda env: tuple(env[name])
        if node.attr == "size":
            return lambda env: _product(env[name])
        if node.attr == "ndim":
            return lambda env: len(env[name])
        return None
    axis = _shape_axis(node)
    if axis is not None:
        name, k = axis
        return (lambda env: env[name][k]) if name in arrays else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _compile(node.operand, arrays, scalars)
        return None if inner is None else (lambda env: -inner(env))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
        a, b = _compile(node.left, arrays, scalars), _compile(node.right, arrays, scalars)
        if a is None or b is None:
            return None
        op = node.op
        if isinstance(op, ast.Add):
            return lambda env: a(env) + b(env)
        if isinstance(op, ast.Sub):
            return lambda env: a(env) - b(env)
        if isinstance(op, ast.Mult):
            return lambda env: a(env) * b(env)
        if isinstance(op, ast.FloorDiv):
            return lambda env: a(env) // b(env)
        return lambda env: a(env) % b(env)
    if isinstance(node, ast.Tuple):
        parts = [_compile(e, arrays, scalars) for e in node.elts]
        if any(p is None for p in parts):
            return None
        return lambda env: tuple(p(env) for p in parts)  # type: ignore[misc]
    return None


def _shape_axis(node: ast.expr) -> tuple[str, int] | None:
    """`x.shape[k]` (k an int literal, possibly negative) → (x, k)."""
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
            and node.value.attr == "shape" and isinstance(node.value.value, ast.Name)):
        return None
    idx = node.slice
    neg = isinstance(idx, ast.UnaryOp) and isinstance(idx.op, ast.USub)
    if neg:
        idx = idx.operand  # type: ignore[union-attr]
    if not (isinstance(idx, ast.Constant) and isinstance(idx.value, int)):
        return None
    return node.value.value.id, -idx.value if neg else idx.value


def _target(node: ast.expr, outputs: Mapping[str, int | None]) -> tuple[str, int | None] | None:
    """An output term: (name, None) for `o.shape`, (name, axis) for `len(o)`, `o.shape[k]`, 1-D `o.size`."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in outputs:
        name = node.value.id
        if node.attr == "shape":
            return name, None
        if node.attr == "size" and outputs[name] == 1:
            return name, 0
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" \
            and len(node.args) == 1 and isinstance(node.args[0], ast.Name) and node.args[0].id in outputs:
        return node.args[0].id, 0
    axis = _shape_axis(node)
    if axis is not None and axis[0] in outputs:
        name, k = axis
        nd = outputs[name]
        if k < 0:
            if nd is None:
                return None
            k += nd
        if nd is not None and not 0 <= k < nd:
            return None
        return name, k
    return None


def _equalities(tree: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """Every `a == b` pair a relation asserts (through `and` and chained `a == b == c`)."""
    if isinstance(tree, ast.BoolOp) and isinstance(tree.op, ast.And):
        out: list[tuple[ast.expr, ast.expr]] = []
        for v in tree.values:
            out += _equalities(v)
        return out
    if isinstance(tree, ast.Compare) and all(isinstance(op, ast.Eq) for op in tree.ops):
        terms = [tree.left, *tree.comparators]
        return list(zip(terms, terms[1:]))
    return []


def derive_shapes(requires: Sequence[str], outputs: Mapping[str, int | None], arrays: Sequence[str],
                  scalars: Sequence[str]) -> tuple[dict[str, ShapeRule], list[str]]:
    """Shape rules the relations give for `outputs` (name -> declared ndim or None), and the order to
    evaluate them in (a rule may use outputs determined before it). Outputs absent from the result are
    not determined by the relations."""
    pairs: list[tuple[ast.expr, ast.expr, str]] = []
    for text in requires:
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError:
            continue   # the contract parser reports malformed relations; nothing to derive from them
        pairs += [(a, b, text) for a, b in _equalities(tree)]
    known = set(arrays)
    scalar_names = set(scalars)
    rules: dict[str, ShapeRule] = {}
    order: list[str] = []
    progress = True
    while progress:
        progress = False
        for a, b, text in pairs:
            for lhs, rhs in ((a, b), (b, a)):
                tgt = _target(lhs, outputs)
                if tgt is None or tgt[0] in order:
                    continue
                ev = _compile(rhs, known, scalar_names)
                if ev is None:
                    continue
                name, axis = tgt
                rule = rules.setdefault(name, ShapeRule())
                if axis is None and rule.whole is None:
                    rule.whole = ev
                elif axis is not None and axis not in rule.axes:
                    rule.axes[axis] = ev
                else:
                    continue
                rule.sources.append(text)
                if rule.complete(outputs[name]):
                    order.append(name)
                    known.add(name)
                    progress = True
    return {n: rules[n] for n in order}, order
