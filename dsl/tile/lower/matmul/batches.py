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


def defer(L, acc_vars: list, release) -> bool:
    """Called by a warpgroup-MMA product after its commit: keep it in flight (True) when a batch is
    being lowered; `release()` frees its stage once it is waited for."""
    if L.deferred is None:
        return False
    L.deferred.append((acc_vars, release))
    return True


def complete(L) -> None:
    """Wait for the batch's products so far, in issue order, each through its own accumulators."""
    pending = L.deferred or []
    for k, (acc_vars, release) in enumerate(pending):
        wait_wgmma(L, len(pending) - 1 - k, acc_vars)
        release()
    if L.deferred is not None:
        L.deferred = []
