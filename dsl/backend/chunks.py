"""Chunk loops (`for k in simt.thread.chunk_1d(n)`), mixed into ModuleBuilder through MemoryMixin.

Fast path (the whole chunk is in range): n straight copies of the body with `k` known in range.
Tail (the last, partial chunk): a loop over the chunk, each element guarded. An n-D chunk
(`chunk_2d` / `chunk_3d`) runs along the last axis of one row: the loop is skipped when the row (its
`lead` indices) is outside the chunked array, and `k` is the last index.

Why the fast path makes its vector accesses itself: LLVM joins loads and stores into ld/st.v4 only
within one basic block, and a math call (tanh, erf, exp: libdevice code with branches) splits every
element's body into several blocks, so the n element accesses stayed 2- or 4-byte accesses (GELU on
bf16 ran at 0.35x of its C++ peer). So the fast path loads each array the body reads at `k` as
vectors *before* the n bodies (element j uses lane j) and keeps each array it writes at `k` in n
slots (allocas that mem2reg makes registers) stored as vectors *after* them. Width: 16 bytes, or the
largest power of two that the chunk's bytes and the data pointer's alignment allow.

What decides it is dsl/backend/chunk_plan.py (which accesses may move). An access that may not stays
per element, as before, and the compiler records why (dsl/perf.py): `.inspect()` and
`python -m dsl compile --explain` show it.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass

import llvmlite.ir as ir

from dsl.backend import lltypes as T
from dsl.backend.chunk_plan import ArrayUse, ChunkPlan, plan_chunk, same_row
from dsl.backend.values import ArrayVal
from dsl.ir import nodes as N
from dsl.ir.types import ChunkType
from dsl.perf import SlowPath

MAX_VECTOR_BYTES = 16      # ld/st.v4.b32, v2.b64: the widest access on every arch we target


def access_pieces(n: int, itemsize: int, aligned16: bool) -> list[tuple[int, int]]:
    """(first element, element count) of each access covering a chunk of `n` elements: the chunk
    starts at thread * n, so its byte offset is a multiple of n * itemsize's largest power-of-two
    factor; with the data pointer's alignment (16 bytes, else the element's) that bounds the width."""
    total = n * itemsize
    width = min(MAX_VECTOR_BYTES, total & -total, MAX_VECTOR_BYTES if aligned16 else itemsize)
    per = max(1, width // itemsize)
    return [(i, per) for i in range(0, n, per)]


@dataclass
class Lane:
    """An array whose accesses at the owned index moved out of the element bodies: `values` (read
    only, loaded before them) or `slots` (read/written, stored after them)."""
    arr: ArrayVal
    pieces: list[tuple[int, int]]
    cursor: list[int]                         # [j]: the element whose body is being emitted
    loc: N.Loc = N.NOLOC                      # the first access's statement (the moved code's line)
    values: list[ir.Value] | None = None
    slots: list[ir.AllocaInstr] | None = None
    lead: list[N.Expr] | None = None          # the row's indices (an n-D array), evaluated once
    row: list[ir.Value] | None = None
    use: ArrayUse | None = None


class ChunkMixin:
    # ------------------------------------------------------------------ loop
    def visit_ChunkLoop(self, s: N.ChunkLoop) -> None:
        b = self.st.b
        n = s.chunk.type.n if isinstance(s.chunk.type, ChunkType) else int(s.chunk.type.n)
        start = self.expr(s.chunk)
        arr: ArrayVal = self.expr(s.array)
        fast_bb, slow_bb, done = self.new_block("chunk.fast"), self.new_block("chunk.slow"), self.new_block("chunk.done")
        if s.lead:                              # an n-D chunk: its row must be inside the array
            row_bb = self.new_block("chunk.row")
            self._likely(b.cbranch(self.in_range(arr, [self.expr(e) for e in s.lead]), row_bb, done))
            b.position_at_end(row_bb)
        plan = plan_chunk(s)
        cursor = [0]
        lanes = self._chunk_lanes(s, plan, arr, n, cursor)
        whole = b.icmp_unsigned("<=", b.add(start, ir.Constant(T.I64, n)), arr.extents[-1])
        for lane in lanes:                      # a row of an n-D array starts aligned only if its length does
            per = lane.pieces[0][1]
            if lane.lead and per > 1:
                rem = b.and_(lane.arr.extents[-1], ir.Constant(T.I64, per - 1))
                whole = b.and_(whole, b.icmp_unsigned("==", rem, ir.Constant(T.I64, 0)))
        self._likely(b.cbranch(whole, fast_bb, slow_bb))
        b.position_at_end(fast_bb)
        # in the fast path k is in range for the chunked array and every array of the same extent
        facts = {(a.key, s.var) for a in self._plan_arrays(plan) if self._same_extent(a, arr)} | {(arr.key, s.var)}
        facts -= self.st.known
        self.st.known |= facts
        known_rows = dict(self.st.chunk_rows)
        self.st.chunk_rows[(arr.key, s.var)] = s.lead
        self._load_lanes(lanes, start, n, s.var)
        for j in range(n):
            cursor[0] = j
            nxt = self.new_block(f"chunk.fast{j + 1}")
            self.assign(s.var, b.add(start, ir.Constant(T.I64, j)))
            self._loop_body(s.body, nxt, done)
            b.position_at_end(nxt)
        self._flush_lanes(lanes, start)
        for lane in lanes:
            del self.st.lanes[(lane.arr.key, s.var)]
        self.st.known -= facts
        self.st.chunk_rows = known_rows
        b.branch(done)
        b.position_at_end(slow_bb)
        self._chunk_tail(s, arr, start, n, done)

    def _chunk_tail(self, s: N.ChunkLoop, arr: ArrayVal, start: ir.Value, n: int, done: ir.Block) -> None:
        """The partial last chunk: element by element, each guarded on the chunked array."""
        b = self.st.b
        counter = self.st.alloca_b.alloca(T.I64, name=f"{s.var.name}.chunk")
        b.store(ir.Constant(T.I64, 0), counter)
        head, body, guarded, latch = (self.new_block(f"chunk.{x}") for x in ("head", "body", "guarded", "latch"))
        b.branch(head)
        b.position_at_end(head)
        j = b.load(counter, typ=T.I64)
        b.cbranch(b.icmp_unsigned("<", j, ir.Constant(T.I64, n)), body, done)
        b.position_at_end(body)
        k = b.add(start, j)
        b.cbranch(b.icmp_unsigned("<", k, arr.extents[-1]), guarded, done)
        b.position_at_end(guarded)
        self.assign(s.var, k)
        self._loop_body(s.body, latch, done)
        b.position_at_end(latch)
        b.store(b.add(b.load(counter, typ=T.I64), ir.Constant(T.I64, 1)), counter)
        b.branch(head).set_metadata("llvm.loop", self._no_unroll_loop_id())
        b.position_at_end(done)

    def _no_unroll_loop_id(self):
        """A distinct `!llvm.loop` id with unroll.disable: the tail loop stays a loop, so SimplifyCFG
        cannot merge its last iteration with the fast path's last store (which would block st.v4)."""
        disable = self.module.add_metadata([ir.MetaDataString(self.module, "llvm.loop.unroll.disable")])
        tag = ir.MetaDataString(self.module, f"kb.chunk.{len(self.module.metadata)}")   # unique per loop
        loop_id = self.module.add_metadata([disable, tag])
        loop_id.operands = (loop_id, disable)     # loop ids refer to themselves
        return loop_id

    # ------------------------------------------------------------------ which accesses move
    def _plan_arrays(self, plan: ChunkPlan) -> list[ArrayVal]:
        return [self.st.params[p] for p in plan.uses if p in self.st.params]

    @staticmethod
    def _same_extent(a: ArrayVal, chunked: ArrayVal) -> bool:
        """`a`'s last axis has the chunked array's length: the same array, or one a `requires=`
        equality gave the same extent value (builder._share_equal_extents)."""
        return a.key is chunked.key or a.extents[-1] is chunked.extents[-1]

    def _chunk_lanes(self, s: N.ChunkLoop, plan: ChunkPlan, arr: ArrayVal, n: int,
                     cursor: list[int]) -> list[Lane]:
        """The arrays whose accesses at k move out of the element bodies (records why for the others);
        their rows' indices are evaluated here, before the fast path's test."""
        if n < 2:
            return []
        lanes = []
        for use in plan.uses.values():
            a = self.st.params.get(use.param)
            if not (use.reads or use.writes) or not isinstance(a, ArrayVal) or a.type.space != "global":
                continue
            why = self._why_not_moved(use, a, arr, plan, n)
            if why is not None:
                self._record(*why, use, a)
                continue
            pieces = access_pieces(n, a.type.dtype.itemsize, a.type.aligned16)
            lane = Lane(a, pieces, cursor, loc=use.writes[0] if use.writes else use.reads[0], use=use)
            if use.lead:
                lane.lead, lane.row = use.lead, [self.expr(e) for e in use.lead]
            lanes.append(lane)
        return lanes

    def _load_lanes(self, lanes: list[Lane], start: ir.Value, n: int, var: N.Var) -> None:
        """Emit the loads that move before the element bodies; slots for the stores after them."""
        for lane in lanes:
            a, use = lane.arr, lane.use
            if use.writes:
                lane.slots = [self.st.alloca_b.alloca(T.memory(a.type.dtype), name=f"{a.name}.lane{j}")
                              for j in range(n)]
            if use.reads:
                with self._line_of(use.reads[0]):
                    vals = self._load_pieces(lane, start)
                if lane.slots is None:
                    lane.values = vals
                else:
                    for slot, v in zip(lane.slots, vals):
                        self.st.b.store(v, slot)
            self.st.lanes[(a.key, var)] = lane

    def _why_not_moved(self, use: ArrayUse, a: ArrayVal, chunked: ArrayVal, plan: ChunkPlan,
                       n: int) -> tuple[str, str] | None:
        """(kind, reason) when `a`'s accesses at k must stay per element, else None."""
        name, dt = a.name, a.type.dtype
        if use.rows_differ is not None:
            return ("in-order", f"{name} is accessed at the owned index in more than one row (line "
                    f"{use.rows_differ.line}), or in a row the body assigns: one access per element")
        if not self._same_extent(a, chunked):
            return ("unrelated-length", f"len({name}) is not known to equal len({chunked.name}): one "
                    f"access per element of {name}, bounds-checked unless proven; add "
                    f"requires=[\"len({name}) == len({chunked.name})\"] to the kernel")
        if a.type.layout != "C":
            return ("strided", f"{name} may be strided (its last axis is not C-contiguous in this "
                    f"specialisation): one access per element; pass a contiguous array")
        pieces = access_pieces(n, dt.itemsize, a.type.aligned16)
        if pieces[0][1] == 1:
            why = (f"{name}'s data pointer is not known to be 16-byte aligned" if not a.type.aligned16 else
                   f"a chunk of {n} {dt} ({n * dt.itemsize} bytes) starts only {dt.itemsize}-byte aligned")
            return ("unaligned", f"{why}: one {dt.itemsize}-byte access per element")
        if use.lead and use.checked:
            return ("in-order", f"{name}'s row index is not proven inside {name} (its accesses carry a "
                    f"run-time bounds check): one access per element; test it first, e.g. "
                    f"`if 0 <= r < {name}.shape[0]:`")
        if self._overlaps(a, plan):
            return ("overlap", f"{name} may overlap another array (inplace=): its accesses stay in order")
        if not use.writes and (a.invariant or use.other is None):
            return None                      # read only in the body: loads may move
        if use.other is not None:
            return ("in-order", f"{name} is also used at line {use.other.line} other than at the owned "
                    f"index: its accesses at the owned index stay in order")
        if plan.blocker is not None:
            loc, why = plan.blocker
            return ("in-order", f"{why} (line {loc.line}): {name}'s accesses stay per element")
        unchecked = [u for u in plan.uses.values() if u.checked and u.param in self.st.params
                     and not self._same_extent(self.st.params[u.param], chunked)]
        if unchecked:
            return ("in-order", f"{unchecked[0].param.name}'s run-time bounds check may end the thread "
                    f"before the element's stores: {name}'s accesses stay per element")
        if not use.every_element_writes:
            return ("in-order", f"{name}[k] is written only on some paths of the body: its stores stay "
                    f"per element (assign it on every path: {name}[k] = a if cond else b)")
        return None

    def _overlaps(self, a: ArrayVal, plan: ChunkPlan) -> bool:
        """Whether `a` may share memory with an array the body writes (or, written, with any other
        it accesses): a kernel's arrays overlap only in an `inplace=` pair; a device function's may
        be one array passed twice."""
        if self.st.fn.is_kernel:
            return any(a.name in pair for pair in self.opts.inplace)
        mine = plan.uses.get(a.key)
        others = [u for p, u in plan.uses.items() if p is not a.key]
        return bool(others) and (bool(mine and mine.writes) or any(u.writes for u in others))

    def _record(self, kind: str, reason: str, use: ArrayUse, a: ArrayVal) -> None:
        loc = (use.writes or use.reads)[0]
        access = "stores" if use.writes else "loads"
        self.slow_paths.append(SlowPath(kind, f"chunk loop {access} of {a.name}: {reason}", loc.line, loc.file))

    # ------------------------------------------------------------------ vector accesses
    def _piece_ptr(self, lane: Lane, start: ir.Value, first: int) -> ir.Value:
        a = lane.arr
        idx = self.st.b.add(start, ir.Constant(T.I64, first)) if first else start
        if lane.row:
            return self.element_ptr(a, [*lane.row, idx])
        return self.st.b.gep(a.ptr, [idx], inbounds=True, source_etype=T.memory(a.type.dtype))

    def _load_pieces(self, lane: Lane, start: ir.Value) -> list[ir.Value]:
        """The chunk of the lane's array as register values (memory types), loaded piece by piece."""
        b = self.st.b
        a = lane.arr
        mt = T.memory(a.type.dtype)
        out: list[ir.Value] = []
        for first, count in lane.pieces:
            vt = ir.VectorType(mt, count)
            ld = b.load(self._piece_ptr(lane, start, first), typ=vt, align=count * a.type.dtype.itemsize)
            self.mark_invariant(a, ld)
            out += [b.extract_element(ld, ir.Constant(T.I32, i)) for i in range(count)]
        return out

    def _flush_lanes(self, lanes: list[Lane], start: ir.Value) -> None:
        """Store every written lane's slots as vectors (after the last element body)."""
        b = self.st.b
        for lane in lanes:
            if lane.slots is None:
                continue
            dt = lane.arr.type.dtype
            mt = T.memory(dt)
            with self._line_of(lane.loc):
                for first, count in lane.pieces:
                    vec = ir.Constant(ir.VectorType(mt, count), ir.Undefined)
                    for i in range(count):
                        vec = b.insert_element(vec, b.load(lane.slots[first + i], typ=mt), ir.Constant(T.I32, i))
                    b.store(vec, self._piece_ptr(lane, start, first), align=count * dt.itemsize)

    @contextlib.contextmanager
    def _line_of(self, loc: N.Loc):
        """Moved accesses keep the line of the statement they come from (line tables, profilers)."""
        st = self.st
        if st.scope is None or loc is N.NOLOC or self.lines is None:
            yield
            return
        outer = st.b.debug_metadata
        st.b.debug_metadata = self.lines.location(loc, st.scope, st.fn.loc.file)
        try:
            yield
        finally:
            st.b.debug_metadata = outer

    # ------------------------------------------------------------------ accesses in the bodies
    def chunk_lane(self, arr: ArrayVal, indices: list[N.Expr]) -> Lane | None:
        """The moved lane of an access `arr[k]` (`arr[row..., k]`) at a fast-path chunk's owned index,
        else None."""
        if not self.st.lanes or not indices or not isinstance(indices[-1], N.ReadVar):
            return None
        lane = self.st.lanes.get((arr.key, indices[-1].var))
        if lane is None or not same_row(lane.lead or [], indices[:-1]):
            return None
        return lane

    def lane_load(self, lane: Lane) -> ir.Value:
        j = lane.cursor[0]
        v = lane.values[j] if lane.values is not None else self.st.b.load(lane.slots[j], typ=lane.slots[j].allocated_type)
        return self.from_memory(lane.arr.type.dtype, v)

    def lane_store(self, lane: Lane, val: ir.Value) -> None:
        self.st.b.store(self.to_memory(lane.arr.type.dtype, val), lane.slots[lane.cursor[0]])
