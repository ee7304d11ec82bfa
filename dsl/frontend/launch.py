"""The SIMT front end's launch-feature intrinsics: `simt.pdl.*`, `simt.grid.sync()`, `simt.cluster.*`,
one method for every row of dsl/vocab/launch.py (`call_launch`), and the kernel-level checks that need
the whole body (`check_launch_ops`: where an explicit `simt.pdl.wait()` may stand).

Rules (docs/dsl.md, "Launch features"): a row's `needs` is the decorator option the kernel must declare
(grid.sync: cooperative=True; cluster.*: cluster=...), map_shared is unsafe, a barrier is a statement
that every thread of the group reaches (not in a lanes / threads loop or a guarded write), and an
explicit pdl.wait is a top-level statement of the kernel body with no global memory access before it.
"""
from __future__ import annotations

import ast
from typing import Any

from dsl.frontend import typing_rules as tr
from dsl.frontend.values import TupleVal, Val
from dsl.ir import nodes as ir
from dsl.ir import types as irt
from dsl.ir.launch_nodes import BARRIERS, ClusterShared, LaunchOp
from dsl.source import compile_error
from dsl.vocab import launch as vocab

_REGISTERS = {"cluster.rank": "cluster_ctarank", "cluster.size": "cluster_nctarank"}
_OPTION_HINT = {
    vocab.COOPERATIVE: "declare @simt.kernel(cooperative=True, ...): the launch then keeps every block of the "
                       "grid resident at once (the validator refuses a larger grid), as a grid-wide barrier needs",
    vocab.CLUSTER: "declare the cluster, e.g. @simt.kernel(cluster=(2, 1, 1), ...): blocks then run in groups "
                   "of that shape on one GPC and share these registers, barriers and shared memory",
}


class LaunchMixin:
    """`call_launch`, the INTRINSICS handler of every launch-table key (dsl/frontend/calls.py)."""

    def call_launch(self, key: str, node: ast.Call) -> Any:
        row = vocab.get(key)
        assert row is not None, key
        what = row.spelling("simt")
        self.arity(node, len(row.params))
        if row.needs == vocab.COOPERATIVE and not self.options.cooperative:
            self.err(node, f"{what} in a kernel that is not cooperative", _OPTION_HINT[row.needs])
        if row.needs == vocab.CLUSTER and self.options.cluster is None:
            self.err(node, f"{what} in a kernel without a thread-block cluster", _OPTION_HINT[row.needs])
        if row.unsafe and self.unsafe_depth == 0:
            self.err(node, f"{what} reads and writes another block's shared memory",
                     "use it inside `with simt.unsafe():`")
        loc = self.loc(node)
        if row.result == vocab.VOID:
            return self._launch_statement(key, what, node, loc)
        if row.result == vocab.INDEX:
            return Val(ir.Special(_REGISTERS[key], loc))
        if row.result == vocab.INDEX3:
            return TupleVal([Val(ir.Special(f"cluster_ctaid.{a}", loc)) for a in "xyz"])
        return self._map_shared(what, node, loc)

    def _launch_statement(self, key: str, what: str, node: ast.Call, loc: ir.Loc) -> Val:
        if not isinstance(getattr(node, "_kb_parent", None), ast.Expr):
            self.err(node, f"{what} is a statement, not a value", "call it on its own line")
        if key == "pdl.wait" and not self.is_kernel:
            self.err(node, f"{what} in a device function",
                     "wait in the kernel body, before its first global memory access")
        if key in BARRIERS:
            if getattr(self, "guarded_depth", 0):
                self.err(node, f"{what} inside a guarded DisjointSlice write: threads past the end skip "
                         "it, so not every thread would reach the barrier", "call it on its own line")
            self.refuse_in_stride_loop(what, node)
        return Val(LaunchOp(key, loc))

    def _map_shared(self, what: str, node: ast.Call, loc: ir.Loc) -> Val:
        """`simt.cluster.map_shared(buf, rank)`: a view of block `rank`'s `buf` (the rank is read once,
        where the view is made, so later uses of a named view mean the same block)."""
        buf = self.expr(node.args[0])
        if not (isinstance(buf, Val) and isinstance(buf.expr, ir.SharedArray)) or buf.expr.alloc.dynamic:
            self.err(node.args[0], f"{what} needs a static shared array (simt.shared.array), got "
                     f"{self.describe(buf)}", "declare it with `buf = simt.shared.array(shape, dtype)`")
        r = self.scalar(node.args[1], "the rank")
        if r.scalar.kind == "bool" or not r.scalar.is_int:   # type: ignore[union-attr]
            self.err(node.args[1], f"the rank of {what} must be an integer, got {r.scalar}")
        rank = tr.convert(r, irt.INDEX, loc) if r.weak else tr.cast(r.expr, irt.INDEX, loc)
        if not isinstance(rank, (ir.Const, ir.Special, ir.ParamRef)):
            tmp = self.new_var("_rank", irt.INDEX, loc)
            self.emit(ir.Assign(tmp, rank, loc))
            rank = ir.ReadVar(tmp, loc)
        return Val(ClusterShared(buf.expr.alloc, rank, loc))


# ---------------------------------------------------------------------------- kernel-level checks
def _children(node: Any):
    from dsl.ir.verify import children
    return children(node)


def _accesses(node: Any, seen: set[int]):
    """Global memory accesses (loads, stores, atomics of non-shared arrays) under `node`, device
    functions included, in source order."""
    from dsl.ir import tile_nodes as TN
    if isinstance(node, (ir.Load, ir.Store, ir.Atomic)) and getattr(node.array.type, "space", "global") != "shared":
        yield node
    elif isinstance(node, (ir.SlotSet, ir.ChunkLoop, TN.GlobalAddress)):
        yield node
    if isinstance(node, ir.Call) and id(node.callee) not in seen:
        seen.add(id(node.callee))
        for s in node.callee.body:
            yield from _accesses(s, seen)
    for c in _children(node):
        yield from _accesses(c, seen)


def _is_wait(s: Any) -> bool:
    return isinstance(s, ir.ExprStmt) and isinstance(s.value, LaunchOp) and s.value.op == "pdl.wait"


def _nested_waits(body: list):
    """pdl.wait operations that are not top-level statements of `body`."""
    from dsl.ir.verify import walk
    for s in body:
        if not _is_wait(s):
            yield from (m for m in walk(s) if isinstance(m, LaunchOp) and m.op == "pdl.wait")


def check_launch_ops(fn: ir.Function) -> None:
    """An explicit `simt.pdl.wait()` (or the tile model's) must be a top-level statement of the kernel
    body, with no global memory access in any statement before it: anything read before the wait may
    be what the predecessor grid has not written yet (DslCompileError at the offending access)."""
    waits = [k for k, s in enumerate(fn.body) if _is_wait(s)]
    nested = list(_nested_waits(fn.body))
    if nested:
        raise compile_error("pdl.wait() inside a loop, a branch or a chunk loop: the accesses after it on "
                            "other paths would not wait", nested[0].loc,
                            "call it once at the top level of the kernel body, before the first global "
                            "memory access (or leave it out: a pdl=True kernel then waits at its entry)")
    if not waits:
        return
    seen: set[int] = set()
    for s in fn.body[:waits[0]]:
        for acc in _accesses(s, seen):
            wait = fn.body[waits[0]].loc
            raise compile_error(f"global memory access before pdl.wait() (line {wait.line}): the grid this "
                                "launch depends on may not have written it yet", acc.loc,
                                "move the access after the wait, or leave the explicit wait out: a pdl=True "
                                "kernel then waits at its entry")
