"""Vectors every warp holds whole (layout.WarpVector), for a row vector broadcast over the columns of
tensor-core accumulators: attention's log-sum-exp and Delta rows, `(lse * c)[None, :]` beside S^T.

Why: a vector in the "D" layout (a few threads hold each element once) reaches the accumulator columns
through shared memory: every thread stores, the block meets, every thread reads its columns, the block
meets again. Two block barriers a vector a use, where the warps of a warpgroup-MMA kernel arrive at
different times (ncu, the fused attention backward at D128: a tenth of its stall samples sat at those
barriers and the shared loads behind them). Where every warp holds the whole vector, a lane takes its
columns from the lanes that hold them with one shuffle a column pair, and no warp waits for another.

When (switch warp_vectors): the lowering learns it (Lowerer.hint; lower() lowers again until nothing new
is learnt) from a broadcast of a 1-D float32 "D" variable of N = 64, 128, 192 or 256 elements over the
columns of a 2-D tile in a kernel with tensor-core products: that variable, and every variable it is
copied from or to (a loop's carried value and the copies around it, as the backward's prefetched rows
are), is made a WarpVector. Each warp then loads the vector itself (N / 32 elements a lane: a few loads
more, from the cache lines the other warps read). Any other use gathers from it as from any fragment
layout.
"""
from __future__ import annotations

from typing import Callable

from dsl.ir import nodes as N
from dsl.ir.types import F32, I32
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, MmaLayout, WarpVector, c32

MAX_N = 256             # 8 registers a lane a vector


def hint_warp_vectors(L, e: T.Broadcast, v: LV) -> None:
    """Ask the next lowering to hold the variables `e` broadcasts as WarpVectors (see the module)."""
    shape = e.type.shape
    n = shape[-1]
    if not (v.layout == "D" and len(shape) == 2 and v.shape in ((n,), (1, n)) and v.dtype == F32 and n % 64 == 0
            and n <= MAX_N and L.warp_vectors and L.tc_matmul and _has_products(L)):
        return
    for x in T.walk_exprs(e.operand):
        if isinstance(x, T.Read) and tuple(x.var.type.shape) == (n,) and L.vars.get(id(x.var), ("",))[0] == "D":
            for tv in _copies_of(L.fn.body, x.var):
                L.hint(tv, ("V", n))


def shuffled_columns(L, v: LV) -> Callable[[object], list[N.Expr] | None]:
    """by_layout of WarpVector `v` broadcast over rows: for accumulators (BM, N) whose warps split M only,
    column 8 nt + 2 (l % 4) + b of lane l is element 2 (nt / 8) + b of lane 4 (nt % 8) + l % 4: one shuffle a
    fragment column pair, shared by the m-tiles and both rows of a fragment; None for any other layout."""
    assert isinstance(v.layout, WarpVector)

    def by_layout(lay) -> list[N.Expr] | None:
        if not (isinstance(lay, MmaLayout) and lay.wn == 1 and lay.shape[1] == v.shape[-1]):
            return None
        lane, _ = L.lane_warp()
        quad = L.tmp(N.BinOp("and_", lane, c32(3), I32), "vq")
        got: dict[tuple[int, int], N.Expr] = {}
        out = []
        for r in range(lay.per_thread):
            nt, b = (r // 4) % lay.nt, r & 1
            if (nt, b) not in got:
                src = N.BinOp("add", quad, c32(4 * (nt % 8)), I32)
                got[nt, b] = L.tmp(N.Warp("shfl", [v.elems[2 * (nt // 8) + b], src], v.dtype), "vsh")
            out.append(got[nt, b])
        return out
    return by_layout


def _has_products(L) -> bool:
    return any(isinstance(x, T.Matmul) for x in T.body_exprs(L.fn.body))


def _copies_of(body: list, tv: T.TVar) -> list[T.TVar]:
    """`tv` and the variables joined to it by plain copies (`a = b`), either way, transitively."""
    links: dict[int, list[T.TVar]] = {}
    for s in T.walk_stmts(body):
        if isinstance(s, T.Assign) and isinstance(s.value, T.Read):
            links.setdefault(id(s.var), []).append(s.value.var)
            links.setdefault(id(s.value.var), []).append(s.var)
    seen, todo = {id(tv): tv}, [tv]
    while todo:
        for other in links.get(id(todo.pop()), []):
            if id(other) not in seen:
                seen[id(other)] = other
                todo.append(other)
    return list(seen.values())
