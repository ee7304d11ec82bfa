"""Vector global accesses of distributed ("D") tiles.

Each thread holds runs of V consecutive flat elements (Geometry, dsl/tile/lower/layout.py), V chosen
per kernel so that a run is 16 bytes of its narrowest loaded or stored element type (8 f16, 4 f32)
among the arrays whose launch facts allow vector accesses (kernel_run). A run that is contiguous in
memory is loaded or stored with one 16-byte access (a longer run of a wider type: one per 16 bytes),
`ld.global.v4.b32` / `st.global.v4.b32` as Triton's blocked layouts do, instead of one 2- or 4-byte
access an element: a warp moves 512 bytes an instruction, not 64 or 128. LLVM does not join the
scalar accesses itself: each sits behind its own bounds branch, and a row's start alignment is a
run-time fact.

A run is one access when the launch facts say so (the contract then states them): the array is
C-contiguous with a 16-byte-aligned data pointer, the tile's last axis is a multiple of V (a run
stays in one row), and an n-D array's rows are a multiple of 8 elements (every row starts 16-byte
aligned). Masking stays exact: with the last extent a multiple of V, a run is wholly inside or outside
the array, so its first element decides and the access is predicated on it (a load leaves the
padding where it is off). A 1-D array of another length tests the whole run and takes element by
element accesses for the one run that straddles its end. Anything else stays one access an element
and is recorded as a slow path (kind `tile-scalar`, dsl/perf.py).
"""
from __future__ import annotations

import math
from typing import Callable

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U64, ScalarType
from dsl.tile import ir as T
from dsl.tile.lower.indexing import ElementIndex
from dsl.tile.lower.layout import LV, Geometry, c32
from dsl.tile.ptx.table import instruction

VECTOR_BYTES = 16          # ld/st.global.v4.b32: the widest access on every arch we target


def kernel_run(fn: T.TileFunction, facts: dict[str, dict] | None = None) -> int:
    """The kernel's run V: 16 bytes of the narrowest element type (2, 4 or 8 bytes) that it loads or
    stores outside the tensor-core operands, counting with `facts` only the arrays whose accesses
    can be vector accesses (so a kernel with none keeps the plain mapping); one mapping for all
    tiles, since elementwise ops mix the dtypes of casts. 1 when there is none."""
    operands = {id(x) for e in T.body_exprs(fn.body) if isinstance(e, T.Matmul) for x in (e.a, e.b)}
    params = [e.param for e in T.body_exprs(fn.body) if isinstance(e, T.Load) and id(e) not in operands]
    params += [s.param for s in T.walk_stmts(fn.body) if isinstance(s, T.Store)]
    sizes = [p.type.dtype.itemsize for p in params
             if facts is None or _facts_refuse(p, facts.get(p.name, {})) is None]
    sizes = [x for x in sizes if x in (2, 4, 8)]
    return VECTOR_BYTES // min(sizes) if sizes else 1


def _facts_refuse(p: T.TParam, f: dict) -> str | None:
    """Why the launch facts `f` keep `p`'s array from vector accesses, or None."""
    dt, name = p.type.dtype, p.name
    if dt.itemsize not in (2, 4, 8):
        return f"{dt} elements ({dt.itemsize} byte) are not joined into vector accesses"
    if f.get("layout") != "C":
        return f"{name} may be strided (not C-contiguous in this specialisation); pass a contiguous array"
    if not f.get("aligned16"):
        return f"{name}'s data pointer is not known to be 16-byte aligned in this specialisation"
    if p.type.ndim > 1 and not f.get("div8"):
        return (f"{name}.shape[{p.type.ndim - 1}] is not a multiple of 8 in this specialisation, so its rows "
                f"do not start 16-byte aligned")
    return None


def plan(L, p: T.TParam, shape: tuple[int, ...], what: str, loc) -> tuple[int, bool] | None:
    """(run, exact) when a D tile of `shape` of `p`'s array is accessed a run at a time (`exact`: the
    last extent is a known multiple of the run, so a run is wholly in or out), else None, recording
    why when the tile is large enough to have runs."""
    size = math.prod(shape)
    v = L.geo.run(size)
    if Geometry(L.T, c32(0), L.vec_wanted).run(size) < 2:
        return None                     # a small tile: one element a thread at a time in any case
    f = L.facts.get(p.name, {})
    why = _facts_refuse(p, f)
    if why is None and v >= 2 and shape[-1] % v:
        why = (f"the tile's last axis ({shape[-1]}) is not a multiple of the {v} elements a thread holds "
               f"side by side; use a wider tile")
    if why is not None:
        from dsl.perf import SlowPath
        L.slow_paths.append(SlowPath("tile-scalar", f"tile {what} of {p.name}: {why}: one "
                                     f"{p.type.dtype.itemsize}-byte access per element", loc.line, loc.file))
        return None
    if v < 2:
        return None
    return v, bool(f.get("div8"))


def _cond_i32(L, cond: N.Expr | None) -> N.Expr:
    return c32(1) if cond is None else L.tmp(N.Cast(cond, I32), "vp")


def _pieces(L, arr: N.Expr, gidx: list[N.Expr], v: int, dt: ScalarType):
    """(address, elements) of each access of a run of `v` elements starting at `gidx`."""
    n = min(v, VECTOR_BYTES // dt.itemsize)
    addr = L.tmp(TN.GlobalAddress(arr, gidx), "va")
    for i in range(0, v, n):
        yield (addr if i == 0 else L.tmp(N.BinOp("add", addr, N.Const(i * dt.itemsize, U64), U64), "va")), n


def load_vector(L, arr: N.Expr, gidx: list[N.Expr], v: int, dt: ScalarType, cond, pad, nc: bool) -> list[N.Expr]:
    """The `v` elements from `gidx` on by predicated accesses (`cond`, None: always), `pad` where it fails;
    v 1: one element (a 4- or 8-byte access), which the compiler keeps where it is emitted (side effects:
    dsl/tile/lower/anchors.py's early loads)."""
    pred = _cond_i32(L, cond)
    out: list[N.Expr] = []
    for addr, n in _pieces(L, arr, gidx, v, dt):
        got = L.new_var(dt if n == 1 else TN.tuple_of(dt, n), "vld")
        L.emit(N.Assign(got, instruction("ld.global.run", [addr, pred, N.Const(pad, dt)], dtype=dt, n=n, nc=nc,
                                         hint=load_hint(L))))
        out += [N.ReadVar(got)] if n == 1 else [N.TupleGet(N.ReadVar(got), j, dt) for j in range(n)]
    return out


def _store_vector(L, arr: N.Expr, gidx: list[N.Expr], elems: list[N.Expr], dt: ScalarType, cond) -> None:
    pred = _cond_i32(L, cond)
    at = 0
    for addr, n in _pieces(L, arr, gidx, len(elems), dt):
        L.asm("st.global.run", [addr, pred, *elems[at:at + n]], dtype=dt, n=n)
        at += n


def _run_index(L, gidx: list[N.Expr], i: int) -> list[N.Expr]:
    return gidx[:-1] + [L.tmp(N.BinOp("add", gidx[-1], N.Const(i, INDEX), INDEX), "gi")]


def _whole_run(arr: N.Expr, g: N.Expr, v: int) -> N.Expr:
    """0 <= g and g + v <= len(arr): the run of a 1-D array lies inside it."""
    return N.Logical("and", N.Compare("ge", g, N.Const(0, INDEX)),
                     N.Compare("le", N.BinOp("add", g, N.Const(v, INDEX), INDEX), N.ArrayLen(arr, 0)))


def load_hint(L) -> str:
    """The cache qualifiers of vector loads (switch load_hint), on targets that have them (ptxas takes an L2
    prefetch size from sm_80 on); "none" elsewhere."""
    return L.load_hint if L.cc >= 80 else "none"


def read_only_path(L, arr: N.Expr) -> bool:
    """Do vector loads of `arr` go through the non-coherent cache (ld.global.nc): read-only for the
    whole kernel, unless the lowering switch nc_loads is off (plain ld.global, as Triton emits)."""
    return not arr.type.writable and L.nc_loads


def load_runs(L, e: T.Load, base: list[N.Expr]) -> list[N.Expr] | None:
    """The D-layout elements of load `e` (tile `base`), a vector access per run, or None: the caller
    loads element by element (the slow path is recorded)."""
    shape, dt = e.type.shape, e.type.dtype
    planned = plan(L, e.param, shape, "loads", e.loc)
    if planned is None:
        return None
    v, exact = planned
    arr = L.pref(e.param)
    nc = read_only_path(L, arr)
    out: list[N.Expr] = []
    for r0 in range(0, L.geo.per_thread(math.prod(shape)), v):
        gidx = [L.global_index(base[k], shape[k], c) for k, c in enumerate(L.geo.coords(shape, r0))]
        if exact or L.interior:         # L.interior: a block whose tiles are inside (interior.py)
            out += load_vector(L, arr, gidx, v, dt, L.in_array(arr, gidx, signed=True), e.padding, nc)
            continue
        held = [L.new_var(dt, "ld") for _ in range(v)]

        def whole(gidx=gidx, held=held) -> None:
            for x, got in zip(held, load_vector(L, arr, gidx, v, dt, None, e.padding, nc)):
                L.emit(N.Assign(x, got))

        def each(gidx=gidx, held=held) -> None:
            for i, x in enumerate(held):
                gi = _run_index(L, gidx, i)
                ld = N.Load(arr, gi, "none", 0, dt, e.loc)
                L.emit(N.Assign(x, N.IfExp(L.in_array(arr, gi, signed=True), ld, N.Const(e.padding, dt), dt)))
        L.emit(N.If(_whole_run(arr, gidx[0], v), L.block_of(whole), L.block_of(each)))
        out += [N.ReadVar(x) for x in held]
    L.relied.add(e.param.name)
    return out


def load_pairs(L, e: T.Load, base: list[N.Expr], layout) -> list[N.Expr] | None:
    """The elements of load `e` (tile `base`) in a register-fragment layout whose elements come in
    column pairs (FragLayout.pairs: the A operand the products keep, accumulators read from an array):
    one access a pair (4 bytes of f16/bf16, 8 of f32) instead of one an element, where the launch facts
    allow (C-contiguous, 16-byte aligned, rows a multiple of 8 elements: a pair, at an even column, is
    then aligned and wholly inside or outside the array). Else None: element by element, recorded as a
    `tile-scalar` slow path."""
    shape, dt = e.type.shape, e.type.dtype
    if not layout.pairs or len(shape) != 2 or dt.itemsize not in (2, 4):
        return None
    why = _facts_refuse(e.param, L.facts.get(e.param.name, {}))
    if why is not None:
        from dsl.perf import SlowPath
        L.slow_paths.append(SlowPath("tile-scalar", f"tile loads of {e.param.name} into tensor-core fragments: "
                                     f"{why}: one {dt.itemsize}-byte access per element", e.loc.line, e.loc.file))
        return None
    arr = L.pref(e.param)
    nc = read_only_path(L, arr)
    coords = layout.coords_for(shape)
    firsts = coords[0::2]
    # pairs of one lane expression share a base and test an immediate against what is left past it
    # (indexing.py): no per-pair index or bound for the compiler to hoist out of a loop around the load
    at = ElementIndex(L, base, shape, firsts)
    out: list[N.Expr] = []
    for first in firsts:
        gidx, cond = at.element(arr, base, shape, first)
        out += load_vector(L, arr, gidx, 2, dt, cond, e.padding, nc)
    L.relied.add(e.param.name)
    return out


def store_runs(L, p: T.TParam, v: LV, origin: Callable[[], list[N.Expr]], loc) -> bool:
    """Store the D tile `v` at `origin()` (INDEX per axis) of partition `p`'s array, a vector access
    per run; False when it must go element by element (the slow path is recorded)."""
    planned = plan(L, p, v.shape, "stores", loc)
    if planned is None:
        return False
    run, exact = planned
    arr, dt = L.pref(p), p.type.dtype
    o = origin()
    elems = [x if x.type == dt else L.tmp(N.Cast(x, dt)) for x in v.elems]
    for r0 in range(0, len(elems), run):
        gidx = [o[k] if isinstance(c, int) and c == 0 else
                L.tmp(N.BinOp("add", o[k], N.Const(c, INDEX) if isinstance(c, int) else N.Cast(c, INDEX), INDEX), "gi")
                for k, c in enumerate(L.geo.coords(v.shape, r0))]
        part = elems[r0:r0 + run]
        if exact or L.interior:
            _store_vector(L, arr, gidx, part, dt, L.in_array(arr, gidx))
            continue

        def each(gidx=gidx, part=part) -> None:
            for i, x in enumerate(part):
                L.store_masked(arr, _run_index(L, gidx, i), x, True, loc)
        L.emit(N.If(_whole_run(arr, gidx[0], run), L.block_of(lambda gidx=gidx, part=part: _store_vector(
            L, arr, gidx, part, dt, None)), L.block_of(each)))
    L.relied.add(p.name)
    return True
