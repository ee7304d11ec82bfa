"""Independent products issued together and waited for together (lowering switch `product_batches`,
KB_TILE_PRODUCT_BATCHES, sm_90 warpgroup MMA).

    st = tile.matmul(kt, tile.transpose(qi))               # S^T        } one batch: both issued,
    dpt = tile.matmul(vt, tile.transpose(doi))             # dP^T       } then waited for in order
    ...
    dv_acc = tile.matmul(pt.astype(q.dtype), doi, dv_acc)  # dV += P^T dO   } another
    dk_acc = tile.matmul(dst, qi, dk_acc)                  # dK += dS^T Q   }

Each product normally waits for its own group (wait_group 0) right after it is issued, so the tensor
cores drain between products that do not depend on each other. A batch is a run of two or more
consecutive statements of one block, each `x = tile.matmul(a, b[, acc])`, none reading a variable an
earlier one of the run assigns (and none whose variable is kept in shared memory or swizzle atoms):
its products are issued one after another, then waited for in issue order (wait_group n - 1 - k for
the k-th of n, its accumulators passed through that wait, then its ring stage released), and only
then are the variables assigned. A product that cannot wait later (its B staged by cp.async, a
rotated or ping-pong loop's product) first completes the batch so far, so every wait still completes
exactly the groups whose accumulators pass through it (what the simulator checks: dsl/tile/ptx/sm90.py).

Under the lowering switch `lazy_waits` (which takes the place of batches) every such statement's product
is left in flight on its own, and waited for just before the first statement that reads its variable
(a loop or branch, and the end of the block, wait for all): wait_group n - 1 - k completes the k-th of
the n in flight and every one before it, whose variables are then assigned. matmul/hoist.py first moves
these statements up, so a product runs on the tensor cores while the statements it moved past run.
"""
from __future__ import annotations

from dsl.tile import ir as T
from dsl.tile.lower.matmul.wgmma import wait_wgmma


def plan(L, body: list[T.TStmt]) -> dict[int, bool]:
    """{id of a batched statement: is it the last of its batch} for the runs of `body`."""
    if not L.product_batches or L.cc < 90:
        return {}
    out: dict[int, bool] = {}
    run: list[T.Assign] = []

    def close() -> None:
        if len(run) >= 2:
            out.update({id(s): k == len(run) - 1 for k, s in enumerate(run)})
        run.clear()

    for s in body:
        if not _batchable(L, s):
            close()
            continue
        assigned = {id(x.var) for x in run}
        if any(isinstance(e, T.Read) and id(e.var) in assigned for e in T.walk_exprs(s.value)):
            close()
        run.append(s)
    close()
    return out


def _batchable(L, s: T.TStmt) -> bool:
    return (isinstance(s, T.Assign) and isinstance(s.value, T.Matmul)
            and L.layout_hints.get(id(s.var), ("",))[0] not in ("S", "W"))


def lower(L, batches: dict[int, bool], s: T.Assign) -> None:
    """Statement `s` of a batch: its product issued and left in flight; at the batch's last statement
    every product is waited for and the variables assigned."""
    if L.deferred is None:
        L.deferred, L.deferred_assigns = [], []
    L.deferred_assigns.append((s.var, L.expr(s.value)))
    if batches[id(s)]:
        complete(L)
        for var, lv in L.deferred_assigns:
            L.assign(var, lv)
        L.deferred = L.deferred_assigns = None


def takes(L) -> bool:
    """Would a product issued now be left in flight (a batch is being lowered, or a lazy statement's)."""
    return L.deferred is not None and (L.lazy_assigns is None or L.lazy_issue)


def defer(L, acc_vars: list, release) -> bool:
    """Called by a warpgroup-MMA product after its commit: keep it in flight (True) when a batch is
    being lowered or a lazy statement's product is; `release()` frees its stage once it is waited for."""
    if not takes(L):
        return False
    L.deferred.append((acc_vars, release))
    return True


def complete(L, upto: int | None = None) -> None:
    """Wait for the products in flight (up to the `upto`-th), in issue order, each through its own
    accumulators; under lazy_waits their variables are assigned then."""
    pending = L.deferred or []
    last = len(pending) - 1 if upto is None else upto
    for k in range(last + 1):
        acc_vars, release = pending[k]
        wait_wgmma(L, len(pending) - 1 - k, acc_vars)
        release()
        if L.lazy_assigns is not None:
            var, value = L.lazy_assigns[k]
            L.assign(var, value)
    if L.deferred is not None:
        del L.deferred[:last + 1]
        if L.lazy_assigns is not None:
            del L.lazy_assigns[:last + 1]


# ------------------------------------------------------------------------------------ lazy_waits
def lazy_scope(L) -> tuple | None:
    """Open a block's scope of products in flight (None when lazy_waits is off): the outer one's state."""
    if not (L.lazy_waits and L.cc >= 90):
        return None
    saved = (L.deferred, L.lazy_assigns)
    L.deferred, L.lazy_assigns = [], []
    return saved


def end_scope(L, saved: tuple) -> None:
    """The block ends: every product still in flight is waited for, and the outer scope is back."""
    complete(L)
    L.deferred, L.lazy_assigns = saved


def lazy_statement(L, s: T.TStmt) -> bool:
    """`x = tile.matmul(a, b[, acc])` with no other product inside its operands, on warpgroup MMA (the
    scope is open only on sm_90: lazy_scope)."""
    return (L.wgmma_products and _batchable(L, s)
            and sum(isinstance(e, T.Matmul) for e in T.walk_exprs(s.value)) == 1)


def before(L, s: T.TStmt) -> None:
    """Before statement `s`: wait for the products in flight whose variables it reads (all of them
    before a loop or a branch)."""
    if not L.deferred:
        return
    if isinstance(s, (T.For, T.If)):
        complete(L)
        return
    reads = {id(e.var) for e in T.body_exprs([s]) if isinstance(e, T.Read)}
    hit = [k for k, (var, _) in enumerate(L.lazy_assigns) if id(var) in reads]
    if hit:
        complete(L, max(hit))


def issue(L, s: T.Assign) -> None:
    """Lazy statement `s`: its product issued and, where it may be (a ring stage's or a held B), left
    in flight with its variable assigned when it is waited for; else assigned now."""
    last = L.deferred[-1] if L.deferred else None
    L.lazy_issue = True
    try:
        value = L.expr(s.value)
    finally:
        L.lazy_issue = False
    if L.deferred and L.deferred[-1] is not last:     # its product deferred itself (defer)
        L.lazy_assigns.append((s.var, value))
    else:
        L.assign(s.var, value)
