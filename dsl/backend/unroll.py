"""Loops with an `unroll=N` hint (`ForRange.unroll`), mixed into ModuleBuilder.

Why here and not `llvm.loop.unroll.count`: with that metadata LLVM does unroll the crossentropy loop
(`c < V; c += 1024`), but each copy's load stays behind the branches of the copy before (a `v > m`
test with an exp on each side), so in the PTX the loads still wait one at a time (nvcc's PTX looks the
same; its ptxas hoists them, which ours need not). So the loop is emitted unrolled here:

- the trip count T is computed once, as Python's range does (no wrap-around at the end of the type);
- a main loop runs while at least N iterations are left: N copies of the body at i, i + step, ...,
  i + (N-1) step. The loads of read-only arrays that every copy makes (`hoistable_loads`) are issued for
  all N copies at the top, before the first copy's body: N loads in flight before the first use;
- a remainder loop runs the last T mod N iterations one at a time.
Both loops carry `llvm.loop.unroll.disable` (chunks.py's loop id), so LLVM keeps this shape.
`continue` in a copy goes to the next copy, `break` leaves the loop.
"""
from __future__ import annotations

import contextlib

import llvmlite.ir as ir

from dsl.backend import lltypes as T
from dsl.ir import nodes as N
from dsl.ir.invariance import changed_vars, child_exprs, invariant
from dsl.ir.types import ScalarType
from dsl.ir.verify import walk


def hoistable_loads(s: N.ForRange) -> list[N.Load]:
    """The loads of `s`'s body that every iteration makes, at indices that depend only on the loop
    variable and values the body does not change, so they may be issued before the body: loads in the
    top-level statements, not under a branch (an `if`'s side, a conditional expression's arm, the
    right side of and/or, an unproven guarded write), proven in range (check "none"), in a body with
    no break / continue / return. The caller also needs the array read-only (ArrayVal.invariant)."""
    nodes = [n for st in s.body for n in walk(st)]
    if any(isinstance(n, (N.Break, N.Continue, N.Return)) for n in nodes):
        return []
    changed = changed_vars(s.body)
    out: list[N.Load] = []
    for e in _unconditional_exprs(s.body):
        out += [ld for ld in _loads_in(e) if ld.check == "none" and isinstance(ld.array, N.ParamRef)
                and all(invariant(i, changed) for i in ld.indices)]
    return out


def _unconditional_exprs(stmts: list[N.Stmt]) -> list[N.Expr]:
    out: list[N.Expr] = []
    for st in stmts:
        if isinstance(st, (N.Assign, N.ExprStmt)):
            out.append(st.value)
        elif isinstance(st, N.Store):
            out += st.indices
            if st.mode != "guarded" or st.proven:
                out.append(st.value)
        elif isinstance(st, N.If):
            out.append(st.cond)
        elif isinstance(st, N.GuardedRegion) and st.proven:
            out += _unconditional_exprs(st.body)
    return out


def _loads_in(e: N.Expr) -> list[N.Load]:
    """The loads evaluated whenever `e` is (not those of a lazily evaluated operand)."""
    if isinstance(e, N.Load):
        return [e]
    if isinstance(e, N.Atomic):
        return []
    if isinstance(e, N.IfExp):
        return _loads_in(e.cond)
    if isinstance(e, N.Logical):
        return _loads_in(e.lhs)
    out: list[N.Load] = []
    for c in child_exprs(e):
        out += _loads_in(c)
    return out


class UnrollMixin:
    def visit_unrolled_for(self, s: N.ForRange) -> None:
        b = self.st.b
        n = s.unroll
        start, stop, step = self.expr(s.start), self.expr(s.stop), self.expr(s.step)
        ty = start.type
        counter = self.st.alloca_b.alloca(ty, name=f"{s.var.name}.iter")
        left = self.st.alloca_b.alloca(ty, name=f"{s.var.name}.left")
        b.store(start, counter)
        b.store(self._trip_count(s, start, stop, step), left)
        main_head, main_body, rest_head, rest_body, rest_latch, end = (self.new_block(f"unroll.{x}") for x in (
            "head", "body", "rest.head", "rest.body", "rest.latch", "end"))
        b.branch(main_head)
        b.position_at_end(main_head)
        r = b.load(left, typ=ty)
        b.cbranch(b.icmp_unsigned(">=", r, ir.Constant(ty, n)), main_body, rest_head)
        b.position_at_end(main_body)
        i = b.load(counter, typ=ty)
        at = [i] + [b.add(i, b.mul(step, ir.Constant(ty, j))) for j in range(1, n)]
        pre = self._preload(s, at)
        for j in range(n):
            nxt = self.new_block(f"unroll.copy{j + 1}")
            self.assign(s.var, at[j])
            with self._preloaded(pre[j]):
                self._loop_body(s.body, nxt, end)
            b.position_at_end(nxt)
        b.store(b.add(i, b.mul(step, ir.Constant(ty, n))), counter)
        b.store(b.sub(b.load(left, typ=ty), ir.Constant(ty, n)), left)
        b.branch(main_head).set_metadata("llvm.loop", self._no_unroll_loop_id())
        b.position_at_end(rest_head)
        b.cbranch(b.icmp_unsigned("!=", b.load(left, typ=ty), ir.Constant(ty, 0)), rest_body, end)
        b.position_at_end(rest_body)
        self.assign(s.var, b.load(counter, typ=ty))
        self._loop_body(s.body, rest_latch, end)
        b.position_at_end(rest_latch)
        b.store(b.add(b.load(counter, typ=ty), step), counter)
        b.store(b.sub(b.load(left, typ=ty), ir.Constant(ty, 1)), left)
        b.branch(rest_head).set_metadata("llvm.loop", self._no_unroll_loop_id())
        b.position_at_end(end)

    def _trip_count(self, s: N.ForRange, start: ir.Value, stop: ir.Value, step: ir.Value) -> ir.Value:
        """How many times range(start, stop, step) runs (0 for step 0), as an unsigned value of the
        loop's type: the distance to stop, less one, over |step|, plus one; exact for every value."""
        b = self.st.b
        ty = start.type
        zero, one = ir.Constant(ty, 0), ir.Constant(ty, 1)
        signed = isinstance(s.var.type, ScalarType) and s.var.type.is_signed
        if not signed:
            up = b.and_(b.icmp_unsigned("!=", step, zero), b.icmp_unsigned("<", start, stop))
            down, mag = ir.Constant(T.I1, 0), step
        elif isinstance(s.step, N.Const):
            v = int(s.step.value)
            up = b.icmp_signed("<", start, stop) if v > 0 else ir.Constant(T.I1, 0)
            down = b.icmp_signed(">", start, stop) if v < 0 else ir.Constant(T.I1, 0)
            mag = ir.Constant(ty, abs(v) if v else 1)
        else:
            up = b.and_(b.icmp_signed(">", step, zero), b.icmp_signed("<", start, stop))
            down = b.and_(b.icmp_signed("<", step, zero), b.icmp_signed(">", start, stop))
            mag = b.select(b.icmp_signed("<", step, zero), b.sub(zero, step), step)
        mag = b.select(b.icmp_unsigned("==", mag, zero), one, mag)       # never a division by zero
        dist = b.select(down, b.sub(start, stop), b.sub(stop, start))
        count = b.add(b.udiv(b.sub(dist, one), mag), one)
        return b.select(b.or_(up, down), count, zero)

    def _preload(self, s: N.ForRange, at: list[ir.Value]) -> list[dict[int, ir.Value]]:
        """Per copy j: the hoistable loads of read-only arrays, issued here with the loop variable at
        at[j], keyed by the Load node (visit_Load returns them when the copy's body reaches it)."""
        loads = [ld for ld in hoistable_loads(s) if self.expr(ld.array).invariant]
        out: list[dict[int, ir.Value]] = []
        for j, value in enumerate(at):
            self.assign(s.var, value)
            got: dict[int, ir.Value] = {}
            for ld in loads:
                if id(ld) not in got:
                    got[id(ld)] = self.visit_Load(ld)
            out.append(got)
        return out

    @contextlib.contextmanager
    def _preloaded(self, values: dict[int, ir.Value]):
        saved = self.st.preloaded
        self.st.preloaded = {**saved, **values}
        try:
            yield
        finally:
            self.st.preloaded = saved
