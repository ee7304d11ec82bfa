"""The `unroll=N` hint of a kernel `for` loop: `simt.range(start, stop, step, unroll=N)` and the stride
and rows loops (`simt.block.threads(n, unroll=N)`, `simt.warp.lanes(n, unroll=N)`, `g.rows(n, unroll=N)`,
...). Why a hint: LLVM does not unroll a loop whose trip count is known only at run time, so each
iteration's loads wait for the one before; with N copies of the body the back end issues N loads
before the first is used (dsl/backend/unroll.py), as nvcc does for `#pragma unroll N`.

The hint changes no result: the IR carries it (`ForRange.unroll`), the simulator ignores it.
"""
from __future__ import annotations

import ast
import builtins

MAX_UNROLL = 64
# the calls a `for` loop may give `unroll=`: builtin range is refused (Python's takes no keywords)
LOOP_KEYS = ("range", "warp.lanes", "block.threads", "warp.rows", "block.rows")
LOOP_METHODS = ("lanes", "rows")       # of a lane group, `g = simt.warp.group(n)`
_EXPECTED = f"unroll must be a constant integer from 1 to {MAX_UNROLL} (1: no unrolling)"


class UnrollMixin:
    def split_unroll(self, it: ast.expr) -> tuple[int, ast.expr]:
        """The loop's unroll factor (1 without a hint) and its iterable without the `unroll=`
        keyword; a hint on a call that is no range / stride / rows loop is refused."""
        if not isinstance(it, ast.Call):
            return 1, it
        hints = [k for k in it.keywords if k.arg == "unroll"]
        if not hints:
            return 1, it
        hint = hints[0]
        self._check_unroll_target(it, hint)
        n = self._unroll_factor(hint.value)
        rest = [k for k in it.keywords if k is not hint]
        call = ast.Call(func=it.func, args=it.args, keywords=rest)
        return n, ast.copy_location(call, it)

    def _unroll_factor(self, node: ast.expr) -> int:
        v = self.expr(node)
        value = getattr(v, "const_value", None)
        if not (getattr(v, "weak", False) and isinstance(value, int) and not isinstance(value, bool)):
            self.err(node, f"{_EXPECTED}, got {self.describe(v)}",
                     "write a literal or a module-level constant, e.g. unroll=4")
        if not 1 <= value <= MAX_UNROLL:
            self.err(node, f"{_EXPECTED}, got {value}", "unroll=4 keeps four iterations' loads in flight")
        return value

    def _check_unroll_target(self, call: ast.Call, hint: ast.keyword) -> None:
        from dsl.frontend.values import PyObj
        from dsl.vocab.simt import GroupMethod, Intrinsic
        f = self.expr(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
        obj = f.obj if isinstance(f, PyObj) else None
        if obj is builtins.range:
            self.err(hint.value, "Python's range() takes no unroll= keyword",
                     "write `for i in simt.range(start, stop, step, unroll=4):`")
        if isinstance(obj, Intrinsic) and obj.key in LOOP_KEYS:
            return
        if isinstance(obj, GroupMethod) and obj.name in LOOP_METHODS:
            return
        self.err(hint.value, "unroll= is a hint of a `for` loop over simt.range(...), "
                 "simt.block.threads(n), simt.warp.lanes(n), g.lanes(n) or a rows(n) loop",
                 "drop unroll=, or loop over one of those")
