"""IR nodes the tile lowering needs beyond the SIMT set: inline PTX (tensor-core mma.sync, ldmatrix,
cp.async) and raw addresses of shared / global elements to feed it. Additive: nothing in
dsl/ir/nodes.py changes; code generation lives in dsl/backend/tile_codegen.py. Shared memory itself is
the SIMT node (`nodes.SharedAlloc` / `nodes.SharedArray`, with its alignment): one node and one
allocator for both front ends.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsl.ir.nodes import NOLOC, Expr, Loc
from dsl.ir.types import U32, U64, ScalarType, TupleType, Type


@dataclass(eq=False)
class InlinePtx(Expr):
    """An inline PTX statement. `constraints` uses LLVM syntax ("=r,=r,r" ...); outputs first.
    type: VOID (use in an ExprStmt), one ScalarType, or a TupleType of scalars (several outputs; assign
    it to a tuple-typed Var and read components with TupleGet). Always treated as having side effects
    when `side_effects` (cp.async, barriers), else pure (mma, ldmatrix: `.sync.aligned` ops must still
    be executed by the whole warp; the lowering only places them in warp-uniform code).
    `sim`: its CPU semantics for the simulator: the SemanticsRef of its row of dsl/tile/ptx/table.py
    (resolved on first use), or in hand-built IR a function marked with dsl.tile.ptx.sm80.semantics:
    `sim(args, pos, present)` -> the value (a vector per selected lane, or a tuple
    of them), with args evaluated on the selected lanes, `pos` their warp-padded positions and
    `present` which padded lanes take part (whole warps); a per-thread one is `sim(args)` on the
    selected lanes; one that needs memory also gets the Machine and the lane numbers. None: the
    simulator refuses the statement."""
    asm: str
    constraints: str
    args: list[Expr]
    type: Type
    side_effects: bool = False
    loc: Loc = NOLOC
    sim: Any = None


@dataclass(eq=False)
class SharedAddress(Expr):
    """32-bit shared-window address of element `index` of a 1-D shared array (for ldmatrix/cp.async)."""
    array: Expr
    index: Expr
    loc: Loc = NOLOC
    type: ScalarType = U32


@dataclass(eq=False)
class GlobalAddress(Expr):
    """64-bit global address of array[indices] (no bounds check: the caller clamps the indices)."""
    array: Expr
    indices: list[Expr]
    loc: Loc = NOLOC
    type: ScalarType = U64


def tuple_of(t: ScalarType, n: int) -> TupleType:
    return TupleType((t,) * n)
