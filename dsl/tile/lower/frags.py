"""The fragment layouts of the tensor-core tile.matmul, made and bound once per kernel, and variables
kept in shared memory (SharedTile): the Lowerer's side of dsl/tile/lower/layout.py's FragLayout classes."""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile import ir as T
from dsl.tile.lower.layout import FragLayout, MmaLayout, MmaOperandA, MmaRows, SharedTile, WarpVector, c32, iadd, imul
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait
from dsl.tile.lower.matmul.mma_sync import bind_warps
from dsl.tile.lower.matmul.operands import async_ok, issue_copies


def frag_layout(L, key: tuple) -> FragLayout:
    """Make, bind in the kernel's prologue and remember the layout of `key`: ("C", shape, wm, wn)
    accumulators (("C", shape, 4, wn, "wg"): a warpgroup a column block), ("R", C key) their rows, ("A", shape, wm, wn) A operands,
    ("V", n) vectors every warp holds whole."""
    kind = key[0]
    if kind == "V":
        lane, warp = L.lane_warp()
        owner = L.in_prologue(lambda: L.tmp(N.Compare("eq", warp, c32(0)), "vown"))
        lay: FragLayout = WarpVector(key[1], owner)
        lay.bind(lane)
    elif kind == "C":
        lay = MmaLayout(key[1], L.T, key[2], key[3], by_warpgroup=key[4:] == ("wg",))
        L.in_prologue(lambda: bind_warps(L, lay, warpgroup_rows(L, lay)))
    elif kind == "R":
        parent = L.frag_layout(key[1])
        assert isinstance(parent, MmaLayout)
        lane, _ = L.lane_warp()
        owner = L.in_prologue(lambda: L.tmp(N.Compare("eq", N.BinOp("and_", lane, c32(3), I32), c32(0)), "qown"))
        lay = MmaRows(parent, owner)
        lay.bind()
    else:
        shape, wm, wn = key[1], key[2], key[3]
        c = MmaLayout((shape[0], 8 * wn), L.T, wm, wn)          # for its lane geometry only
        wm_i, wn_i, g, t2, r0, _ = L.in_prologue(lambda: bind_warps(L, c, warpgroup_rows(L, c)))
        owner = None if wn == 1 else L.in_prologue(lambda: L.tmp(N.Compare("eq", wn_i, c32(0)), "aown"))
        lay = MmaOperandA(shape, wm, wn, owner)
        lay.bind(g, t2, r0, c.mt_step)
    L.frags[key] = lay
    return lay


def warpgroup_rows(L, layout: MmaLayout) -> bool:
    """Do `layout`'s warps hold their m-tiles as warpgroup-MMA m64 slices (bind_warps `slices`)? On
    sm_90 with warpgroup-MMA products and the wgmma_slices switch on, for every layout whose warps
    split M only, in warpgroups, more than 16 rows a warp: one rule for the kernel, so accumulators,
    their row statistics and A operands of one warp grid keep the same rows whatever product they
    meet (with one m-tile a warp both orders are the same)."""
    return (L.cc >= 90 and L.wgmma_products and L.wgmma_slices and layout.wn == 1 and layout.wm % 4 == 0
            and layout.mt > 1)


def assign_shared(L, tv: T.TVar, e: T.TExpr) -> None:
    """Assign a variable hinted into shared memory (SharedTile): a tile.load is copied by cp.async
    where its launch facts allow, anything else is stored from registers."""
    got = L.vars.get(id(tv))
    rows, cols = e.type.shape
    if got is None:
        slot = 200 + sum(1 for lay, _ in L.vars.values() if isinstance(lay, SharedTile))
        buf = L.scratch(e.type.dtype, rows * (cols + 8), slot)
        got = (SharedTile((rows, cols), buf, cols + 8, async_ok(L, e)), [])
        L.vars[id(tv)] = got
    lay = got[0]
    L.sync()                             # readers of an earlier value are done
    if lay.ldmatrix and async_ok(L, e):
        issue_copies(L, e, lay.buf, lay.stride, [L.scalar(i) for i in e.index])
        cp_async_commit(L)
        cp_async_wait(L, 0)
    else:
        v = L.to_layout(L.expr(e), "D")

        def w() -> None:
            for r, x in enumerate(v.elems):
                row, col = L.geo.coords((rows, cols), r)
                L.smem_store(lay.buf, iadd(imul(row, lay.stride), col), x)
        L.guarded(L.geo.owner(v.size), w)
    L.sync()
