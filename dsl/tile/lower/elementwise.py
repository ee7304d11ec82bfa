"""Elementwise tile expressions: arithmetic (half types computed in f32, Python's floor division and
modulo for floats and signed integers), comparisons, math functions, selects and casts. An operation
over values of one layout is one statement per element; over lazy values (index arithmetic, masks)
it stays lazy and is made where the consumer needs it."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, ScalarType
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, flat_of


class ElementwiseLowering:
    """The Lowerer's elementwise expressions (a mixin of dsl/tile/lower/kernel.py's Lowerer)."""

    def _elementwise(self, e: T.TExpr, operands: list[T.TExpr], make) -> LV:
        vals = self.unify(*[self.expr(o) for o in operands])
        if any(v.layout == "L" for v in vals):
            return self._lazy_elementwise(e, vals, make)
        n = len(vals[0].elems)
        out = [self.tmp(make(*[v.elems[i] for v in vals])) for i in range(n)]
        return LV(vals[0].layout, e.type.shape, e.type.dtype, out)

    def _lazy_elementwise(self, e: T.TExpr, vals: list[LV], make) -> LV:
        """Elementwise over lazy values and scalars: made where the consumer needs it, in its layout (a
        causal mask's row and column indices, or `lse * c` broadcast over attention's accumulators,
        land directly in the accumulator layout, with no trip through shared memory). Over loads it is
        not pure (made once: a variable holds it), and each load is made by its own `by_layout` (a
        "D" consumer keeps the vector accesses of dsl/tile/lower/runs.py)."""
        snaps: dict[int, N.Expr] = {}           # one snapshot an expression (a broadcast repeats it)

        def snap(x: N.Expr) -> N.Expr:
            if id(x) not in snaps:
                snaps[id(x)] = self.snapshot(x)
            return snaps[id(x)]
        vals = [v if v.layout == "L" else LV("U", v.shape, v.dtype, [snap(x) for x in v.elems]) for v in vals]

        def make_at(cl):
            cols = [v.make(cl) if v.layout == "L" else self.gather_elems(v, [flat_of(c, v.shape) for c in cl])  # type: ignore[misc]
                    for v in vals]
            return [self.tmp(make(*xs)) for xs in zip(*cols)]
        pure = all(v.pure for v in vals if v.layout == "L")
        if pure:
            return LV("L", e.type.shape, e.type.dtype, [], make=make_at, pure=True)

        def by_layout(lay):
            cols = [self.materialize(v, lay).elems if v.layout == "L" else
                    self.gather_elems(v, [flat_of(c, v.shape) for c in self.coords_of(lay, v.shape)]) for v in vals]
            return [self.tmp(make(*xs)) for xs in zip(*cols)]
        return LV("L", e.type.shape, e.type.dtype, [], make=make_at, by_layout=by_layout)

    def x_BinOp(self, e: T.BinOp) -> LV:
        dt = e.type.dtype
        return self._elementwise(e, [e.lhs, e.rhs], lambda a, b: self.binop(e.op, a, b, dt))

    def binop(self, op: str, a: N.Expr, b: N.Expr, dt: ScalarType) -> N.Expr:
        if dt.is_half:
            r = self.binop(op, N.Cast(a, F32), N.Cast(b, F32), F32)
            return N.Cast(r, dt)
        if op in ("floordiv", "mod") and dt.is_float:
            if op == "floordiv":
                return N.Math("floor", [N.BinOp("truediv", a, b, dt)], dt)
            a, b = self.tmp(a), self.tmp(b)
            r = self.tmp(N.BinOp("mod", a, b, dt))
            fix = N.Logical("and", N.Compare("ne", r, N.Const(0.0, dt)),
                            N.Compare("ne", N.Compare("lt", r, N.Const(0.0, dt)),
                                      N.Compare("lt", b, N.Const(0.0, dt))))
            return N.IfExp(fix, N.BinOp("add", r, b, dt), r, dt)
        if op in ("floordiv", "mod") and dt.is_signed:
            a, b = self.tmp(a), self.tmp(b)
            q = self.tmp(N.BinOp("floordiv", a, b, dt))
            r = self.tmp(N.BinOp("mod", a, b, dt))
            zero = N.Const(0, dt)
            fix = N.Logical("and", N.Compare("ne", r, zero),
                            N.Compare("ne", N.Compare("lt", r, zero), N.Compare("lt", b, zero)))
            if op == "floordiv":
                return N.IfExp(fix, N.BinOp("sub", q, N.Const(1, dt), dt), q, dt)
            return N.IfExp(fix, N.BinOp("add", r, b, dt), r, dt)
        if dt == BOOL:
            if op in ("and_", "or_"):
                return N.Logical("and" if op == "and_" else "or", a, b)
            return N.Compare("ne", a, b)
        return N.BinOp(op, a, b, dt)

    def x_UnaryOp(self, e: T.UnaryOp) -> LV:
        dt = e.type.dtype

        def make(a):
            if dt.is_half and e.op in ("neg", "abs"):
                return N.Cast(N.UnaryOp(e.op, N.Cast(a, F32), F32), dt)
            return N.UnaryOp(e.op, a, dt)
        return self._elementwise(e, [e.operand], make)

    def x_Compare(self, e: T.Compare) -> LV:
        return self._elementwise(e, [e.lhs, e.rhs], lambda a, b: N.Compare(e.op, a, b))

    def x_Math(self, e: T.Math) -> LV:
        dt = e.type.dtype
        src = e.args[0].type.dtype

        def make(*args):
            if src.is_half:
                r = N.Math(e.fn, [N.Cast(a, F32) for a in args], BOOL if dt == BOOL else F32)
                return r if dt == BOOL else N.Cast(r, dt)
            return N.Math(e.fn, list(args), dt)
        return self._elementwise(e, e.args, make)

    def x_Where(self, e: T.Where) -> LV:
        dt = e.type.dtype
        return self._elementwise(e, [e.cond, e.then, e.else_], lambda c, a, b: N.IfExp(c, a, b, dt))

    def x_Cast(self, e: T.Cast) -> LV:
        dt = e.type.dtype
        return self._elementwise(e, [e.operand], lambda a: N.Cast(a, dt))
