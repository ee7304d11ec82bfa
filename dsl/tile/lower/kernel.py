"""Lowering of the tile IR onto the shared SIMT typed IR (dsl/ir/nodes.py), which the backend compiles.

One tile block = one CUDA block of T threads; the grid is 1-D (x = linear tile id, unravelled into
tile.bid(k) once at kernel start). Tile values are spread over threads in the layouts of
dsl/tile/lower/layout.py; elementwise ops are per element, relayouts (broadcast of distributed values,
transpose, reductions that cross threads, matmul) go through shared memory between barriers, and
reductions whose groups span whole thread sets use warp butterflies plus one shared-memory stage.
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field

from dsl.ir import nodes as N
from dsl.ir.types import BF16, BOOL, F16, F32, I32, INDEX, ArrayType, ScalarType
from dsl.tile import ir as T
from dsl.tile.switches import LOWERER_SWITCHES, SWITCHES
from dsl.tile.ptx.table import instruction
from dsl.tile.lower.anchors import early_element, emit_early
from dsl.tile.lower.barriers import redundant_barrier
from dsl.tile.lower.interior import lower_inside_and_edge
from dsl.tile.lower.indexing import ElementIndex
from dsl.tile.lower.layout import (LV, U_MAX, FragLayout, Geometry, MmaLayout, MmaRows, SharedTile, c32,
                             flat_of, iadd, imul, ir32, strides)
from dsl.tile.lower.frags import assign_shared, frag_layout
from dsl.tile.lower.matmul.swizzled import SwizzledA
from dsl.tile.lower.reduce import lower_reduce
from dsl.tile.lower.arrivals import ArrivalsLowering
from dsl.tile.lower.atomics import AtomicsLowering
from dsl.tile.lower.elementwise import ElementwiseLowering
from dsl.tile.lower.shapes import ShapeLowering
from dsl.tile.lower.runs import kernel_run, load_pairs, load_runs, store_runs
from dsl.tile.lower.tiles import num_blocks, order_run, tile_walk
from dsl.tile.lower.matmul.warp_specialised import WS_PRODUCERS
from dsl.tile.lower.shared import RELAYOUT_SLOT, opt_in_bytes, place_scratch, scratch_bytes, scratch_key
from dsl.tile.lower.errors import LoweringError
from dsl.tile.types import PartitionParamType, ScalarParamType


@dataclass
class BlockScratch:
    """A block's scratch keys taken before its first barrier (Lowerer.block_of, lazy_barriers)."""
    early: set[str] = field(default_factory=set)
    synced: bool = False


def set_switches(L, given: dict[str, Any]) -> None:
    """L.<name> for every lowering switch the Lowerer holds (switches.LOWERER_SWITCHES): the value given, else
    the switch table's default; a name that is no such switch is a TypeError (a caller's typo)."""
    unknown = sorted(set(given) - set(LOWERER_SWITCHES))
    if unknown:
        raise TypeError(f"Lowerer: unknown lowering switches {unknown} (dsl/tile/switches.py)")
    for name in LOWERER_SWITCHES:
        setattr(L, name, given.get(name, SWITCHES[name][2]))


class Lowerer(ElementwiseLowering, ShapeLowering, AtomicsLowering, ArrivalsLowering):
    def __init__(self, fn: T.TileFunction, threads: int, kernel_name: str,
                 facts: dict[str, dict] | None = None, max_stages: int = 3, cc: int = 0,
                 persistent: bool = False, tc_matmul: bool = False, layout_hints: dict | None = None,
                 pipelines: bool = True, rehinted: set[int] | None = None, **switches: Any) -> None:
        self.fn = fn
        self.T = threads
        self.kernel_name = kernel_name
        self.body: list[N.Stmt] = []
        self.stack: list[list[N.Stmt]] = [self.body]
        self.locals: list[N.Var] = []
        self.params: dict[int, N.Param] = {}
        self.vars: dict[int, tuple[str, list[N.Var]]] = {}
        self.scratch_allocs: dict[str, N.SharedAlloc] = {}
        self.scratch_size: dict[str, int] = {}
        self.counter = 0
        self.slow_paths: list = []       # dsl.perf.SlowPath records of this lowering
        self.facts = facts or {}
        self.max_stages = max_stages
        self.cc = cc                            # target compute capability (0: portable only)
        self.opt_in = opt_in_bytes(cc)          # shared bytes a block may opt into on that target
        self.persistent = persistent            # blocks loop over tiles (grid may be < tile count)
        self.tc_matmul = tc_matmul              # tile.matmul on the tensor cores (matmul/products.py)
        set_switches(self, switches)            # self.<switch> for each lowering switch (dsl/tile/switches.py)
        # lazy_barriers: a relayout's closing barrier left to the next one that comes (or to its buffer's next
        # writer, or the end of its block); consecutive relayouts alternate two buffers: scratch keys whose
        # readers may still be reading (no barrier since), in the block being lowered
        self.war_pending: set[str] = set()
        # per block being lowered (block_of): the scratch keys it takes before its first barrier, and whether
        # it has had one (a loop's next iteration enters with what the body left pending)
        self.block_scratch: list[BlockScratch] = [BlockScratch()]
        self.interior = False                   # lowering that copy now: in_array and the runs test nothing
        self.order_run: N.Expr | None = None    # tile.block_order's run length, once lowered (tiles.order_run)
        self.deferred = None                    # a batch being lowered: its products in flight, in issue order
        self.deferred_assigns = None            # and its statements' (variable, value), assigned after the waits
        self.lazy_assigns = None                # lazy_waits: (variable, value) of each product in self.deferred
        self.lazy_issue = False                 # lowering a lazy statement's product: it may stay in flight
        self.store_maps: dict[str, tuple] = {}   # array name -> (its TMA-copy tensor map parameter, box)
        self.staging_slabs: dict[tuple[int, int], int] = {}   # persistent TMA stores: slabs staged a round
        self.after_tiles: list = []             # emitters run once after the tile program (or a persistent loop)
        self.rings: dict[int, object] = {}      # loop id -> its ring Pipeline, planned before a ws split
        self.min_blocks: int | None = None      # .minnctapersm (set with setmaxnreg: warp_specialised.py)
        self.produced_a: dict[int, object] = {}  # A operands the producer warpgroup copies (matmul/produced_a.py)
        self.produced_tiles: N.Var | None = None    # the consumers' count of their tiles (its barriers' phases)
        # warp specialisation (gemm_pipeline "ws"): WS_PRODUCERS more threads issue the copies; the tile
        # program runs on the T threads after them (geo.tid = tid.x - WS_PRODUCERS); ws_tid is tid.x
        self.ws_tid: N.Expr | None = None       # set by lower_ws.bind_roles: the kernel is warp-specialised
        self.ws_consumer: N.Expr | None = None   # warpgroup index >= 1, through a shuffle: warp-uniform
        self.ws_group: N.Expr | None = None      # that warpgroup index (tid.x / 128)
        self.consumers_only = False             # barriers from here on: the T consumers' named barrier
        self.turns_spanned = False              # ping-pong turns open across the consumers' loops (pingpong.py)
        self.dyn_bytes = 0                      # dynamic shared bytes (tensor-core operand stages)
        self.arch_specific = False              # uses sm_90a-only instructions (wgmma)
        self.var_layouts: dict[int, object] = {}
        self.mma_plans: dict[int, object] = {}
        self.extra_shared: list[N.SharedAlloc] = []
        self.wgmma_stages: dict[tuple, N.Expr] = {}     # B stages of wgmma products (tc_operands.wgmma_stage)
        self.stage_ends: dict[tuple, int] = {}          # where each of those ends in the dynamic shared memory
        self.extra_params: list[N.Param] = []  # appended after the tile parameters (TMA tensor maps)
        self.relied: set[str] = set()          # params whose alignment/divisibility facts were used
        self._lane_warp: tuple[N.Expr, N.Expr] | None = None
        self.frags: dict[tuple, FragLayout] = {}    # one bound fragment layout per key (frag_layout)
        self.assigned_once: set[int] = set()      # ids of the locals tmp() made (one assignment each)
        self.narrowings: dict[int, N.Expr] = {}   # 16-bit local id -> the f32 local it rounds (tmp)
        self.prologue: list[N.Stmt] = []         # kernel-start statements emitted from anywhere
        self.layout_hints = dict(layout_hints or {})    # var id -> fragment layout key (see lower())
        self.new_hints: dict[int, tuple] = {}    # what this lowering learnt for the next one
        self.rehinted: set[int] = rehinted if rehinted is not None else set()   # vars whose hint changed once (lower())
        self.pipelined: dict[int, object] = {}   # load id -> its loop's Pipeline (pipeline.py)
        self.pipelines = pipelines               # may loops copy their products' operands ahead
        self.pipelined_loops = 0
        self.assignments: dict[int, int] = {}    # var id -> assignments in the program text
        for st in T.walk_stmts(fn.body):
            if isinstance(st, T.Assign):
                self.assignments[id(st.var)] = self.assignments.get(id(st.var), 0) + 1
        self.cur_loc = fn.loc                  # the tile statement being lowered (line tables)
        self.vec_wanted = kernel_run(fn)       # the run the dtypes ask for, whatever the facts allow

    # ------------------------------------------------------------------------------ plumbing
    def emit(self, s: N.Stmt) -> None:
        if s.loc is N.NOLOC:              # every SIMT statement maps to the tile line it lowers
            s.loc = self.cur_loc
        self.stack[-1].append(s)

    def new_var(self, t: ScalarType, hint: str = "t") -> N.Var:
        self.counter += 1
        v = N.Var(f"{hint}{self.counter}", t)
        self.locals.append(v)
        return v

    def snapshot(self, e: N.Expr) -> N.Expr:
        """`e`'s value now, in a fresh local (also a variable read), for a lazy value made later."""
        if isinstance(e, (N.Const, N.ParamRef)):
            return e
        v = self.new_var(e.type, "snap")  # type: ignore[arg-type]
        self.emit(N.Assign(v, e))
        return N.ReadVar(v)

    def tmp(self, e: N.Expr, hint: str = "t") -> N.Expr:
        """Materialise `e` in a fresh local (leaves stay inline). A local assigned here is assigned
        once; a 16-bit one that narrows such an f32 local records it (narrowed_from)."""
        if isinstance(e, (N.Const, N.ReadVar, N.ParamRef)):
            return e
        narrows = isinstance(e, N.Cast) and e.type in (F16, BF16) and e.operand.type == F32
        if narrows and not (isinstance(e.operand, N.ReadVar) and id(e.operand.var) in self.assigned_once):
            e = N.Cast(self._fresh(e.operand, "n"), e.type, e.loc)  # the f32 value now, in a local of its own
        out = self._fresh(e, hint)
        if narrows:
            self.narrowings[id(out.var)] = e.operand
        return out

    def _fresh(self, e: N.Expr, hint: str) -> N.ReadVar:
        """`e` (a variable read too) in a fresh local, recorded as assigned once."""
        v = self.new_var(e.type, hint)  # type: ignore[arg-type]
        self.emit(N.Assign(v, e))
        self.assigned_once.add(id(v))
        return N.ReadVar(v)

    def narrowed_from(self, e: N.Expr) -> N.Expr | None:
        """The f32 local a 16-bit local was rounded from (both made by tmp, so both still hold the
        values of that rounding wherever the 16-bit one is read), else None."""
        return self.narrowings.get(id(e.var)) if isinstance(e, N.ReadVar) else None

    def block_of(self, stmts_fn) -> list[N.Stmt]:
        """The statements `stmts_fn` emits, as a nested block (a loop body, a branch). Scratch readers it
        leaves without a barrier get one at its end: what follows the block (the next iteration, or code after
        a branch not taken) assumes only what was pending before it."""
        out: list[N.Stmt] = []
        saved = set(self.war_pending)
        self.stack.append(out)
        self.block_scratch.append(BlockScratch())
        stmts_fn()
        if self.war_pending & self.block_scratch[-1].early:    # its next iteration would write them unordered
            self.sync()
        self.block_scratch.pop()
        self.stack.pop()
        self.war_pending |= saved               # the block run or not
        return out

    def scratch(self, dtype: ScalarType, n: int, slot: int | str = 0) -> N.Expr:
        """Shared scratch buffer of >= n elements of `dtype` (one per (dtype, slot), sized at the
        end). Every use is bracketed by barriers, so uses of one buffer never overlap in time."""
        key = scratch_key(dtype, slot)
        if key in self.war_pending:             # an earlier relayout's threads may still read it
            self.sync()
        for block in self.block_scratch:
            if not block.synced:
                block.early.add(key)
        st = I32 if dtype == BOOL else dtype
        alloc = self.scratch_allocs.get(key)
        if alloc is None:
            alloc = N.SharedAlloc(f"scratch_{key}",
                                  ArrayType(st, 1, writable=True, space="shared", shape=(1,)))
            self.scratch_allocs[key] = alloc
        self.scratch_size[key] = max(self.scratch_size.get(key, 0), n)
        return N.SharedArray(alloc)

    def smem_store(self, buf: N.Expr, idx, value: N.Expr) -> None:
        if value.type == BOOL:
            value = N.Cast(value, I32)
        self.emit(N.Store(buf, [N.Cast(ir32(idx), INDEX)], value, "unchecked", 0))

    def smem_load(self, buf: N.Expr, idx, dtype: ScalarType) -> N.Expr:
        st = buf.type.dtype  # type: ignore[attr-defined]
        ld: N.Expr = N.Load(buf, [N.Cast(ir32(idx), INDEX)], "none", 0, st)
        return N.Cast(ld, BOOL) if dtype == BOOL else ld

    ws = property(lambda self: self.ws_tid is not None, doc="Warp-specialised (lower_ws.ws_loop took it).")

    def sync(self) -> None:
        """A block barrier (the consumers' named barrier after a warp-specialised split), unless one
        already ends the current block with nothing between that a barrier orders (barriers.py)."""
        self.war_pending.clear()                # every thread's earlier reads are done past it
        self.block_scratch[-1].synced = True
        if redundant_barrier(self.stack[-1], named=self.consumers_only):
            return
        if self.consumers_only:      # warp-specialised, after the split: the consumer threads only
            self.asm("bar.sync.named", barrier=1, threads=self.T, first=WS_PRODUCERS)
        else:
            self.emit(N.SyncThreads())

    def asm(self, family: str, args: list | None = None, **params) -> None:
        """An inline PTX statement of `family` (dsl/tile/ptx/table.py) with side effects and no
        result (copies, barriers, fences)."""
        self.emit(N.ExprStmt(instruction(family, args or [], **params)))

    def guarded(self, cond, stmts_fn) -> None:
        if cond is True:
            stmts_fn()
            return
        self.emit(N.If(cond, self.block_of(stmts_fn), []))

    # ------------------------------------------------------------------------------ entry
    def lower(self) -> N.Function:
        fn = self.fn
        for p, q in zip(fn.params, lowered_params(fn, self.facts)):
            self.params[id(p)] = q
        tid = self.new_var(I32, "tid")
        from dsl.tile.lower.matmul.warp_specialised import bind_roles
        from dsl.tile.lower.matmul.ws_split import ws_loop
        ws_at = ws_loop(self)
        if ws_at is not None:
            bind_roles(self, tid)
        else:
            self.emit(N.Assign(tid, N.Cast(N.Special("tid.x"), I32)))
        self.geo = Geometry(self.T, N.ReadVar(tid), kernel_run(fn, self.facts))
        prologue_at = len(self.body)
        nb = num_blocks(self)
        lin = self.tmp(N.Cast(N.Special("ctaid.x"), I32), "bid")
        self.order_run = order_run(self)        # tile.block_order's run length, before any tile is chosen
        from dsl.tile.lower.matmul.mma_sync import plan_all
        plan_all(self, fn.body, self.max_stages)
        walk = tile_walk(self, nb, lin)
        if ws_at is not None and id(fn.body[ws_at]) not in self.mma_plans:     # a loop fed by a TMA ring
            from dsl.tile.lower.matmul.ring_ws import lower_split
            lower_split(self, ws_at, walk)      # each role walks the tiles (the producer runs ahead)
        else:
            walk(lambda: self._tile_program(ws_at))
        for finish in self.after_tiles:
            finish(self)
        self.body[prologue_at:prologue_at] = self.prologue
        place_scratch(self)         # sizes; static, or views of the dynamic shared memory (shared.py)
        return N.Function(self.kernel_name, list(self.params.values()) + self.extra_params, N.VOID, self.body, True,
                          fn.loc, locals=self.locals,
                          shared=list(self.scratch_allocs.values()) + self.extra_shared,
                          exact_block=(self.T + (WS_PRODUCERS if self.ws else 0), 1, 1), boundscheck=False,
                          min_blocks=self.min_blocks, **launch_fields(fn.launch))

    def _tile_program(self, ws_at: int | None) -> None:
        """The tile program for one tile; warp-specialised (a GEMM loop: a ring loop's split is
        ring_ws.lower_split's), the GEMM loop splits the roles and what follows it is the consumers'."""
        body = self.fn.body
        if ws_at is None:
            if not (self.interior_tiles and not self.persistent and lower_inside_and_edge(self, body)):
                self.stmts(body)
            return
        self.ws_tail = body[ws_at + 1:]     # the GEMM loop's consumer role may take it (matmul/tma.py)
        self.stmts(body[:ws_at + 1])
        if self.ws_tail is not None:
            self.emit(N.If(self.ws_consumer, self.block_of(lambda: self.stmts(body[ws_at + 1:])), []))
        self.consumers_only = False     # a persistent kernel's next tile starts with every thread

    def global_index(self, tile_index: N.Expr, tile_size: int, coord) -> N.Expr:
        """tile_index * tile_size + coord in 64-bit (arrays may exceed 2^31 elements)."""
        base = N.BinOp("mul", N.Cast(tile_index, INDEX), N.Const(tile_size, INDEX), INDEX)
        if isinstance(coord, int) and coord == 0:
            return self.tmp(base, "gi")
        c = N.Const(coord, INDEX) if isinstance(coord, int) else N.Cast(coord, INDEX)
        return self.tmp(N.BinOp("add", base, c, INDEX), "gi")

    def in_array(self, arr: N.Expr, idx: list[N.Expr], start: N.Expr | None = None,
                 signed: bool = False, always: bool = False) -> N.Expr | None:
        """`start` and idx[k] < len(arr, k) on every axis (and >= 0 when `signed`: an index that may be
        negative); None when there is nothing to test. In the copy of an inside block (interior.py), only
        `start` (true when that is None: callers build selects on it), unless `always`: an index that is not
        the block's tile (an arrival's counter element) is tested there too."""
        cond = start
        if self.interior and not always:
            return N.Const(True, BOOL) if cond is None else cond
        for k, g in enumerate(idx):
            ok: N.Expr = N.Compare("lt", g, N.ArrayLen(arr, k))
            if signed:
                ok = N.Logical("and", N.Compare("ge", g, N.Const(0, INDEX)), ok)
            cond = ok if cond is None else N.Logical("and", cond, ok)
        return cond

    def store_masked(self, arr: N.Expr, idx: list[N.Expr], e: N.Expr, own, loc) -> None:
        """Store `e` at `idx` where this thread owns it (`own`: True or a condition) and it is inside `arr`."""
        cond = self.in_array(arr, idx, None if own is True else own)
        st = N.Store(arr, idx, e, "unchecked", 0, loc)
        self.emit(N.If(cond, [st], []) if cond is not None else st)

    def in_prologue(self, fn):
        """Run `fn` emitting into the kernel's prologue (right after the thread id), so what it binds
        is defined everywhere, whichever loop or branch first asked for it."""
        self.stack.append(self.prologue)
        try:
            return fn()
        finally:
            self.stack.pop()

    def lane_warp(self) -> tuple[N.Expr, N.Expr]:
        """(lane id, warp id) locals, computed once at kernel start."""
        if self._lane_warp is None:
            self._lane_warp = self.in_prologue(lambda: (
                self.tmp(N.BinOp("and_", self.geo.tid, c32(31), I32), "lane"),
                self.tmp(N.BinOp("rshift", self.geo.tid, c32(5), I32), "warp")))
        return self._lane_warp

    def frag_layout(self, key: tuple) -> FragLayout:
        """The one fragment layout of `key` in this kernel, bound in the prologue (frags.py)."""
        got = self.frags.get(key)
        return got if got is not None else frag_layout(self, key)

    def rows_of(self, acc: MmaLayout) -> MmaRows:
        """The row-vector layout of accumulators `acc` (warps split M only)."""
        self.frags.setdefault(acc.key, acc)
        return self.frag_layout(("R", acc.key))  # type: ignore[return-value]

    def smem_bytes(self) -> int:
        """Static shared bytes of the scratch buffers (place_scratch may have moved them all to dynamic)."""
        return scratch_bytes(self, dynamic=False)

    def pref(self, p: T.TParam) -> N.ParamRef:
        return N.ParamRef(self.params[id(p)])

    def tile_ids(self, p: T.TParam) -> list[N.Expr]:
        """The block's tile coordinates in partition `p`: the grid's, or its own by tile number."""
        return self.part_ids.get(id(p), self.bids)

    # ------------------------------------------------------------------------------ statements
    def stmts(self, body: list[T.TStmt]) -> None:
        outer = self.cur_loc
        from dsl.tile.lower.matmul import batches
        lazy = batches.lazy_scope(self)
        batched = {} if lazy is not None else batches.plan(self, body)
        for s in body:
            self.cur_loc = s.loc if s.loc is not N.NOLOC else outer
            if lazy is not None:
                batches.before(self, s)     # products in flight whose results `s` reads are waited for
            if lazy is not None and batches.lazy_statement(self, s):
                batches.issue(self, s)
            elif id(s) in batched:
                batches.lower(self, batched, s)
            elif isinstance(s, T.Assign) and self.layout_hints.get(id(s.var), ("",))[0] == "S":
                assign_shared(self, s.var, s.value)
            elif isinstance(s, T.Assign) and self.layout_hints.get(id(s.var), ("",))[0] == "W":
                from dsl.tile.lower.matmul.shared_a import assign_swizzled
                assign_swizzled(self, s.var, s.value)
            elif isinstance(s, T.Assign):
                self.assign(s.var, self.expr(s.value))
            elif isinstance(s, T.Store):
                self.store(s)
            elif isinstance(s, T.Scatter):
                self.scatter(s)          # atomics and scatter (dsl/tile/lower/atomics.py)
            elif isinstance(s, T.StoreAt):
                self.store_at(s)         # an arrival's owned tile (dsl/tile/lower/arrivals.py)
            elif isinstance(s, T.For) and id(s) in self.mma_plans:
                from dsl.tile.lower.matmul.mma_sync import lower_loop
                lower_loop(self, self.mma_plans[id(s)])
            elif isinstance(s, T.For):
                from dsl.tile.lower.loops import lower_for
                lower_for(self, s)
            elif isinstance(s, T.If):
                cond = self.scalar(s.cond)
                then = self.block_of(lambda: self.stmts(s.then))
                else_ = self.block_of(lambda: self.stmts(s.else_))
                self.emit(N.If(cond, then, else_, s.loc))
            elif isinstance(s, T.LaunchStmt):       # the SIMT model's node (dsl/ir/launch_nodes.py)
                from dsl.ir.launch_nodes import LaunchOp
                self.emit(N.ExprStmt(LaunchOp(s.op, s.loc), s.loc))
            else:  # pragma: no cover
                raise LoweringError(f"unknown tile statement {type(s).__name__}")
        if lazy is not None:
            batches.end_scope(self, lazy)
        self.cur_loc = outer

    def scalar(self, e: T.TExpr) -> N.Expr:
        v = self.expr(e)
        assert v.layout == "U" and len(v.elems) == 1
        return self.tmp(v.elems[0])

    def assign(self, tv: T.TVar, v: LV) -> None:
        got = self.vars.get(id(tv))
        if got is None and v.layout == "L" and v.pure and self.assignments.get(id(tv)) == 1 \
                and id(tv) not in self.var_layouts and id(tv) not in self.layout_hints:
            self.vars[id(tv)] = ("L", v)        # index arithmetic: made where it is used, in its layout
            return
        if got is None:
            layout = self.var_layouts.get(id(tv))
            if layout is None and id(tv) in self.layout_hints:
                layout = self.frag_layout(self.layout_hints[id(tv)])
            if layout is None:
                layout = v.layout
                if layout == "L" and v.size == 1:
                    layout = "U"            # one element (a row's statistic): each thread loads it, no broadcast
                elif layout == "L" or (layout == "U" and v.size > U_MAX):
                    layout = "D"
            vs = [self.new_var(v.dtype, tv.name) for _ in range(self.count(layout, v.size))]
            self.vars[id(tv)] = (layout, vs)
            got = (layout, vs)
        layout, vs = got
        if isinstance(v.layout, FragLayout) and v.layout is not layout:
            self.hint(tv, v.layout)         # a loop that carries it in registers keeps it there next time
        v = self.to_layout(v, layout)
        vals = [self.tmp(e) if not isinstance(e, N.Const) else e for e in v.elems]
        for var, e in zip(vs, vals):
            self.emit(N.Assign(var, e))

    def hint(self, tv: T.TVar, layout: FragLayout | tuple) -> None:
        """Ask the next lowering (lower() runs until nothing new is learnt) to keep variable `tv` in
        `layout` (a fragment layout, or the key ("S", shape) of a SharedTile): the first hint wins, but for
        one change of accumulators (a "C" key of the same shape, once a variable): a product's own layout may
        settle a lowering later than the variable carrying its result was hinted (dQ moves from mma.sync to
        warpgroup MMA once dS^T is hinted into shared memory), and the variable follows it."""
        key = layout if isinstance(layout, tuple) else layout.key
        if id(tv) in self.new_hints or id(tv) in self.var_layouts:
            return
        old = self.layout_hints.get(id(tv))
        if old is None:
            self.new_hints[id(tv)] = key
        elif old != key and old[0] == key[0] == "C" and old[1] == key[1] and id(tv) not in self.rehinted:
            self.rehinted.add(id(tv))
            self.new_hints[id(tv)] = key

    def count(self, layout, size: int) -> int:
        if layout == "U":
            return size
        if isinstance(layout, FragLayout):
            return layout.per_thread  # type: ignore[attr-defined]
        return self.geo.per_thread(size)

    def store(self, s: T.Store) -> None:
        from dsl.tile.lower.store import pairs_ok, store_pairs
        from dsl.tile.lower.store_tma import store_tma, tma_store_ok
        if s.chunk is not None:               # a sub-tile of the block's own tile
            from dsl.tile.lower.chunks import store_chunk
            return store_chunk(self, s)
        v = self.expr(s.value)
        if not isinstance(v.layout, MmaLayout):
            v = self.to_layout(v, "D")
        p = s.param
        ts = p.type.tile_shape  # type: ignore[union-attr]
        arr = self.pref(p)
        ids = self.tile_ids(p)
        if v.layout == "D" and store_runs(self, p, v, lambda: [self.global_index(ids[k], ts[k], 0)
                                                              for k in range(len(ts))], s.loc):
            return None                       # a vector access per run (dsl/tile/lower/runs.py)
        own = self.geo.owner(v.size) if v.layout == "D" else True

        def checked() -> None:
            for e, coords in zip(v.elems, self.coords_of(v.layout, ts)):
                idx = [self.global_index(ids[k], ts[k], c) for k, c in enumerate(coords)]
                self.store_masked(arr, idx, e, own, s.loc)
        if tma_store_ok(self, p, v):
            store_tma(self, p, v, s)              # the GEMM epilogue by TMA (dsl/tile/lower/store_tma.py)
        elif pairs_ok(self, p, v):
            store_pairs(self, p, v, checked)      # the GEMM epilogue (dsl/tile/lower/store.py)
        else:
            checked()

    # ------------------------------------------------------------------------------ layouts
    def coords_of(self, layout, shape: tuple[int, ...]) -> list[list]:
        """Tile coordinates of each element a thread holds in `layout`."""
        size = 1
        for x in shape:
            size *= x
        if layout == "D":
            return [self.geo.coords(shape, r) for r in range(self.geo.per_thread(size))]
        if isinstance(layout, FragLayout):
            return layout.coords_for(shape)  # type: ignore[attr-defined]
        st = strides(shape)
        return [[(i // a) % b for a, b in zip(st, shape)] for i in range(size)]

    def materialize(self, v: LV, layout) -> LV:
        assert v.make is not None
        made = None
        if v.by_layout is not None and (isinstance(layout, FragLayout) or layout == "D"):
            made = v.by_layout(layout)
        if made is None:
            made = v.make(self.coords_of(layout, v.shape))
        elems = [e if isinstance(e, N.Const) else self.tmp(e) for e in made]
        return LV(layout, v.shape, v.dtype, elems)

    def to_layout(self, v: LV, layout) -> LV:
        if v.layout is layout or v.layout == layout and isinstance(layout, str):
            return v
        if isinstance(v.layout, SwizzledA):      # a wgmma A operand's swizzle atoms (matmul/shared_a.py)
            return LV(layout, v.shape, v.dtype, v.layout.read(self, self.coords_of(layout, v.shape)))
        if isinstance(v.layout, SharedTile):     # read from where it is kept
            st = v.layout
            return LV(layout, v.shape, v.dtype, [self.tmp(self.smem_load(st.buf, iadd(imul(c[0], st.stride), c[1]), v.dtype))
                                                 for c in self.coords_of(layout, v.shape)])
        if v.layout == "L":
            if layout == "U" and v.size > U_MAX:
                raise LoweringError(f"internal: replicating a tile of {v.size} elements")
            return self.materialize(v, layout)
        if layout == "U":
            return self.replicate(v)
        return self.gather(v, v.shape, lambda coords: flat_of(coords, v.shape), layout)

    def concrete(self, v: LV) -> LV:
        """A value with elements: lazy values become D; U and mma layouts stay."""
        return self.to_layout(v, "D") if v.layout == "L" or isinstance(v.layout, (SharedTile, SwizzledA)) else v

    def replicate(self, v: LV) -> LV:
        """D → U: through shared memory, every thread reads every element."""
        if v.size > U_MAX:
            raise LoweringError(f"internal: replicating a tile of {v.size} elements")
        buf, key = self.relayout_scratch(v)
        elems = [self.tmp(self.smem_load(buf, i, v.dtype)) for i in range(v.size)]
        self.readers_done(key)
        return LV("U", v.shape, v.dtype, elems)

    def relayout_scratch(self, v: LV) -> tuple[N.Expr, str]:
        """v written to a relayout's scratch buffer (and its key): under lazy_barriers the one of two whose
        last readers are known done, so back-to-back relayouts need no barrier between them."""
        slot: int | str = 0
        if self.lazy_barriers and scratch_key(v.dtype, 0) in self.war_pending:
            slot = RELAYOUT_SLOT
        return self.write_scratch(v, slot), scratch_key(v.dtype, slot)

    def readers_done(self, key: str) -> None:
        """The threads that read scratch buffer `key` are done with it before anyone writes it again: a
        barrier now, or under lazy_barriers the next one that comes (scratch, sync, block_of)."""
        if self.lazy_barriers:
            self.war_pending.add(key)
        else:
            self.sync()

    def write_scratch(self, v: LV, slot: int = 0) -> N.Expr:
        v = self.concrete(v)
        buf = self.scratch(v.dtype, v.size, slot)
        if v.layout == "U":
            def w():
                for i, e in enumerate(v.elems):
                    self.smem_store(buf, i, e)
            self.guarded(N.Compare("eq", self.geo.tid, c32(0)), w)
        elif isinstance(v.layout, FragLayout):
            lay = v.layout

            def w3():
                for e, coords in zip(v.elems, self.coords_of(lay, v.shape)):
                    self.smem_store(buf, flat_of(coords, v.shape), e)
            self.guarded(True if lay.owner is None else lay.owner, w3)
        else:
            def w2():
                for r, e in enumerate(v.elems):
                    self.smem_store(buf, self.geo.flat(v.size, r), e)
            self.guarded(self.geo.owner(v.size), w2)
        self.sync()
        return buf

    def gather(self, src: LV, shape: tuple[int, ...], index_of, target="D") -> LV:
        """A `target`-layout value of `shape` whose element at coords c is src's flat element
        index_of(c)."""
        idxs = [index_of(c) for c in self.coords_of(target, shape)]
        return LV(target, shape, src.dtype, self.gather_elems(src, idxs))

    def gather_elems(self, src: LV, idxs: list) -> list[N.Expr]:
        src = self.concrete(src)
        if src.layout == "U" and all(isinstance(i, int) for i in idxs):
            return [src.elems[i] for i in idxs]  # type: ignore[index]
        if src.layout == "U" and all(_same(x, src.elems[0]) for x in src.elems):
            return [src.elems[0]] * len(idxs)   # one value (a scalar broadcast): nothing to index
        if src.layout == "U" and len(src.elems) <= 4:
            out = []
            for i in idxs:
                if isinstance(i, int):
                    out.append(src.elems[i])
                    continue
                ix = self.tmp(i, "ix")
                e = src.elems[-1]
                for j in range(len(src.elems) - 2, -1, -1):
                    e = N.IfExp(N.Compare("eq", ix, c32(j)), src.elems[j], e, src.dtype)
                out.append(self.tmp(e))
            return out
        buf, key = self.relayout_scratch(src)
        out = [self.tmp(self.smem_load(buf, i, src.dtype)) for i in idxs]
        self.readers_done(key)
        return out

    def unify(self, *vals: LV) -> list[LV]:
        if all(v.layout == "U" for v in vals):
            return list(vals)
        target: object = "D"
        for v in vals:
            if isinstance(v.layout, FragLayout):
                target = v.layout
                break
        if target == "D" and all(v.layout in ("U", "L") for v in vals):
            return list(vals)           # index arithmetic, constants and loads stay lazy (_elementwise)
        return [self.to_layout(v, target) for v in vals]

    # ------------------------------------------------------------------------------ expressions
    def expr(self, e: T.TExpr) -> LV:
        method = getattr(self, "x_" + type(e).__name__, None)
        if method is None:
            raise LoweringError(f"{e.loc}: tile operation {type(e).__name__} is not lowered to the GPU yet")
        return method(e)

    def x_Const(self, e: T.Const) -> LV:
        return LV("U", (), e.type.dtype, [N.Const(e.value, e.type.dtype)])

    def x_Full(self, e: T.Full) -> LV:
        c = N.Const(e.value, e.type.dtype)
        if e.type.size <= 1:
            return LV("U", e.type.shape, e.type.dtype, [c])
        return LV("L", e.type.shape, e.type.dtype, [], make=lambda cl: [c] * len(cl), pure=True)

    def x_ScalarArg(self, e: T.ScalarArg) -> LV:
        return LV("U", (), e.type.dtype, [self.pref(e.param)])

    def x_Read(self, e: T.Read) -> LV:
        layout, vs = self.vars[id(e.var)]
        if layout == "L":
            return vs  # type: ignore[return-value]
        if isinstance(layout, (SharedTile, SwizzledA)):
            return LV(layout, e.type.shape, e.type.dtype, [])
        return LV(layout, e.type.shape, e.type.dtype, [N.ReadVar(v) for v in vs])

    def x_BlockId(self, e: T.BlockId) -> LV:
        return LV("U", (), I32, [(self.bids if e.param is None else self.tile_ids(e.param))[e.axis]])

    def x_LaunchValue(self, e: T.LaunchValue) -> LV:
        """tile.cluster_rank() / cluster_size(): the cluster registers (the tile grid is 1-D)."""
        reg = {"cluster.rank": "cluster_ctarank", "cluster.size": "cluster_nctarank"}[e.op]
        return LV("U", (), I32, [self.tmp(N.Cast(N.Special(reg), I32), "crank")])

    def x_NumBlocks(self, e: T.NumBlocks) -> LV:
        counts = self.nblocks if e.param is None else self.part_counts[id(e.param)]
        return LV("U", (), I32, [counts[e.axis]])

    def x_ArrayDim(self, e: T.ArrayDim) -> LV:
        return LV("U", (), I32, [self.tmp(N.Cast(N.ArrayLen(self.pref(e.param), e.axis), I32))])

    def x_Arange(self, e: T.Arange) -> LV:
        return LV("L", e.type.shape, I32, [], make=lambda cl: [ir32(c[0]) for c in cl], pure=True)

    def x_Load(self, e: T.Load) -> LV:
        shape = e.type.shape
        dt = e.type.dtype
        arr = self.pref(e.param)
        early = self.early_loads and not arr.type.writable and dt.itemsize in (4, 8)
        # early: the indices are made with the elements, so that emit_early can move both up together
        base = None if early else [self.scalar(i) for i in e.index]

        def index() -> list[N.Expr]:
            return base if base is not None else [self.scalar(i) for i in e.index]

        def elements(coords_list: list) -> list[N.Expr]:
            base = index()
            out = []
            at = ElementIndex(self, base, shape, coords_list)   # elements of one lane expression share a base
            for coords in coords_list:
                gidx, cond = at.element(arr, base, shape, coords)
                if early:                       # an access the compiler keeps where emit_early puts it
                    out.append(early_element(self, arr, gidx, cond, e.padding, dt))
                    continue
                ld = N.Load(arr, gidx, "none", 0, dt, e.loc)
                out.append(self.tmp(N.IfExp(cond, ld, N.Const(e.padding, dt), dt), "ld"))
            return out

        def make(coords_list: list) -> list[N.Expr]:
            return emit_early(self, lambda: elements(coords_list)) if early else elements(coords_list)
        return LV("L", shape, dt, [], make=make, by_layout=lambda lay: load_runs(self, e, index()) if lay == "D" else
                  load_pairs(self, e, index(), lay))

    # ------------------------------------------------------------------------------ reductions
    def x_Reduce(self, e: T.Reduce) -> LV:
        return lower_reduce(self, e)

    def x_Matmul(self, e: T.Matmul) -> LV:
        from dsl.tile.lower.matmul.portable import lower_matmul
        return lower_matmul(self, e)


def _same(a: N.Expr, b: N.Expr) -> bool:
    """The same value: one expression, or equal constants."""
    return a is b or isinstance(a, N.Const) and isinstance(b, N.Const) and a.value == b.value and a.type == b.type


def launch_fields(launch) -> dict:
    """The SIMT Function's launch features from the tile kernel's (dsl/tile/launch.py)."""
    if launch is None:
        return {}
    return {"pdl": launch.pdl, "cooperative": launch.cooperative, "cluster": launch.cluster}


def lowered_params(fn: T.TileFunction, facts: dict[str, dict] | None = None) -> list[N.Param]:
    """The SIMT IR parameters of a tile kernel (constants are not parameters): arrays read-only,
    partitions writable where the kernel stores them (one only loaded, a grid over an input, is
    read-only), tile.Atomic arrays writable, with the launch facts' layout and alignment; scalars as
    they are."""
    facts = facts or {}
    stored = T.stored_partitions(fn)
    out = []
    for p in fn.params:
        ty = p.type
        if isinstance(ty, ScalarParamType):
            t: object = ty.dtype
        else:
            f = facts.get(p.name, {})
            writable = p.name in stored if isinstance(ty, PartitionParamType) else ty.atomic
            t = ArrayType(ty.dtype, ty.ndim, writable=writable,
                          layout=f.get("layout", "any"), aligned16=bool(f.get("aligned16", False)))
        out.append(N.Param(p.name, t, len(out)))  # type: ignore[arg-type]
    return out
