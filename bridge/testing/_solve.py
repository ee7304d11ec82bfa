"""Sizes that satisfy a contract's `requires` relations, found by search.

Why a search and not algebra: the relation language (docs/architecture.md) is small but allows
products, floor division, modulo and inequalities, so no closed form covers it. The relations come
parsed from the ONE native parser (`_native.Contract.relation_trees`); this module only proposes
candidate sizes (equalities between terms are unified, `x == expr` defines x, literals fix terms,
`x % c == r` and `x < c`-style bounds repair a free term) and evaluates the relations in Python to
reject candidates early. The caller validates every candidate it keeps with the real validator, so a
launch it hands out is accepted by construction.

Variables: ("dim", arg, axis) for one extent of an array argument, ("scalar", arg) for an integer or
bool scalar. A solution maps every variable to an int.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from bridge import dtypes

Var = tuple

# value range of each integer (and bool) kernel dtype of the dtype table
_INT_RANGE = {r.name: (0, 1) if r.kind == "bool" else
              (0, 2**r.bits - 1) if r.kind == "uint" else (-2**(r.bits - 1), 2**(r.bits - 1) - 1)
              for r in dtypes.kernel_rows() if r.kind in ("bool", "int", "uint")}
_CMP = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
_FLIP = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class _Undefined(Exception):
    """An expression has no value for this candidate (division by zero, axis out of range)."""


# ---------------------------------------------------------------------------------------- expressions
# ("const", v) | ("var", var) | ("tuple", [e...]) | ("prod", [e...]) | (op, a, b) | ("neg", a)

def _vars_of(e: tuple, out: set) -> set:
    kind = e[0]
    if kind == "var":
        out.add(e[1])
    elif kind in ("tuple", "prod"):
        for x in e[1]:
            _vars_of(x, out)
    elif kind == "neg":
        _vars_of(e[1], out)
    elif kind != "const":
        _vars_of(e[1], out)
        _vars_of(e[2], out)
    return out


def evaluate(e: tuple, values: Mapping[Var, int]) -> Any:
    """Value of an expression (int or tuple), with Python's floor division and modulo (as the
    validator: docs/architecture.md)."""
    kind = e[0]
    if kind == "const":
        return e[1]
    if kind == "var":
        return values[e[1]]
    if kind == "tuple":
        return tuple(evaluate(x, values) for x in e[1])
    if kind == "prod":
        return math.prod(evaluate(x, values) for x in e[1])
    if kind == "neg":
        return -evaluate(e[1], values)
    a, b = evaluate(e[1], values), evaluate(e[2], values)
    if kind == "add":
        return a + b
    if kind == "sub":
        return a - b
    if kind == "mul":
        return a * b
    if b == 0:
        raise _Undefined("division by zero")
    return a // b if kind == "floordiv" else a % b


@dataclass
class Atom:
    """One binary comparison of a relation (chains and `and` are split), with the relation's text."""
    left: tuple
    op: str
    right: tuple
    text: str

    def holds(self, values: Mapping[Var, int]) -> bool:
        try:
            a, b = evaluate(self.left, values), evaluate(self.right, values)
        except _Undefined:
            return False
        if isinstance(a, tuple) != isinstance(b, tuple):
            return False
        return _CMP[self.op](a, b)


# ------------------------------------------------------------------------------------------ problem
@dataclass
class Problem:
    """A contract's size variables and relation atoms, for one choice of ndim per array."""
    args: list[dict]
    ndims: dict[int, int]
    atoms: list[Atom]
    mentioned: set = field(default_factory=set)

    def array_vars(self, i: int) -> list[Var]:
        return [("dim", i, k) for k in range(self.ndims[i])]

    def all_vars(self) -> list[Var]:
        out: list[Var] = []
        for i, a in enumerate(self.args):
            if a["kind"] == "array":
                out.extend(self.array_vars(i))
            elif a["dtype"] in _INT_RANGE:
                out.append(("scalar", i))
        return out

    def domain(self, v: Var) -> tuple[int, int]:
        if v[0] == "dim":
            return 0, 2**62
        return _INT_RANGE[self.args[v[1]]["dtype"]]


def _lower(node: dict, names: dict[str, int], ndims: dict[int, int]) -> tuple:
    """A relation_trees node as an expression over size variables."""
    op = node["op"]
    if op == "lit":
        return ("const", int(node["value"]))
    if op in ("len", "shape_k", "shape", "size", "ndim", "scalar"):
        i = names[node["arg"]]
        if op == "scalar":
            return ("var", ("scalar", i))
        nd = ndims[i]
        if op == "ndim":
            return ("const", nd)
        dims = [("var", ("dim", i, k)) for k in range(nd)]
        if op == "shape":
            return ("tuple", dims)
        if op == "size":
            return ("prod", dims)
        axis = 0 if op == "len" else int(node["axis"])
        if not -nd <= axis < nd:
            return ("floordiv", ("const", 0), ("const", 0))   # undefined: no candidate satisfies it
        return dims[axis % nd]
    kids = [_lower(k, names, ndims) for k in node.get("operands", ())]
    if op == "tuple":
        return ("tuple", kids)
    if op == "neg":
        return ("neg", kids[0])
    return (op, kids[0], kids[1])


def _atoms(node: dict, names: dict[str, int], ndims: dict[int, int], text: str) -> Iterator[Atom]:
    if node["op"] == "and":
        for k in node["operands"]:
            yield from _atoms(k, names, ndims, text)
        return
    kids = [_lower(k, names, ndims) for k in node["operands"]]
    for k, op in enumerate(node["ops"]):
        a, b = kids[k], kids[k + 1]
        if op == "==" and a[0] == "tuple" and b[0] == "tuple" and len(a[1]) == len(b[1]):
            for x, y in zip(a[1], b[1]):       # elementwise, so each pair can be unified
                yield Atom(x, "==", y, text)
        else:
            yield Atom(a, op, b, text)


def choose_ndims(contract: Any, fixed_ndims: Mapping[int, int]) -> dict[int, int]:
    """ndim per array argument: declared, given, `x.ndim == k` in a relation, or 1 + the highest axis
    a relation names (1 when none)."""
    args = contract.args
    names = {a["name"]: i for i, a in enumerate(args)}
    want: dict[int, int] = {}

    def scan(node: dict) -> None:
        op = node["op"]
        if op == "shape_k" and node["axis"] >= 0:
            i = names[node["arg"]]
            want[i] = max(want.get(i, 1), int(node["axis"]) + 1)
        if op == "cmp" and len(node["operands"]) == 2 and node["ops"] == ["=="]:
            a, b = node["operands"]
            for x, y in ((a, b), (b, a)):
                if x["op"] == "ndim" and y["op"] == "lit":
                    want[names[x["arg"]]] = -int(y["value"])     # negative: stated exactly
        for k in node.get("operands", ()):
            scan(k)

    for tree in contract.relation_trees:
        scan(tree)
    out = {}
    for i, a in enumerate(args):
        if a["kind"] != "array":
            continue
        nd = a["ndim"]
        if nd < 0:
            nd = fixed_ndims.get(i, abs(want.get(i, 1)))
        out[i] = nd
    return out


def _names_launch(node: dict) -> bool:
    return node["op"] in ("grid", "block") or any(_names_launch(k) for k in node.get("operands", ()))


def problem(contract: Any, ndims: dict[int, int]) -> Problem:
    args = list(contract.args)
    names = {a["name"]: i for i, a in enumerate(args)}
    atoms: list[Atom] = []
    for text, tree in zip(contract.requires, contract.relation_trees):
        if not _names_launch(tree):      # relations of the launch grid/block (grid.x ...): no sizes to solve
            atoms.extend(_atoms(tree, names, ndims, text))
    p = Problem(args, ndims, atoms)
    for a in atoms:
        _vars_of(a.left, p.mentioned)
        _vars_of(a.right, p.mentioned)
    return p


# ----------------------------------------------------------------------------------------- solving
class _Classes:
    """Union-find over variables (terms a relation says are equal)."""

    def __init__(self, variables: list[Var]) -> None:
        self.parent = {v: v for v in variables}

    def find(self, v: Var) -> Var:
        while self.parent[v] != v:
            self.parent[v] = self.parent[self.parent[v]]
            v = self.parent[v]
        return v

    def union(self, a: Var, b: Var) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)   # the root is the first variable in argument order


@dataclass
class Plan:
    """How each class of variables gets its value: fixed, defined by an expression, or free."""
    classes: _Classes
    fixed: dict[Var, int]
    defined: dict[Var, tuple]          # class root -> expression (over other classes' variables)
    order: list[Var]                   # defined roots in evaluation order
    free: list[Var]                    # free roots, in argument order
    conflicts: list[str]               # relations two literals contradict


def plan(p: Problem, fixed: Mapping[Var, int]) -> Plan:
    variables = p.all_vars()
    cls = _Classes(variables)
    for a in p.atoms:
        if a.op == "==" and a.left[0] == "var" and a.right[0] == "var":
            cls.union(a.left[1], a.right[1])
    fixed_roots: dict[Var, int] = {}
    conflicts: list[str] = []

    def fix(v: Var, value: int, why: str) -> None:
        r = cls.find(v)
        if r in fixed_roots and fixed_roots[r] != value:
            conflicts.append(f"{why} (needs {value}, but {fixed_roots[r]} is required too)")
        fixed_roots.setdefault(r, value)

    for v, value in fixed.items():
        fix(v, value, "a given size")
    defs: dict[Var, list[tuple]] = {}
    for a in p.atoms:
        if a.op != "==":
            continue
        for x, y in ((a.left, a.right), (a.right, a.left)):
            if x[0] != "var":
                continue
            if y[0] == "const":
                fix(x[1], y[1], f"'{a.text}'")
            elif y[0] != "var" and x[1] not in _vars_of(y, set()):
                defs.setdefault(cls.find(x[1]), []).append(y)
    roots = sorted({cls.find(v) for v in variables})
    defined: dict[Var, tuple] = {}
    order: list[Var] = []
    pending = [r for r in roots if r not in fixed_roots and r in defs]
    known = set(fixed_roots) | {r for r in roots if r not in fixed_roots and r not in defs}
    # a definition is usable once every class it reads is known; classes left in a cycle become free
    progress = True
    while pending and progress:
        progress = False
        for r in list(pending):
            for e in defs[r]:
                if all(cls.find(v) in known and cls.find(v) != r for v in _vars_of(e, set())):
                    defined[r] = e
                    order.append(r)
                    known.add(r)
                    pending.remove(r)
                    progress = True
                    break
    free = [r for r in roots if r not in fixed_roots and r not in defined]
    return Plan(cls, fixed_roots, defined, order, free, conflicts)


def _odd(v: int) -> int:
    """Sizes that are not multiples of any block: odd, and 1 stays 1."""
    return v if v <= 1 or v % 2 else v + 1


def _bounds(p: Problem, pl: Plan, root: Var,
            known: Mapping[Var, int] | None = None) -> tuple[int, int, list[tuple[int, int]]]:
    """(lo, hi, congruences) a free class must satisfy from atoms `term op const` / `term % c == r`;
    a class already valued in `known` (root -> value) counts as a constant (`V <= logits.shape[1]`)."""
    lo, hi = 0, 2**62
    for v, r in pl.classes.parent.items():
        if pl.classes.find(v) == root:
            dlo, dhi = p.domain(v)
            lo, hi = max(lo, dlo), min(hi, dhi)
    congr: list[tuple[int, int]] = []
    for a in p.atoms:
        for x, op, y in ((a.left, a.op, a.right), (a.right, _FLIP[a.op], a.left)):
            if y[0] == "var" and known and pl.classes.find(y[1]) in known:
                y = ("const", known[pl.classes.find(y[1])])
            if y[0] != "const":
                continue
            if x[0] == "var" and pl.classes.find(x[1]) == root:
                c = y[1]
                if op == ">":
                    lo = max(lo, c + 1)
                elif op == ">=":
                    lo = max(lo, c)
                elif op == "<":
                    hi = min(hi, c - 1)
                elif op == "<=":
                    hi = min(hi, c)
            elif (op == "==" and x[0] == "mod" and x[1][0] == "var" and x[2][0] == "const"
                  and pl.classes.find(x[1][1]) == root and x[2][1] > 0):
                congr.append((x[2][1], y[1] % x[2][1]))
    return lo, hi, congr


def _repair(value: int, lo: int, hi: int, congr: list[tuple[int, int]]) -> int:
    for m, r in congr:
        value += (r - value) % m
    if value < lo:
        value = lo
        for m, r in congr:
            value += (r - value) % m
    if value > hi:
        value = hi
        for m, r in congr:
            value -= (value - r) % m
    return value


@dataclass
class Draw:
    """How free classes are valued in one attempt."""
    size: int
    edge: str | None                   # None, "one" or "empty"
    rng: np.random.Generator
    shared: bool = True                # classes of the same shape position share a base value
    empty_only: Var | None = None      # edge "empty": only this class is 0 (None: all)


def _nominal(size: int, nd: int) -> int:
    return max(1, round(size ** (1.0 / max(nd, 1))))


def _jitter(rng: np.random.Generator, nominal: int, spread: float) -> int:
    return _odd(max(1, int(round(nominal * rng.uniform(1 - spread, 1 + spread)))))


def free_values(p: Problem, pl: Plan, d: Draw) -> dict[Var, int]:
    """Values of the free classes for one attempt."""
    out: dict[Var, int] = {}
    base: dict[tuple[int, int], int] = {}
    used: set[tuple[int, int]] = set()
    for root in pl.free:
        members = sorted(v for v in pl.classes.parent if pl.classes.find(v) == root)
        first = members[0]
        nd = p.ndims[first[1]] if first[0] == "dim" else 1
        key = (nd, first[2] if first[0] == "dim" else 0)
        is_size = any(v[0] == "dim" or v in p.mentioned for v in members)
        # a scalar is bounded by the extents drawn before it (`V <= logits.shape[1]`); an extent only by
        # fixed values, so relations between extents keep being searched, not pushed to their boundary
        scalar = not any(v[0] == "dim" for v in members)
        lo, hi, congr = _bounds(p, pl, root, {**pl.fixed, **out} if scalar else pl.fixed)
        if not is_size:
            value = int(d.rng.integers(1, 17))          # an integer scalar no relation mentions
        elif d.edge == "one":
            value = 1
        elif d.edge == "empty":
            value = 0 if d.empty_only in (None, root) else 1
        else:
            spread = 0.1 if nd == 1 else 0.4
            if key not in base:
                v = _jitter(d.rng, _nominal(d.size, nd), spread)
                while nd > 1 and v in [b for (n, _), b in base.items() if n == nd] and v > 1:
                    v += 2                                # distinct extents per axis: catches transposes
                base[key] = v
            mentioned = any(v in p.mentioned for v in members)
            if d.shared and (not mentioned or key not in used):
                value = base[key]
            else:
                value = _jitter(d.rng, _nominal(d.size, nd), 0.5)
            if mentioned:
                used.add(key)
        out[root] = _repair(value, lo, hi, congr)
    return out


def assign(p: Problem, pl: Plan, d: Draw) -> dict[Var, int] | None:
    """Every variable's value for one attempt, or None when a definition has no value."""
    roots: dict[Var, int] = dict(pl.fixed)
    roots.update(free_values(p, pl, d))
    values = {v: roots[pl.classes.find(v)] for v in pl.classes.parent if pl.classes.find(v) in roots}
    for r in pl.order:
        try:
            value = evaluate(pl.defined[r], values)
        except (_Undefined, KeyError):
            return None
        if not isinstance(value, int):
            return None
        for v in pl.classes.parent:
            if pl.classes.find(v) == r:
                values[v] = value
    return values


def failing(p: Problem, values: Mapping[Var, int]) -> list[str]:
    """Texts of the relations these values break (Python's reading; the validator has the last word)."""
    out = []
    for a in p.atoms:
        if not a.holds(values):
            if a.text not in out:
                out.append(a.text)
    for v, value in values.items():
        lo, hi = p.domain(v)
        if not lo <= value <= hi:
            out.append(f"{_var_text(p, v)} = {value} is outside its dtype's range [{lo}, {hi}]")
    return out


def _var_text(p: Problem, v: Var) -> str:
    name = p.args[v[1]]["name"]
    return f"{name}.shape[{v[2]}]" if v[0] == "dim" else name
