"""Products issued as early as their operands allow (part of the lowering switch `lazy_waits`,
KB_TILE_LAZY_WAITS; matmul/batches.py leaves them in flight until their results are read).

    st = tile.matmul(kt, tile.transpose(qi)) * scale2      # S^T: waited for where it is scaled
    pt = tile.exp2(st - lse_i[None, :])                    # softmax
    dv_acc = tile.matmul(pt.astype(e), doi, dv_acc)
    dpt = tile.matmul(vt, tile.transpose(doi))             # dP^T: moved up behind S^T, so it runs on
    dst = (pt * (dpt - delta_i[None, :])).astype(e)        # the tensor cores while the softmax runs

A statement `x = tile.matmul(a, b[, acc])` moves up its block past the assignments before it that it
does not depend on (none assigns a variable it reads, none reads or assigns x), but not past a
statement whose product is part of a larger expression (the first product of the attention backward's
step keeps its place: the others queue behind it), a store, an atomic, a loop or a branch. Past another
such product statement only where that one waits for the statement before it (dV for P^T: dP^T goes
first, its operands being ready); products that could both go earlier keep their order. Nothing it moves past has effects, so the program computes the same
values; the tile IR is rebuilt, not edited (the function is cached and lowered under other switches).
"""
from __future__ import annotations

import dataclasses

from dsl.tile import ir as T


def hoist_products(fn: T.TileFunction) -> T.TileFunction:
    """`fn` with every block's plain product statements moved up as far as they may go."""
    return dataclasses.replace(fn, body=_block(fn.body))


def _block(body: list[T.TStmt]) -> list[T.TStmt]:
    out: list[T.TStmt] = []
    for s in body:
        if isinstance(s, T.For):
            s = dataclasses.replace(s, body=_block(s.body))
        elif isinstance(s, T.If):
            s = dataclasses.replace(s, then=_block(s.then), else_=_block(s.else_))
        at = len(out)
        if _plain_product(s):
            while at > 0 and _may_pass(s, out[at - 1]) and (
                    not _plain_product(out[at - 1]) or _pinned(out, at - 1)):
                at -= 1
        out.insert(at, s)
    return out


def _pinned(out: list[T.TStmt], k: int) -> bool:
    """Does product statement out[k] read what the statement before it assigns (it could go no earlier)."""
    return k > 0 and isinstance(out[k - 1], T.Assign) and id(out[k - 1].var) in _reads(out[k])


def _plain_product(s: T.TStmt) -> bool:
    return isinstance(s, T.Assign) and isinstance(s.value, T.Matmul)


def _reads(s: T.Assign) -> set[int]:
    return {id(e.var) for e in T.walk_exprs(s.value) if isinstance(e, T.Read)}


def _may_pass(s: T.Assign, p: T.TStmt) -> bool:
    """May product statement `s` go before `p`: `p` an assignment without a product inside (or a plain
    product statement) that neither feeds `s` nor reads or writes what `s` assigns."""
    if not isinstance(p, T.Assign):
        return False
    if not _plain_product(p) and any(isinstance(e, T.Matmul) for e in T.walk_exprs(p.value)):
        return False
    return id(p.var) not in _reads(s) and id(s.var) not in _reads(p) and p.var is not s.var
