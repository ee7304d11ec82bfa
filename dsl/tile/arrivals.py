"""Arrival counters in tile kernels: `if tile.arrive(counter, i, n):`, the last of n blocks owns tile i.

Why: a tile.Atomic array is memory that many blocks add into and none may read while they do (the sum is
not done until the last has added). CUDA's answer is the "last block" idiom (a counter per region: every
block fences its writes and increments it; the block that sees n - 1 knows the others are done and
finishes the region, e.g. converts a split-K GEMM's f32 partial sums, or attention's dQ, in the same
launch). Here it is one condition with the ownership rule the safety model needs:

    if tile.arrive(counts, i, n):                          # this block's adds to tile i arrive; last of n?
        acc_i = tile.load(acc, (i, 0), (bm, d))            # then it owns tile i of the tile.Atomic arrays
        tile.store_at(out, (i, 0), acc_i.astype(bf16))     # and writes it, once in the launch

(a counter of k axes, `tile.arrive(counts, (i, j), n)`, owns the tiles whose first k index components are
(i, j): a split-K GEMM's output tile.) The rule, checked here at compile time: a tile.Atomic array is
loaded, and `tile.store_at` writes one, only inside such a branch, at a tile whose leading index components
are the arrival's index (the same expressions; their names are not reassigned in the branch), each array's
tile shape one for every store_at; one block wins each counter element, so two blocks never write one tile.
The simulator (dsl/tile/arrival_ledger.py) checks the rest on every simulated launch: every block that
updated an element the winner read had arrived after it, each counter element got exactly its `n` arrivals
(counters start at zero; the winner sets its element back to zero, so one zeroed counter array serves every
launch), and no element is stored twice.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.ir.nodes import Loc
from dsl.ir.types import BOOL, I32
from dsl.source import assigned_names
from dsl.tile import ir as T
from dsl.tile import ops
from dsl.tile.atomics import region_operands
from dsl.tile.printer import format_param_type, same_value
from dsl.tile.types import ArrayParamType, TileType
from dsl.tile.values import ParamHandle

COUNTER_DTYPES = ("i32", "u32")
ARRIVE = "tile.arrive(counter, index, count)"
STORE_AT = "tile.store_at(array, index, value)"


def _scalar(fe: Any, v: object, node: ast.AST, call: str, what: str) -> T.TExpr:
    e = fe.as_expr(v, node, like=I32)
    if e.type.shape != () or not e.type.dtype.is_int:
        raise fe.err(node, f"{call}: `{what}` must be an integer scalar, got {e.type}")
    return ops.cast(e, I32, fe.loc(node))


def arrive(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> T.TExpr:
    """tile.arrive(counter, index, count): only as an `if` condition (Frontend.if_stmt arms it)."""
    if getattr(fe, "arrival_test", None) is not node:
        raise fe.err(node, f"{ARRIVE} is the condition of an `if` and nothing else (`if tile.arrive(counts, i, "
                           f"n):`): it adds this block's arrival, and the branch is what the last block runs")
    c = a["counter"]
    p = c.param if isinstance(c, ParamHandle) else None
    if p is None or not isinstance(p.type, ArrayParamType) or not p.type.atomic \
            or p.type.dtype.name not in COUNTER_DTYPES:
        got = f"`{p.name}` ({format_param_type(p.type)})" if p is not None else repr(c)
        raise fe.err(node, f"{ARRIVE}: `counter` must be a tile.Atomic[i32, k] (or u32) parameter, one "
                           f"element a region, zero before the first launch; got {got}")
    index = a["index"]
    index = list(index) if isinstance(index, tuple) else [index]
    if len(index) != p.type.ndim:
        raise fe.err(node, f"{ARRIVE}: `{p.name}` has {p.type.ndim} axes, so the index is {p.type.ndim} integer "
                           f"scalars (a tuple for more than one); got {len(index)}")
    count = a["count"]
    if isinstance(count, int) and not isinstance(count, bool) and count < 1:
        raise fe.err(node, f"{ARRIVE}: `count` (the arrivals a region waits for) must be >= 1, got {count}")
    return T.Arrival(p, [_scalar(fe, i, node, ARRIVE, "index") for i in index],
                     _scalar(fe, count, node, ARRIVE, "count"), TileType(BOOL, ()), loc)


def open_branch(fe: Any, node: ast.If, cond: T.Arrival) -> None:
    """Before the branch of `if tile.arrive(...)`: its index's names must stay what they were."""
    call = node.test
    assert isinstance(call, ast.Call)
    index = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "index"), None)
    names = {n.id for n in ast.walk(index) if isinstance(n, ast.Name)} if index is not None else set()
    changed = sorted(names & assigned_names(node.body))
    if changed:
        raise fe.err(node, f"{ARRIVE}: the branch assigns {', '.join(f'`{n}`' for n in changed)}, which the "
                           f"arrival's index reads; the tile the branch owns is the index's value at the "
                           f"arrival (name the new value otherwise)")


def _owns(arrival: T.Arrival, index: list[T.TExpr]) -> bool:
    k = len(arrival.index)
    return len(index) >= k and all(same_value(a, b) for a, b in zip(index[:k], arrival.index))


def owned_index(fe: Any, p: T.TParam, index: list[T.TExpr], node: ast.AST, call: str) -> None:
    """A load or store_at of tile.Atomic `p` at `index`: inside an arrival's branch, at its tile."""
    if not fe.arrivals:
        raise fe.err(node, f"{call}: `{p.name}` is a tile.Atomic array, which other blocks may be updating while "
                           f"this one reads or writes it; do that inside `if tile.arrive(counter, i, n):` at "
                           f"tile i (axis 0), where the last of the n blocks owns it, or in a later kernel")
    if not any(_owns(arr, index) for arr in fe.arrivals):
        raise fe.err(node, f"{call}: `{p.name}`'s tile index must start with the arrival's index (the same "
                           f"expressions as in tile.arrive(counter, index, count)): the branch owns those "
                           f"tiles, and no others")


def store_at(fe: Any, name: str, a: dict, node: ast.AST, loc: Loc) -> None:
    """tile.store_at(array, index, value): the winner's write of the tile it owns."""
    v = a["array"]
    p = v.param if isinstance(v, ParamHandle) else None
    if p is None or not isinstance(p.type, ArrayParamType) or not p.type.atomic:
        raise fe.err(node, f"{STORE_AT}: `array` must be a tile.Atomic parameter (a partition's tiles are "
                           f"stored with out.store), got {p.name if p is not None else repr(v)}")
    value, index = region_operands(fe, p, a, node, loc, STORE_AT)
    idx = [_scalar(fe, c, node, STORE_AT, "index") for c in index]
    owned_index(fe, p, idx, node, STORE_AT)
    shape = fe.store_at_shapes.setdefault(p.name, value.type.shape)
    if shape != value.type.shape:
        raise fe.err(node, f"{STORE_AT}: `{p.name}` is stored in tiles of shape {shape} elsewhere in this kernel, "
                           f"here {value.type.shape}; one tile shape an array, so that distinct arrivals own "
                           f"distinct tiles")
    fe.emit(T.StoreAt(p, idx, value, loc))
