"""Block barriers the lowering need not emit: one right after another with nothing between them that
a barrier orders.

Each lowering step that shares memory between threads brackets it with its own barriers (a ring stage
released, a staging tile about to be rewritten), so two of them can meet: the fused attention backward
released its Q stage with a barrier and, after only the leader's TMA refill of that stage and register
arithmetic, synchronised again before writing dS^T for dQ. The second orders nothing the first did not:
every thread's earlier shared and global accesses were already ordered by the first. Between them may
stand only statements that touch no memory through the generic proxy (register arithmetic, shared
addresses, descriptors) and a TMA load with the mbarrier arming it (the async proxy, which barriers do
not order; its readers wait on the mbarrier).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.verify import walk

# PTX families (dsl/tile/ptx/table.py) that may stand between two barriers: register-only operations,
# and a TMA load into shared memory with the expect_tx arming its mbarrier
QUIET_FAMILIES = frozenset({"mov.b64.opaque", "mov.b32.pack", "cvt.rn.pack", "cvt.rna.tf32.f32", "wgmma.desc",
                            "cp.async.bulk.tensor.2d", "mbarrier.arrive.expect_tx"})


def redundant_barrier(block: list[N.Stmt], named: bool) -> bool:
    """Does a barrier appended to `block` (`named`: the consumers' bar.sync.named of a warp-specialised
    kernel, else a block barrier) now follow another of its kind in the same block with only quiet
    statements between them?"""
    for s in reversed(block):
        if _is_barrier(s, named):
            return True
        if not _quiet(s):
            return False
    return False


def _family(e) -> str | None:
    """The PTX family (dsl/tile/ptx/table.py) of an inline PTX expression made by `instruction`."""
    return getattr(getattr(e, "sim", None), "family", None) if isinstance(e, TN.InlinePtx) else None


def _is_barrier(s: N.Stmt, named: bool) -> bool:
    if named:
        return isinstance(s, N.ExprStmt) and _family(s.value) == "bar.sync.named"
    return isinstance(s, N.SyncThreads)


def _quiet(s: N.Stmt) -> bool:
    if isinstance(s, N.If):
        return all(_quiet(x) for x in (*s.then, *s.else_)) and _quiet_expr(s.cond)
    if isinstance(s, N.Assign):
        return _quiet_expr(s.value)
    if isinstance(s, N.ExprStmt):
        return _quiet_expr(s.value)
    return False


def _quiet_expr(e: N.Expr) -> bool:
    for n in walk(e):
        if isinstance(n, (N.Load, N.Atomic, N.Call, N.Warp)):
            return False
        if isinstance(n, TN.InlinePtx) and _family(n) not in QUIET_FAMILIES:
            return False
    return True
