"""Lane groups: `g = simt.warp.group(n)` splits each warp into 32 / n groups of n lanes (n = 2, 4, 8,
16, 32), as cooperative groups' tiled partitions do, for kernels where a few lanes own a short row.

Everything a group does is built from warp operations whose member mask is the group's lanes
(`ir.Warp(..., width=n)`), so a group may branch on its own row while the other groups of its warp do
something else (the simulator checks that each group is whole, as it checks warps): a reduction is a butterfly of `shfl_xor`
with offsets below n (which never leave the group), `shfl(v, k)` reads lane k of the own group,
`shfl_down` / `shfl_up` read within the group and keep the own value past its edge, a vote is the
warp's ballot shifted to the group. The group's index owns rows like a warp's
(dsl/frontend/ownership.py); its `lanes(n)` loop strides by the group's width.
"""
from __future__ import annotations

import ast

from dsl.frontend import typing_rules as tr
from dsl.frontend.values import PyObj, StrideVal, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.vocab.simt import GroupMethod, WarpGroup

WIDTHS = (2, 4, 8, 16, 32)


class GroupMixin:
    def call_group_make(self, key: str, node: ast.Call) -> PyObj:
        """`simt.warp.group(n)`: a compile-time handle; its methods lower through `call_group`."""
        self.arity(node, 1)
        n = self.const_int(node.args[0], "the group width")
        if n not in WIDTHS:
            self.err(node.args[0], f"a lane group has 2, 4, 8, 16 or 32 lanes, got {n}",
                     "use a power of two that divides the warp, e.g. simt.warp.group(8)")
        return PyObj(WarpGroup(n))

    def call_group(self, m: GroupMethod, node: ast.Call) -> Val | StrideVal:
        n, name, loc = m.width, m.name, self.loc(node)
        what = f"simt.warp.group({n}).{name}()"
        scope = "warp" if n == 32 else f"group{n}"
        if name == "index_1d":
            return self.owner_index(scope, node)
        if name == "lanes":
            return StrideVal(scope, self.call_stride("warp.lanes", node).stop)
        if name == "rows":
            return self.rows_of(scope, "warp.rows", node)
        if name == "rank":
            self.arity(node, 0)
            return Val(self._rank(n, loc))
        if getattr(self, "guarded_depth", 0):
            self.err(node, f"{what} inside a guarded DisjointSlice write: lanes past the end skip the "
                     "whole statement, so not every lane of the warp would take part",
                     f"compute it into a local first (`v = g.{name}(...)`), then write the element")
        self.refuse_in_stride_loop(what, node)
        if name in ("ballot", "any", "all"):
            self.arity(node, 1)
            return Val(self._vote(n, name, self.to_bool(node.args[0]), loc))
        if name in ("sum", "max", "min"):
            self.arity(node, 1)
            v = self.scalar(node.args[0], "the value")
            t = irt.compute_type(v.scalar)  # type: ignore[arg-type]
            if t.kind == "bool":
                self.err(node.args[0], f"{what} needs a number, got bool")
            return Val(self._reduce(n, name, tr.convert(v, t, loc), t, loc))
        value, t, k32 = self.shuffle_operands(node, what)
        return Val(ir.Warp("shfl", [value, self._source_lane(n, name, k32, loc)], t, loc, n))

    # ------------------------------------------------------------------ building blocks
    @staticmethod
    def _c32(v: int, loc: ir.Loc) -> ir.Const:
        return ir.Const(v, irt.I32, loc)

    def _lane(self, loc: ir.Loc) -> ir.Expr:
        return ir.Cast(ir.Special("laneid", loc), irt.I32, loc)

    def _rank(self, n: int, loc: ir.Loc) -> ir.Expr:
        return ir.BinOp("and_", ir.Special("laneid", loc), ir.Const(n - 1, irt.INDEX, loc), irt.INDEX, loc)

    def _source_lane(self, n: int, op: str, k: ir.Expr, loc: ir.Loc) -> ir.Expr:
        """The warp lane a group shuffle reads (i32): lane k of the own group (`shfl`), the own lane
        xor k & (n - 1) (`shfl_xor`), or rank +- k when that stays in the group, else the own lane."""
        lane, c = self._lane(loc), self._c32
        I32 = irt.I32
        mask = ir.BinOp("and_", k, c(n - 1, loc), I32, loc)
        if op == "shfl":
            base = ir.BinOp("and_", lane, c(~(n - 1) & 31, loc), I32, loc)
            return ir.BinOp("or_", base, mask, I32, loc)
        if op == "shfl_xor":
            return ir.BinOp("xor", lane, mask, I32, loc)
        rank = ir.BinOp("and_", lane, c(n - 1, loc), I32, loc)
        step = ir.BinOp("add" if op == "shfl_down" else "sub", rank, k, I32, loc)
        # 0 <= rank +- k < n, as one unsigned compare (a negative k or a step past the edge is outside)
        inside = ir.Compare("lt", ir.Cast(step, irt.U32, loc), ir.Const(n, irt.U32, loc), loc)
        moved = ir.BinOp("add" if op == "shfl_down" else "sub", lane, k, I32, loc)
        return ir.IfExp(inside, moved, lane, I32, loc)

    def _reduce(self, n: int, op: str, v: ir.Expr, t: irt.ScalarType, loc: ir.Loc) -> ir.Expr:
        """A butterfly over the group: offsets n/2, ..., 1 (xor below n never leaves the group), so
        every lane of the group ends with the group's result."""
        acc = self.new_var("_group", t, loc)
        self.emit(ir.Assign(acc, v, loc))
        off = n // 2
        while off:
            cur = ir.ReadVar(acc, loc)
            other = ir.Warp("shfl_xor", [cur, self._c32(off, loc)], t, loc, n)
            self.emit(ir.Assign(acc, ir.BinOp("add" if op == "sum" else op, cur, other, t, loc), loc))
            off //= 2
        return ir.ReadVar(acc, loc)

    def _vote(self, n: int, op: str, pred: ir.Expr, loc: ir.Loc) -> ir.Expr:
        """The group's bits of the warp's ballot, shifted down to bit 0 (u32)."""
        U32 = irt.U32
        bits = ir.Warp("ballot", [pred], U32, loc, n)
        base = ir.Cast(ir.BinOp("and_", self._lane(loc), self._c32(~(n - 1) & 31, loc), irt.I32, loc), U32, loc)
        full = (1 << n) - 1
        mine = ir.BinOp("and_", ir.BinOp("rshift", bits, base, U32, loc), ir.Const(full, U32, loc), U32, loc)
        if op == "ballot":
            return mine
        if op == "any":
            return ir.Compare("ne", mine, ir.Const(0, U32, loc), loc)
        return ir.Compare("eq", mine, ir.Const(full, U32, loc), loc)
