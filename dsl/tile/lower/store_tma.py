"""The GEMM epilogue through TMA stores (switch `tma_store`, sm_90), as CUTLASS's sm_90 epilogues: the
threads write their accumulator pairs into a swizzled staging tile in shared memory, and one thread
stores it to the array with one bulk tensor copy per 128-byte column slab.

Why: the copy engine clips the box at the array's edges, so every tile, edge or not, takes one path
with no per-element bounds (store.py's edge tiles store element by element); a thread issues BN/W
copies where the pair stores are 32 or 64 instructions a thread; and the copies drain while the block
goes on, so a persistent kernel's next tile starts at once.

Layout: slab s holds columns sW.. of the tile (W = 128 bytes of elements), BM rows of 128 bytes, the
128-byte swizzle (16-byte chunk j of row r at chunk j ^ (r % 8)), slabs 1024-byte aligned, which is
the layout of a tensor map with box [BM, W] and swizzle 128. Each lane's pair (row, col), (row, col+1)
is 8 bytes (f32) or one packed 4-byte word (16-bit) inside one chunk.

Shared memory: a kernel that is not persistent reuses its GEMM loop's operand stages (each loop ends
with its copies landed, its last products waited for and a barrier), growing them if the tile is
larger. A persistent kernel's next tile refills those stages while the store drains, so its tile gets
a buffer of its own (scratch slot "tma_store"; the loop plans its stages around it, plan_staging), as
do TMA reduce-adds (slot "tma_reduce"); when those do not fit (staging_bytes), the kernel lowers again
without TMA copies and says so (kind "tma-store-fallback", driver.py _smem_fallback).

Ordering: every thread's writes, fence.proxy.async (generic-proxy writes before the async proxy's
reads), a barrier, then the leader's copies and commit. Before the staging tile is written, every
time (another round, tile, store or loop iteration may have used it last), the leader waits with
wait_group.read 0 and the block meets after it; once more at the kernel's end, before the block exits.

By warpgroup (warpgroup_split): where the tile program has two or more warpgroups that split N of a
reduce-add's tile (MmaLayout by_warpgroup: each holds whole slabs of its own, as the 8-warp fused
attention backward's dQ), each warpgroup stages and adds its slabs on its own, its thread 0 the
leader and a named barrier of its 128 threads (WG_BARRIER0 + g) in place of the block's, so a
warpgroup that is done need not wait for the other: two block barriers of the backward's step fewer.
Into a staging tile of its own (slot "tma_reduce_by_warpgroup"), so a warpgroup never rewrites a part
that another warpgroup's copies may still read (stores stage in reused operand stages, rings or a
persistent kernel's own tile, and keep the block's barriers); not under a warp-specialised split (its
consumers' 240 registers spill with the branches). Once a kernel splits, every warpgroup's thread 0
waits for its copies before it exits.

Stores by warpgroup rows (switch store_by_warpgroup, rows_split): where two or more warpgroups each hold
a block of whole rows of the stored tile (warps splitting M only: an m64 wgmma's rows a warpgroup, as the
consumer warpgroups of attention's 128-row tiles), each stages its rows as a tile of its own (slabs of its
rows, 128-byte swizzle, boxes of those rows) and its thread 0 stores them, between named barriers of its
128 threads: no barrier of the two, so under ping-pong a warpgroup that ends its tile first neither waits
for the other nor pulls it into step (the block-wide staging met both twice, which lost 0.5 % on attention's
forward, H100 2026-12-05). Into a staging tile of its own (slot "tma_store_by_warpgroup"): a warpgroup that
is done may not write operand stages the other still reads. Under warp specialisation too, whose consumer
warpgroups are the ones that run apart.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import BF16, F16, F32, I32, U32
from dsl.tile.lower.layout import LV, MmaLayout, c32, log2
from dsl.tile.lower.matmul.fragments import pack_pairs
from dsl.tile.lower.matmul.stages import SWIZZLE_ALIGN, aligned_base
from dsl.tile.lower.store import pairs_ok

ROW_BYTES = 128          # one swizzle row: a slab's row
MAX_BOX = 256            # TMA box extents
WG_BARRIER0 = 4          # named barriers 4 + g: warpgroup g's own epilogue (0: the block, 1: the consumers,
                         # 2 and 3: the ping-pong turns, matmul/pingpong.py)


def tma_store_ok(L, p, v: LV) -> bool:
    """The store of `v` into partition `p` goes through TMA: asked for (tma_store), sm_90, a pair store
    (store.pairs_ok: accumulator layout, 2-D partition of the value's dtype, rows 16-byte aligned) whose
    tile is whole slabs of at most MAX_BOX rows."""
    if not (L.tma_store and L.cc >= 90 and pairs_ok(L, p, v)):
        return False
    bm, bn = p.type.tile_shape
    es = v.dtype.itemsize
    if tuple(v.layout.shape) != (bm, bn) or bn * es % ROW_BYTES:
        return False
    # a persistent kernel may stage fewer slabs at a time (plan_staging): one slab must fit then
    return _fits(L, bm, ROW_BYTES // es if L.persistent else bn, es)


RESERVE_SLACK = 2048     # shared bytes left beside a persistent kernel's stages and staging tile
MIN_STAGES = 3           # what the sm_90 loop's pipeline needs (matmul/mma_sync.py)


def plan_staging(L, bm: int, bn: int, one: int, stages: int) -> int:
    """The operand stages of a persistent kernel's sm_90 GEMM loop (BM x BN accumulators, `one` bytes
    a stage, `stages` without TMA stores) beside the staging tile its TMA stores need, which it
    records (L.staging_slabs[(BM, BN)]: slabs staged at a time). The whole tile where that leaves
    MIN_STAGES stages, else the most slabs that do (stored in rounds: a 128 x 256 f32 tile, 128 KiB,
    goes in two rounds of 64 KiB); under staging_rounds, first the most slabs that leave all `stages`
    (the ring's depth before the store's); `stages` as it was where nothing is asked for or nothing
    fits (the stores then fall back)."""
    if not (L.tma_store and L.cc >= 90 and L.persistent):
        return stages
    from dsl.tile import ir as T
    sizes = [s.param.type.dtype.itemsize for s in T.walk_stmts(L.fn.body) if isinstance(s, T.Store)
             and tuple(s.param.type.tile_shape) == (bm, bn) and s.param.type.dtype in (F32, F16, BF16)]
    if not sizes or bn * max(sizes) % ROW_BYTES:
        return stages
    slabs = bn * max(sizes) // ROW_BYTES
    for least in ((stages,) if L.staging_rounds else ()) + (MIN_STAGES,):
        for group in (g for g in range(slabs, 0, -1) if slabs % g == 0):
            beside = min(stages, (L.opt_in - group * bm * ROW_BYTES - SWIZZLE_ALIGN - RESERVE_SLACK) // one)
            if beside >= least:
                L.staging_slabs[bm, bn] = group
                return beside
    return stages


def _tensor_map(L, p, box: tuple[int, int]) -> N.Expr:
    """The copies' tensor map of `p` (box [BM, W], 128-byte swizzle), one per array."""
    from dsl.tile.lower.matmul.tma import tensor_map_param
    if p.name not in L.store_maps:
        L.store_maps[p.name] = (tensor_map_param(L, p, box, ROW_BYTES), box)
    return L.store_maps[p.name][0]


BY_WARPGROUP = "tma_reduce_by_warpgroup"       # the staging slot of reduce-adds split by warpgroup
BY_WARPGROUP_ROWS = "tma_store_by_warpgroup"   # the staging slot of stores split by warpgroup rows
SLOTS = ("tma_store", "tma_reduce", BY_WARPGROUP, BY_WARPGROUP_ROWS)    # staging tiles of their own


def staging_bytes(L) -> int:
    """Shared bytes the kernel's staging tiles of their own take (operand stages reused not counted)."""
    return sum(4 * L.scratch_size.get(f"u32_{slot}", 0) for slot in SLOTS)


def _staging(L, nbytes: int, slot: str = "tma_store", reuse: bool = True, closing: bool = False) -> N.Expr:
    """The 1024-byte aligned shared address of the staging tile: where `reuse` and the kernel is not
    persistent (a loop is done with them), the GEMM loop's operand stages, or for a `closing` store
    (_closing) the TMA rings' stages (_ring_span); else scratch `slot` of its own."""
    if reuse and not L.persistent:      # every GEMM loop ends with its copies landed and its reads done
        for plan in L.mma_plans.values():
            if plan.operand_buf is not None:
                L.dyn_bytes = max(L.dyn_bytes, nbytes + SWIZZLE_ALIGN)
                return aligned_base(L, plan.operand_buf, "epi")
        rings = _ring_span(L, nbytes) if closing else None
        if rings is not None:
            return aligned_base(L, rings, "epi")
    return aligned_base(L, L.scratch(U32, (nbytes + SWIZZLE_ALIGN) // 4, slot=slot), "epi")


def _closing(L, s) -> bool:
    """Is `s` one of the kernel's closing statements: top-level, after its last loop and product (so
    every ring loop has drained: its copies landed, its products completed), in a kernel that is not
    persistent (whose next tile would refill the stages)?"""
    from dsl.tile import ir as T
    body = L.fn.body
    if L.persistent or not any(st is s for st in body):
        return False
    last = max((k for k, st in enumerate(body) if isinstance(st, T.For) or any(
        isinstance(x, T.Matmul) for x in T.body_exprs([st]))), default=-1)
    return next(k for k, st in enumerate(body) if st is s) > last


def _ring_span(L, nbytes: int) -> N.Expr | None:
    """The first of the TMA rings' stage buffers (matmul/ring.py) when they lie side by side and hold
    a staging tile of `nbytes`: a closing store stages there instead of in shared memory of its own,
    which the rings would leave idle (attention's backward stores dK and dV after its loop)."""
    rings = sorted((L.wgmma_stages[key].alloc.offset, L.stage_ends[key], L.wgmma_stages[key])
                   for key in L.wgmma_stages if key[0] == "ring")
    run = None                                  # (start, end, first buffer) of buffers side by side
    for start, end, buf in rings:
        align_end = None if run is None else -(-run[1] // SWIZZLE_ALIGN) * SWIZZLE_ALIGN
        run = (run[0], end, run[2]) if run is not None and start <= align_end else (start, end, buf)
        if run[1] - run[0] >= nbytes + SWIZZLE_ALIGN:
            return run[2]
    return None


def _fits(L, bm: int, bn: int, es: int) -> bool:
    """A BM x BN tile of `es`-byte elements is whole 128-byte slabs of at most MAX_BOX rows (a TMA box)
    whose staging tile fits the shared memory a block may opt into."""
    return bm % 8 == 0 and bm <= MAX_BOX and bn * es % ROW_BYTES == 0 and \
        bm * bn * es + SWIZZLE_ALIGN + RESERVE_SLACK <= L.opt_in


def _offset(row: N.Expr, col: N.Expr, bm: int, es: int, swap: bool = False, slabs: int = 0) -> N.Expr:
    """Byte offset of element (row, col) in the swizzled slabs; with `swap` (_swapped), of (row, col ^ 16)
    where the row is odd: its 16-byte chunk moves four over. With `slabs` (rows_split), the tile is one
    staging tile of `slabs` slabs of `bm` rows for each block of `bm` rows (a power of two), one after the other."""
    if slabs:
        block = N.BinOp("mul", N.BinOp("rshift", row, c32(log2(bm)), I32), c32(bm * slabs * ROW_BYTES), I32)
        return N.BinOp("add", block, _offset(N.BinOp("and_", row, c32(bm - 1), I32), col, bm, es, swap), I32)
    w = ROW_BYTES // es
    slab = N.BinOp("rshift", col, c32(log2(w)), I32)
    within = N.BinOp("mul", N.BinOp("and_", col, c32(w - 1), I32), c32(es), I32)
    turn = N.BinOp("and_", row, c32(7), I32)
    if swap:
        turn = N.BinOp("xor", turn, N.BinOp("lshift", N.BinOp("and_", row, c32(1), I32), c32(2), I32), I32)
    chunk = N.BinOp("lshift", turn, c32(4), I32)
    line = N.BinOp("add", N.BinOp("mul", slab, c32(bm * ROW_BYTES), I32), N.BinOp("mul", row, c32(ROW_BYTES), I32), I32)
    return N.BinOp("add", line, N.BinOp("xor", within, chunk, I32), I32)


def _slab_of(v: LV, i: int, w: int) -> int:
    """The slab of element i of accumulators whose warps split M only (wn 1): its column is the lane's
    (below 8) plus 8 nt, so the slab is known here."""
    lay = v.layout
    return ((i // 4) % lay.nt) * 8 // w


def reduce_ok(L, s, v: LV) -> bool:
    """tile.atomic_add of `v` into a region of a 2-D f32 tile.Atomic array goes through TMA reduce-adds:
    the region form, tma_store asked for, sm_90, accumulator pairs whose rows are 16-byte aligned,
    whole 128-byte slabs of at most MAX_BOX rows, one region shape per array."""
    from dsl.tile.types import chunked_rows
    p = s.param
    if not (s.op == "add" and s.region is not None and s.mask is None and L.tma_store and L.cc >= 90
            and isinstance(v.layout, MmaLayout) and p.type.ndim == 2 and v.dtype == F32 == p.type.dtype
            and chunked_rows(L.facts.get(p.name, {}), 4)):
        return False
    bm, bn = v.layout.shape
    if p.name in L.store_maps and L.store_maps[p.name][1] != (bm, ROW_BYTES // 4):
        return False
    return _fits(L, bm, bn, 4)


def reduce_tma(L, s, v: LV) -> None:
    """The region's atomic add by TMA reduce-adds of the staged tile, one per slab."""
    L.relied.add(s.param.name)
    bm, bn = v.layout.shape
    w = ROW_BYTES // 4
    split = warpgroup_split(L, v, bn // w)
    base = _staging(L, bm * bn * 4, slot=BY_WARPGROUP if split else "tma_reduce", reuse=False)
    row0, col0 = (L.tmp(N.BinOp("mul", N.Cast(L.scalar(e), I32), c32(t), I32), "epo")
                  for e, t in zip(s.region, (bm, bn)))
    _stage_and_copy(L, "cp.reduce.async.bulk.tensor.2d.add", _tensor_map(L, s.param, (bm, w)), v, base, bm, w,
                    row0, col0, bn // w, split)


def _swapped(L, v: LV) -> bool:
    """Do `v`'s f32 pairs stage with odd rows two fragments over (switch staging_swap)? A warp's store
    of fragment f puts rows l/4 = 0..7 of 8 columns, 32 bytes a row, two 16-byte chunks; in the swizzled
    slab, rows r and r ^ 1 put theirs on the same eight banks (chunks {2f, 2f+1} ^ r), so each half-warp
    phase takes two wavefronts. Where lanes of odd rows store fragment f ^ 2 (chunks four over), the four
    rows of a phase fill all eight chunks: one wavefront. Needs fragments in whole slabs (NT % 4 == 0);
    16-bit pairs are one word a lane, already conflict-free. Not under a warp-specialised split: the selects'
    registers spill under setmaxnreg's caps (ptxas: the persistent f32 GEMM 24 -> 32 bytes)."""
    lay = v.layout
    return (L.staging_swap and v.dtype.itemsize == 4 and isinstance(lay, MmaLayout) and lay.nt % 4 == 0
            and L.ws_tid is None)


def _write_pairs(L, v: LV, base: N.Expr, bm: int, slabs: range, rows: int = 0) -> None:
    """This thread's pairs in slabs `slabs` (all of them: any layout; fewer: warps split M only),
    at their offsets from the first of those slabs; with `rows` (rows_split), each block of `rows` rows
    in a staging tile of its own (_offset's `slabs`)."""
    es = v.dtype.itemsize
    w = ROW_BYTES // es
    coords = v.layout.coords
    whole = len(slabs) * w * es == v.layout.shape[1] * es
    shift = c32(slabs.start * w)
    swap = _swapped(L, v)
    if swap:      # rows differ from l/4 by even offsets (warp origins, m-tiles, + 8): its parity is theirs
        odd = L.tmp(N.Compare("ne", N.BinOp("and_", v.layout.lane_row, c32(1), I32), c32(0)), "epodd")
    for i in range(0, len(v.elems), 2):
        if not whole and _slab_of(v, i, w) not in slabs:
            continue
        row, col = coords[i]
        col = col if whole else N.BinOp("sub", col, shift, I32)
        off = _offset(row, col, rows, es, swap, len(slabs)) if rows else _offset(row, col, bm, es, swap)
        at = L.tmp(N.BinOp("add", base, N.Cast(off, U32), U32), "epa")
        if swap:        # element i + 8 is fragment f ^ 2's (f % 4 < 2), i - 8 the other way: same slab
            j = i ^ 8
            lo, hi = (L.tmp(N.IfExp(odd, v.elems[j + k], v.elems[i + k], F32), "eps") for k in (0, 1))
            L.asm("st.shared.v2.f32", [at, lo, hi])
        elif es == 4:
            L.asm("st.shared.v2.f32", [at, v.elems[i], v.elems[i + 1]])
        else:
            (word,) = pack_pairs(L, v.elems[i:i + 2], v.dtype)
            L.asm("st.shared.b32", [at, word])


def store_tma(L, p, v: LV, s=None) -> None:
    """The store of `v` into partition `p` by TMA; `s`: the tile statement (a closing store may stage
    in the rings' stages: _ring_span)."""
    L.relied.add(p.name)
    bm, bn = p.type.tile_shape
    w = ROW_BYTES // v.dtype.itemsize
    slabs = bn // w
    group = L.staging_slabs.get((bm, bn), slabs) if L.persistent and v.layout.wn == 1 else slabs
    rows = rows_split(L, v, bm, slabs, group)
    base = _staging(L, bm * group * ROW_BYTES, slot=BY_WARPGROUP_ROWS if rows else "tma_store", reuse=not rows,
                    closing=s is not None and _closing(L, s))
    ids = L.tile_ids(p)
    row0 = L.tmp(N.BinOp("mul", N.Cast(ids[0], I32), c32(bm), I32), "epr")
    col0 = L.tmp(N.BinOp("mul", N.Cast(ids[1], I32), c32(bn), I32), "epc")
    _stage_and_copy(L, "cp.async.bulk.tensor.2d.store", _tensor_map(L, p, (rows or bm, w)), v, base, bm, w, row0,
                    col0, group, rows=rows)


def rows_split(L, v: LV, bm: int, slabs: int, group: int) -> int:
    """The rows each warpgroup stages and stores on its own (switch store_by_warpgroup), or 0: where the tile
    program's two or more warpgroups each hold a block of whole rows of `v`'s tile (warps splitting M only,
    one per warp: warpgroup g rows [g R, (g + 1) R), bind_warps), R a power of two of at least 8 rows; staged
    at once or in rounds of `group` slabs (plan_staging), each warpgroup its rows of a round's slabs."""
    groups = L.T // 128
    lay = v.layout
    if not (L.store_by_warpgroup and groups >= 2 and L.T % 128 == 0 and L.cc >= 90 and isinstance(lay, MmaLayout)
            and not lay.by_warpgroup and lay.wn == 1 and lay.wm == 4 * groups and slabs % group == 0):
        return 0
    rows = bm // groups
    return rows if rows * groups == bm and rows >= 8 and rows & (rows - 1) == 0 else 0


def warpgroup_split(L, v: LV, slabs: int) -> bool:
    """Does each of the tile program's two or more warpgroups hold whole slabs of its own of `v`'s
    tile (warpgroups that split N, MmaLayout by_warpgroup), so that it may stage and copy them alone."""
    groups = L.T // 128
    lay = v.layout
    if groups < 2 or L.T % 128 or L.cc < 90 or not isinstance(lay, MmaLayout) or not lay.by_warpgroup:
        return False
    if L.ws_tid is not None:    # under setmaxnreg's 240 registers the warpgroups' branches spill (ptxas: 8
        return False            # -> 48-84 bytes in the fused backward's producer-warpgroup forms at D128)
    return lay.wn == groups and slabs % groups == 0 and lay.shape[1] // groups * v.dtype.itemsize % ROW_BYTES == 0


def _thread0(L) -> N.Expr:
    return L.tmp(N.Compare("eq", L.geo.tid, c32(0)), "epl")


def _leaders(L) -> N.Expr:
    """The threads that issue and wait for copies: thread 0, or each warpgroup's first thread once a
    warpgroup split staged (it has its staging slot: any of them may have copies of its own in flight)."""
    if L.scratch_size.get(f"u32_{BY_WARPGROUP}") or L.scratch_size.get(f"u32_{BY_WARPGROUP_ROWS}"):
        return L.tmp(N.Compare("eq", N.BinOp("and_", L.geo.tid, c32(127), I32), c32(0)), "epl")
    return _thread0(L)


def _stage_and_copy(L, family: str, tmap, v: LV, base, bm: int, w: int, row0, col0, group: int,
                    by_warpgroup: bool = False, rows: int = 0) -> None:
    """Stage `v` at `base` `group` slabs at a time and copy each round out with the bulk tensor copies of
    `family` (a store or a reduce-add) by the leader, who waits for them before the kernel ends; with
    `by_warpgroup` (warpgroup_split) each warpgroup its own slabs, with `rows` (rows_split) its own rows."""
    L.arch_specific = True
    if _drain not in L.after_tiles:
        L.after_tiles.append(_drain)
    if rows:
        _by_warpgroup_rows(L, family, tmap, v, base, rows, w, row0, col0, group)
        return
    if by_warpgroup:
        _by_warpgroup(L, family, tmap, v, base, bm, w, row0, col0)
        return
    leader = _thread0(L)                # block-wide staging: thread 0 even where a split slot exists
    for first in range(0, v.layout.shape[1] // w, group):
        # the copies of the staging tile's last use (an earlier round, tile, store or loop iteration)
        # have read it, and every thread is past that point (and every warpgroup past its last read
        # of reused operand stages): the leader's wait alone would let the others write early. (A
        # warpgroup split stages in a tile of its own: no other leader's copies read this one.)
        await_reads(L, leader)
        L.sync()
        _write_pairs(L, v, base, bm, range(first, first + group))
        L.asm("fence.proxy.async")
        L.sync()
        L.emit(N.If(leader, L.block_of(lambda first=first: _issue(L, family, tmap, base, bm, w, row0, col0,
                                                                  range(first, first + group))), []))


def _by_warpgroup(L, family: str, tmap, v: LV, base, bm: int, w: int, row0, col0) -> None:
    """Each warpgroup stages its slabs of the tile (its threads' pairs lie there) and its thread 0 copies
    them out, a named barrier of the warpgroup's 128 threads around the writes (_warpgroups_stage)."""
    mine = v.layout.shape[1] // w // (L.T // 128)

    def issue(g: int) -> None:
        first = N.BinOp("add", base, N.Const(g * mine * bm * ROW_BYTES, U32), U32)
        _issue(L, family, tmap, first, bm, w, row0, col0, range(g * mine, (g + 1) * mine))
    _warpgroups_stage(L, lambda: _write_pairs(L, v, base, bm, range(0, L.T // 128 * mine)), issue)


def _by_warpgroup_rows(L, family: str, tmap, v: LV, base, rows: int, w: int, row0, col0, group: int) -> None:
    """Each warpgroup stages its `rows` rows of the tile in a staging tile of its own (`group` slabs of
    its rows, one after the other from `base`) and its thread 0 stores them at its rows' origin; a tile of
    more slabs than `group` in rounds, each waiting for the last round's reads (_warpgroups_stage)."""
    for first in range(0, v.layout.shape[1] // w, group):
        mine = range(first, first + group)

        def issue(g: int, mine=mine) -> None:
            at = N.BinOp("add", base, N.Const(g * rows * group * ROW_BYTES, U32), U32)
            _issue(L, family, tmap, at, rows, w, N.BinOp("add", row0, c32(g * rows), I32), col0, mine)
        _warpgroups_stage(L, lambda mine=mine: _write_pairs(L, v, base, rows, mine, rows), issue)


def _warpgroups_stage(L, write, issue) -> None:
    """The staging protocol of warpgroups that stage and copy apart: each leader waits until its copies
    have read its staging tile, its warpgroup meets, `write()` puts every thread's pairs, and after the
    async proxy's fence each warpgroup meets again and its leader calls `issue(g)`. One branch a warpgroup
    (uniform in each warp), so barrier ids and offsets are immediates: no register live across a loop.
    Named barriers of the tile program's threads (from tid.x WS_PRODUCERS on when warp-specialised)."""
    from dsl.tile.lower.matmul.warp_specialised import WS_PRODUCERS
    groups = L.T // 128
    wg = L.tmp(N.BinOp("rshift", L.geo.tid, c32(7), I32), "epg")
    leader = _leaders(L)
    start = WS_PRODUCERS if L.ws_tid is not None else 0

    def each(emit) -> None:
        """emit(g) for warpgroup g, in an if / else-if chain on the warpgroup index."""
        rest: list = []
        for g in reversed(range(groups)):
            rest = [N.If(N.Compare("eq", wg, c32(g)), L.block_of(lambda g=g: emit(g)), rest)]
        L.emit(rest[0])

    def meet(g: int) -> None:
        L.asm("bar.sync.warpgroup", barrier=WG_BARRIER0 + g, first=start)
    await_reads(L, leader)
    each(meet)
    write()
    L.asm("fence.proxy.async")
    each(lambda g: (meet(g), L.emit(N.If(leader, L.block_of(lambda: issue(g)), []))))


def _wait_reads(L, leader: N.Expr) -> None:
    L.emit(N.If(leader, L.block_of(lambda: L.asm("cp.async.bulk.wait_group.read", keep=0)), []))


def _issue(L, family: str, tmap, base, bm: int, w: int, row0, col0, slabs: range) -> None:
    """The leader's copies (`family`) of slabs `slabs` (staged from `base` on) and their commit."""
    for k, s in enumerate(slabs):
        L.asm(family, [tmap, N.BinOp("add", col0, c32(s * w), I32), row0,
                                                N.BinOp("add", base, N.Const(k * bm * ROW_BYTES, U32), U32)])
    L.asm("cp.async.bulk.commit_group")


def await_reads(L, leader: N.Expr) -> None:
    """Before a staging tile is written: the leader waits until its copies have read it (the tile's last
    use; a separate hook from _drain's wait, so tests can take either away)."""
    _wait_reads(L, leader)


def _drain(L) -> None:
    """The leaders' wait for the block's last copies, before they exit."""
    _wait_reads(L, _leaders(L))
