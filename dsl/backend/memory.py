"""Memory accesses (mixed into ModuleBuilder): addressing, bounds checks, the fault path, guarded
regions, atomics, shared memory, get_mut slots; chunk loops are dsl/backend/chunks.py.

Addresses: ptr + sum(idx_k * stride_k) elements for layout "any"; row-major offsets from the extents for
layout "C" and shared memory (the strides are then never read). A bounds check is one unsigned compare
per axis (`idx <u extent` also rejects negative indices). A failed check in a `check="fault"` access
claims the fault record with `atom.cas 0 -> 1`, writes site/index/extent, and ends the thread with PTX
`exit` (never `trap`, which would poison the context).
"""
from __future__ import annotations

import llvmlite.ir as ir

from dsl.backend import intrinsics as X
from dsl.backend import lltypes as T
from dsl.backend.chunk_plan import same_row
from dsl.backend.chunks import ChunkMixin
from dsl.backend.errors import CodegenError
from dsl.backend.values import ArrayVal, SlotVal
from dsl.ir import nodes as N
from dsl.ir.types import INDEX, ArrayType, ScalarType

# struct { u32 flag; u32 site; i64 index; i64 extent; } — see docs/architecture.md
FAULT_SITE_OFFSET, FAULT_INDEX_OFFSET, FAULT_EXTENT_OFFSET = 4, 8, 16
DYNAMIC_SMEM_SYMBOL = "__kb_dynamic_smem"


class MemoryMixin(ChunkMixin):
    # ------------------------------------------------------------------ addressing
    def element_offset(self, arr: ArrayVal, idx: list[ir.Value]) -> ir.Value:
        """Element offset of `idx` (row-major from the extents, or from the strides)."""
        b = self.st.b
        if arr.type.layout == "C" or arr.type.space == "shared":
            off = idx[0]
            for i, e in zip(idx[1:], arr.extents[1:]):
                off = b.add(b.mul(off, e), i)
        else:
            off = b.mul(idx[0], arr.strides[0])
            for i, s in zip(idx[1:], arr.strides[1:]):
                off = b.add(off, b.mul(i, s))
        return off

    def element_ptr(self, arr: ArrayVal, idx: list[ir.Value],
                    parts: tuple[list[ir.Value], list[int]] | None = None) -> ir.Value:
        """Address of arr[idx]. With `parts` (each index as base + constant, see index_parts) the
        offset is offset(bases) + offset(constants): `u[r - 1, c]`, `u[r, c + 1]` and `out[r, c]` then
        share one `r * cols + c` and differ by `-cols`, `+1`: one multiply for a whole stencil, as a
        C++ programmer's `k = r * cols + c; u[k - cols]` gives. Integers wrap, so this is the same
        offset exactly (the identity holds modulo 2**64)."""
        b = self.st.b
        if parts is not None and any(parts[1]):
            bases, consts = parts
            off = self.element_offset(arr, bases)
            extra = self.element_offset(arr, [ir.Constant(T.I64, c & ((1 << 64) - 1)) for c in consts])
            off = b.add(off, extra)
        else:
            off = self.element_offset(arr, idx)
        return b.gep(arr.ptr, [off], inbounds=True, source_etype=T.memory(arr.type.dtype))

    def index_parts(self, indices: list[N.Expr]) -> tuple[list[ir.Value], list[int]]:
        """Each 64-bit index `x + c` / `x - c` / `c + x` (c an integer constant, peeled repeatedly) as
        (value of x, c); other indices as (value, 0). Narrower arithmetic under a cast is left whole
        (it wraps at its own width)."""
        bases, consts = [], []
        for e in indices:
            d = 0
            while isinstance(e, N.BinOp) and e.op in ("add", "sub") and e.type == INDEX:
                if _int_const(e.rhs):
                    d += e.rhs.value if e.op == "add" else -e.rhs.value
                    e = e.lhs
                elif e.op == "add" and _int_const(e.lhs):
                    d += e.lhs.value
                    e = e.rhs
                else:
                    break
            bases.append(self.expr(e))
            consts.append(d)
        return bases, consts

    def in_range(self, arr: ArrayVal, idx: list[ir.Value]) -> ir.Value:
        b = self.st.b
        ok = ir.Constant(T.I1, 1)
        for i, e in zip(idx, arr.extents):
            ok = b.and_(ok, b.icmp_unsigned("<", i, e))
        return ok

    def is_known(self, arr: ArrayVal, indices: list[N.Expr]) -> bool:
        """Inside a chunk fast path the owned index is proven in range for the chunked array (and the
        arrays of its length); an n-D chunk's row only for the chunked array, at that row."""
        if not indices or not isinstance(indices[-1], N.ReadVar) or (arr.key, indices[-1].var) not in self.st.known:
            return False
        if len(indices) == 1:
            return True
        row = self.st.chunk_rows.get((arr.key, indices[-1].var))
        return row is not None and same_row(row, indices[:-1])

    def _likely(self, br) -> None:
        md = self.module.add_metadata([ir.MetaDataString(self.module, "branch_weights"),
                                       ir.Constant(T.I32, 2000), ir.Constant(T.I32, 1)])
        br.set_metadata("prof", md)

    def check_or_fault(self, arr: ArrayVal, idx: list[ir.Value], site: int) -> None:
        b = self.st.b
        for k, (i, e) in enumerate(zip(idx, arr.extents)):
            ok_bb, fail_bb = self.new_block(f"site{site}.ok{k}"), self.new_block(f"site{site}.fault{k}")
            self._likely(b.cbranch(b.icmp_unsigned("<", i, e), ok_bb, fail_bb))
            b.position_at_end(fail_bb)
            self.fault(site, i, e)
            b.position_at_end(ok_bb)

    def fault(self, site: int, index: ir.Value, extent: ir.Value) -> None:
        """Record the first fault of the launch (if this function can reach the record) and exit."""
        b = self.st.b
        rec = self.st.fault_record
        if rec is not None:
            # atom.cas (generic address) at the default .gpu scope, as CUDA's atomicCAS: LLVM's cmpxchg would be
            # .sys scope, which the host does not need (it reads the record after the launch completes).
            cas = ir.InlineAsm(ir.FunctionType(T.I32, [rec.type]), "atom.cas.b32 $0, [$1], 0, 1;",
                               "=r,l,~{memory}", side_effect=True)
            old = b.call(cas, [rec])
            won, done = self.new_block("fault.write"), self.new_block("fault.exit")
            b.cbranch(b.icmp_unsigned("==", old, ir.Constant(T.I32, 0)), won, done)
            b.position_at_end(won)
            for off, val in ((FAULT_SITE_OFFSET, ir.Constant(T.I32, site)),
                             (FAULT_INDEX_OFFSET, index), (FAULT_EXTENT_OFFSET, extent)):
                p = b.gep(rec, [ir.Constant(T.I64, off)], source_etype=T.I8)
                b.store(val, p, align=val.type.width // 8)
            b.branch(done)
            b.position_at_end(done)
        fn = self.declare(X.EXIT, T.VOID, [])
        fn.attributes.add("noreturn")
        fn.attributes.add("nounwind")
        b.call(fn, [])
        b.unreachable()

    # ------------------------------------------------------------------ loads and stores
    def load_elem(self, arr: ArrayVal, idx: list[ir.Value], parts=None) -> ir.Value:
        b = self.st.b
        dt = arr.type.dtype
        ld = b.load(self.element_ptr(arr, idx, parts), typ=T.memory(dt), align=dt.itemsize)
        self.mark_invariant(arr, ld)
        return self.from_memory(dt, ld)

    def store_elem(self, arr: ArrayVal, idx: list[ir.Value], val: ir.Value, parts=None) -> None:
        dt = arr.type.dtype
        self.st.b.store(self.to_memory(dt, val), self.element_ptr(arr, idx, parts), align=dt.itemsize)

    def mark_invariant(self, arr: ArrayVal, ld: ir.Instruction) -> None:
        """`!invariant.load` on a load of `arr` when it is read-only and in no in-place pair."""
        if arr.invariant and self.opts.invariant_loads:
            if self._invariant_md is None:
                self._invariant_md = self.module.add_metadata([])
            ld.set_metadata("invariant.load", self._invariant_md)

    def from_memory(self, dt: ScalarType, v: ir.Value) -> ir.Value:
        """A loaded element as a value: bools are bytes in memory, i1 in registers."""
        return self.st.b.icmp_unsigned("!=", v, ir.Constant(T.I8, 0)) if dt.kind == "bool" else v

    def to_memory(self, dt: ScalarType, v: ir.Value) -> ir.Value:
        """A value as the element stored (the inverse of from_memory)."""
        return self.st.b.zext(v, T.I8) if dt.kind == "bool" else v

    def visit_Load(self, e: N.Load):
        early = self.st.preloaded.get(id(e))       # issued before an unrolled loop's copies (unroll.py)
        if early is not None:
            return early
        arr: ArrayVal = self.expr(e.array)
        lane = self.chunk_lane(arr, e.indices)     # loaded before the chunk's element bodies
        if lane is not None:
            return self.lane_load(lane)
        idx = [self.expr(i) for i in e.indices]
        if e.check == "fault" and not self.is_known(arr, e.indices):
            self.check_or_fault(arr, idx, e.site)
        return self.load_elem(arr, idx, self.index_parts(e.indices))

    def visit_Store(self, s: N.Store) -> None:
        arr: ArrayVal = self.expr(s.array)
        lane = self.chunk_lane(arr, s.indices)     # stored after the chunk's element bodies
        if lane is not None:
            self.lane_store(lane, self.expr(s.value))
            return
        idx = [self.expr(i) for i in s.indices]
        if s.mode == "guarded" and not s.proven and not self.is_known(arr, s.indices):
            ok_bb, end = self.new_block("store.inrange"), self.new_block("store.end")
            self.st.b.cbranch(self.in_range(arr, idx), ok_bb, end)
            self.st.b.position_at_end(ok_bb)
            self.store_elem(arr, idx, self.expr(s.value), self.index_parts(s.indices))
            self.st.b.branch(end)
            self.st.b.position_at_end(end)
            return
        if s.mode == "checked" and not self.is_known(arr, s.indices):
            self.check_or_fault(arr, idx, s.site)
        self.store_elem(arr, idx, self.expr(s.value), self.index_parts(s.indices))

    def visit_ArrayLen(self, e: N.ArrayLen):
        return self.expr(e.array).extents[e.axis]

    def visit_GuardedRegion(self, s: N.GuardedRegion) -> None:
        arr: ArrayVal = self.expr(s.array)
        if s.proven or self.is_known(arr, s.indices):
            self._body(s.body)
            return
        idx = [self.expr(i) for i in s.indices]
        b = self.st.b
        body, end = self.new_block("guard.body"), self.new_block("guard.end")
        b.cbranch(self.in_range(arr, idx), body, end)
        b.position_at_end(body)
        self._body(s.body)
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(end)

    # ------------------------------------------------------------------ slots
    def visit_GetMut(self, e: N.GetMut):
        arr: ArrayVal = self.expr(e.array)
        idx = [self.expr(i) for i in e.indices]
        ok = ir.Constant(T.I1, 1) if self.is_known(arr, e.indices) else self.in_range(arr, idx)
        return SlotVal(arr, idx, ok)

    def visit_SlotSet(self, s: N.SlotSet) -> None:
        slot: SlotVal = self.expr(s.slot)
        self.store_elem(slot.array, slot.indices, self.expr(s.value))

    # ------------------------------------------------------------------ atomics
    def visit_Atomic(self, e: N.Atomic):
        b = self.st.b
        arr: ArrayVal = self.expr(e.array)
        idx = [self.expr(i) for i in e.indices]
        if e.check == "fault" and not self.is_known(arr, e.indices):
            self.check_or_fault(arr, idx, e.site)
        ptr = self.element_ptr(arr, idx)
        args = [self.expr(a) for a in e.args]
        t: ScalarType = e.type
        if e.op == "cas":
            cmp, val = args
            if t.is_float:
                ity = ir.IntType(t.bits)
                cmp, val = b.bitcast(cmp, ity), b.bitcast(val, ity)
            old = b.extract_value(b.cmpxchg(ptr, cmp, val, X.ATOMIC_ORDERING, X.ATOMIC_ORDERING), 0)
            return b.bitcast(old, T.scalar(t)) if t.is_float else old
        kind = "float" if t.is_float else t.kind
        op = X.ATOMIC_RMW[e.op].get(kind)
        if op is None:
            raise CodegenError(f"atomic {e.op} is not defined on {t}", e.loc)
        return b.atomic_rmw(op, ptr, args[0], X.ATOMIC_ORDERING)

    # ------------------------------------------------------------------ shared memory
    def visit_SharedArray(self, e: N.SharedArray):
        """The one shared-memory allocator of both front ends. A static allocation is an internal
        `.shared` array of its shape; every dynamic one is a view of the one `extern` symbol
        DYNAMIC_SMEM_SYMBOL (aligned to the largest alignment asked for) whose length is the launch's
        dynamic shared memory (%dynamic_smem_size)."""
        alloc = e.alloc
        t: ArrayType = alloc.type
        dynamic = alloc.dynamic
        gv = self._shared.get(id(alloc))
        if gv is None:
            gv = self._dynamic_smem(alloc.align) if dynamic else self._static_smem(alloc)
            self._shared[id(alloc)] = gv
        ptr = gv
        if dynamic:
            size = self.st.b.zext(self.sreg("dynamic_smem_size"), T.I64)
            if alloc.offset:        # a view further in: its bytes start `offset` bytes after the symbol's
                off = ir.Constant(T.I64, alloc.offset)
                ptr = self.st.b.gep(gv, [off], inbounds=True, source_etype=T.I8)
                size = self.st.b.sub(size, off)
            extents = [self.st.b.udiv(size, ir.Constant(T.I64, t.dtype.itemsize))]
        else:
            extents = [ir.Constant(T.I64, d) for d in t.shape]
        one = ir.Constant(T.I64, 1)
        return ArrayVal(t, alloc.name, ptr, extents, [one] * len(extents), key=alloc)

    def _static_smem(self, alloc: N.SharedAlloc) -> ir.GlobalVariable:
        t: ArrayType = alloc.type
        count = 1
        for d in t.shape:
            count *= d
        gv = ir.GlobalVariable(self.module, ir.ArrayType(T.memory(t.dtype), count),
                               f"{self.kernel.name}.smem.{alloc.name}.{len(self._shared)}",
                               addrspace=T.SHARED_AS)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(gv.value_type, ir.Undefined)
        gv.align = alloc.align
        gv.type = T.SHARED_PTR    # llvmlite types globals as typed pointers; LLVM 22 is opaque
        return gv

    def _dynamic_smem(self, align: int) -> ir.GlobalVariable:
        gv = self.module.globals.get(DYNAMIC_SMEM_SYMBOL)
        if gv is None:
            gv = ir.GlobalVariable(self.module, ir.ArrayType(T.I8, 0), DYNAMIC_SMEM_SYMBOL,
                                   addrspace=T.SHARED_AS)
            gv.linkage = "external"
            gv.align = align
            gv.type = T.SHARED_PTR
        else:
            gv.align = max(gv.align or 0, align)
        return gv


def _int_const(e: N.Expr) -> bool:
    return isinstance(e, N.Const) and isinstance(e.value, int) and not isinstance(e.value, bool)
