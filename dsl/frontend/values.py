"""What an expression evaluates to during lowering.

`Val` wraps an IR expression; `weak` marks an untyped literal (or a folded module constant) whose type
is decided by the other operand. `TupleVal` is a compile-time tuple (multi-dim indices, `a.shape`).
`StrideVal` is the iterable of a lanes / threads loop. `PyObj` is a compile-time Python object (a namespace, an intrinsic, a type, a device function).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsl.ir import nodes as ir
from dsl.ir import types as irt


@dataclass
class Val:
    expr: ir.Expr
    weak: bool = False

    @property
    def type(self) -> irt.Type:
        return self.expr.type

    @property
    def scalar(self) -> irt.ScalarType | None:
        t = self.expr.type
        if isinstance(t, irt.ScalarType):
            return t
        return None

    @property
    def const_value(self) -> Any:
        return self.expr.value if isinstance(self.expr, ir.Const) else None


@dataclass
class TupleVal:
    items: list[Any] = field(default_factory=list)


@dataclass
class StrideVal:
    """`simt.warp.lanes(stop)`, `simt.block.threads(stop)`, `g.lanes(stop)`: only the iterable of a
    `for` loop (dsl/frontend/loops.py), which becomes a ForRange from the lane (thread) rank by the
    group's size; `scope` is "warp", "group<n>" or "block" (ir.scope_width)."""
    scope: str
    stop: ir.Expr
    rows: bool = False      # `simt.warp.rows(n)` & co.: the group's rows, strided by the launch's groups


@dataclass
class PyObj:
    obj: Any


@dataclass
class SlotBinding:
    """`slot = out.get_mut(idx)`: the GetMut expression plus the array/index facts it carries."""
    expr: ir.GetMut
    array_name: str


def weak_const(value: Any, loc: ir.Loc) -> Val:
    """An untyped literal: ints default to i64, floats to f32, bools are bool."""
    if isinstance(value, bool):
        return Val(ir.Const(value, irt.BOOL, loc), weak=False)
    if isinstance(value, int):
        return Val(ir.Const(value, irt.I64, loc), weak=True)
    return Val(ir.Const(float(value), irt.F32, loc), weak=True)
