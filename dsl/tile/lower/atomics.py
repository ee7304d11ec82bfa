"""Lowering of tile atomics, scatter and gather (dsl/tile/atomics.py) onto the SIMT IR.

Each thread handles the elements it holds in the blocked ("D") layout: the value, its index tiles
and its mask are brought to that layout together, so element r of each belongs to the same tile
position. An update is the SIMT IR's one `Atomic` node (llvmlite `atomicrmw`, relaxed like CUDA's
atomicAdd: `atom.global.add` and friends, which ptxas turns into `red` when the old value is unused;
float max/min, and bf16 add before sm_90, become a compare-and-swap loop around PTX `max`/`min`), guarded by the element's range test,
its mask and, for tiles smaller than the block, by the one thread that owns the element (no update
is applied twice). A gather is a guarded load per element, `padding` elsewhere.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import INDEX
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV


class AtomicsLowering:
    """Mixin of the Lowerer (dsl/tile/lower/kernel.py): `scatter` for the Scatter statement and
    `x_Gather` for the Gather expression."""

    def _element(self, arr: N.Expr, r: int, idx_lvs: list[LV],
                 mask_lv: LV | None) -> tuple[list[N.Expr], N.Expr]:
        """Element r's 64-bit indices and the condition that it is inside `arr` (and masked in)."""
        gidx = [self.tmp(N.Cast(lv.elems[r], INDEX), "gi") for lv in idx_lvs]  # type: ignore[attr-defined]
        cond = self.in_array(arr, gidx, signed=True)  # type: ignore[attr-defined]
        if mask_lv is not None:
            cond = N.Logical("and", mask_lv.elems[r], cond) if cond is not None else mask_lv.elems[r]
        assert cond is not None
        return gidx, cond

    def _blocked(self, exprs: list[T.TExpr]) -> list[LV]:
        return [self.to_layout(self.expr(e), "D") for e in exprs]  # type: ignore[attr-defined]

    def scatter(self, s: T.Scatter) -> None:
        from dsl.tile.lower.store_tma import reduce_ok, reduce_tma
        arr = self.pref(s.param)  # type: ignore[attr-defined]
        dt = s.param.type.dtype
        lowered = self.expr(s.value)  # type: ignore[attr-defined]
        if reduce_ok(self, s, lowered):
            return reduce_tma(self, s, lowered)  # a region of accumulators by TMA reduce-adds (store_tma.py)
        value = self.to_layout(lowered, "D")  # type: ignore[attr-defined]
        idx_lvs = self._blocked(list(s.indices))
        mask_lv = self._blocked([s.mask])[0] if s.mask is not None else None
        own = self.geo.owner(value.size)  # type: ignore[attr-defined]
        for r, v in enumerate(value.elems):
            gidx, cond = self._element(arr, r, idx_lvs, mask_lv)
            if own is not True:
                cond = N.Logical("and", own, cond)
            upd = N.Atomic(s.op, arr, gidx, [v], "none", 0, dt, s.loc)
            self.emit(N.If(cond, [N.ExprStmt(upd, s.loc)], [], s.loc))  # type: ignore[attr-defined]

    def x_Gather(self, e: T.Gather) -> LV:
        arr = self.pref(e.param)  # type: ignore[attr-defined]
        dt = e.type.dtype
        idx_lvs = self._blocked(list(e.indices))
        mask_lv = self._blocked([e.mask])[0] if e.mask is not None else None
        out = []
        for r in range(self.geo.per_thread(e.type.size)):  # type: ignore[attr-defined]
            gidx, cond = self._element(arr, r, idx_lvs, mask_lv)
            ld = N.Load(arr, gidx, "none", 0, dt, e.loc)
            out.append(self.tmp(N.IfExp(cond, ld, N.Const(e.padding, dt), dt), "ga"))  # type: ignore[attr-defined]
        return LV("D", e.type.shape, dt, out)
