"""Code generation of the launch features (dsl/ir/launch_nodes.py; rows of dsl/vocab/launch.py):
`LaunchMixin`, one of ModuleBuilder's bases, plus the kernel entry's part (`launch_entry`).

- PDL (sm_90+; nothing is emitted for older targets, where the launch is an ordinary one):
  `griddepcontrol.wait` at the kernel's entry, unless the body calls pdl.wait itself (the front end
  checked that nothing before it touches global memory). The array parameters' pointers pass through
  the wait's inline asm, so no load of them (not even an `!invariant.load` / `ld.global.nc` one) can
  be scheduled above it. `launch_dependents` is `griddepcontrol.launch_dependents`.
- grid.sync: a barrier of our own (no cudadevrt) on a 32-bit word of the module (`.global`, zeroed when
  the module loads: one word per compiled kernel per device, reused by every launch and graph replay).
  Each block elects one live thread (the last to write a shared word before a `bar.sync`: threads that
  returned early do not hold up `bar.sync`, PTX `exit`), which adds 1 to the word, block 0 adding
  0x80000000 - (blocks - 1) instead, with `atom.add.release.gpu`, then spins with `ld.acquire.gpu` until
  the top bit differs from the one it saw: the blocks' additions sum to exactly 2^31, so the top bit
  flips once when the last block arrives and the low bits return to what they were (the next barrier,
  or the next launch, of any grid size, starts from a consistent word). Release (each arrival) /
  acquire (the spin) make every write before the barrier visible after it (PTX memory model: the
  arrivals form a release sequence on the word, which the spinning acquire load reads from); the
  other threads of a block reach the elected one through `bar.sync` (CTA scope), and a
  `fence.acq_rel.gpu` on each side of the arrival and spin lifts their writes and reads to the GPU
  scope, as cooperative groups' grid sync does with `__threadfence()`. A kernel with run-time bounds checks polls its
  fault record while spinning: after a fault (whose thread exited and may never arrive) the spinning
  block takes its arrival back with a compare-and-swap while the barrier is still incomplete, and
  the whole block exits, so the launch ends (reporting the KernelFault) and the word is as before.
  Launches of one kernel object that run at the same time (two streams) would share the word: a
  cooperative kernel's launches must be ordered (docs/dsl.md).
- Clusters: `.explicitcluster` / `.reqnctapercluster` from the function attribute "nvvm.cluster_dim"
  (LLVM 22 emits them for sm_90+); cluster.sync is `barrier.cluster.arrive.release` +
  `barrier.cluster.wait.acquire`; map_shared is `mapa.u64` on the generic address of the shared array,
  whose loads and stores are then generic (the shared::cluster window).
Barriers pass the array parameters' pointers to their inline asm: LLVM must then assume the barrier
may read and write through them (a `noalias` parameter is otherwise taken as untouched by any call),
so no access moves across it.
"""
from __future__ import annotations

from dataclasses import replace

import llvmlite.ir as ir

from dsl.backend import lltypes as T
from dsl.backend.errors import CodegenError
from dsl.backend.target import TargetError
from dsl.backend.values import ArrayVal
from dsl.ir import nodes as N
from dsl.ir.launch_nodes import LaunchOp
from dsl.vocab import launch as vocab

_MEM = "~{memory}"
_SPIN = """{
.reg .pred kb_p, kb_q;
.reg .b32 kb_old, kb_sense, kb_cur, kb_bit, kb_n, kb_f, kb_new, kb_seen;
fence.acq_rel.gpu;
atom.add.release.gpu.global.u32 kb_old, [$1], $2;
and.b32 kb_sense, kb_old, 0x80000000;
mov.u32 kb_n, 0;
KB_SPIN_${:uid}:
ld.acquire.gpu.global.u32 kb_cur, [$1];
and.b32 kb_bit, kb_cur, 0x80000000;
setp.ne.u32 kb_p, kb_bit, kb_sense;
@kb_p bra KB_PASS_${:uid};
add.u32 kb_n, kb_n, 1;
and.b32 kb_f, kb_n, 255;
setp.ne.u32 kb_q, kb_f, 0;
@kb_q bra KB_SPIN_${:uid};
setp.eq.u64 kb_q, $3, 0;
@kb_q bra KB_SPIN_${:uid};
ld.volatile.u32 kb_f, [$3];
setp.eq.u32 kb_q, kb_f, 0;
@kb_q bra KB_SPIN_${:uid};
KB_UNDO_${:uid}:
ld.acquire.gpu.global.u32 kb_cur, [$1];
and.b32 kb_bit, kb_cur, 0x80000000;
setp.ne.u32 kb_p, kb_bit, kb_sense;
@kb_p bra KB_PASS_${:uid};
sub.u32 kb_new, kb_cur, $2;
atom.relaxed.gpu.global.cas.b32 kb_seen, [$1], kb_cur, kb_new;
setp.ne.u32 kb_q, kb_seen, kb_cur;
@kb_q bra KB_UNDO_${:uid};
mov.u32 $0, 1;
bra.uni KB_END_${:uid};
KB_PASS_${:uid}:
fence.acq_rel.gpu;
mov.u32 $0, 0;
KB_END_${:uid}:
}"""
_CLUSTER_SYNC = "barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;"


def explicit_wait(fn: N.Function) -> bool:
    """Does the kernel body call pdl.wait itself (a top-level statement, dsl/frontend/launch.py)?"""
    return any(isinstance(s, N.ExprStmt) and isinstance(s.value, LaunchOp) and s.value.op == "pdl.wait"
               for s in fn.body)


class LaunchMixin:
    """Visitors of LaunchOp / ClusterShared and the kernel entry's launch features."""

    # ------------------------------------------------------------------ entry
    def launch_attributes(self, fn: N.Function, attrs: set) -> None:
        """The entry's cluster directives (a function attribute LLVM turns into .reqnctapercluster)."""
        if fn.cluster is None:
            return
        if self.opts.arch_cc < 90:
            raise TargetError(f"{fn.loc}: kernel {fn.name!r} declares cluster={fn.cluster}: thread-block "
                              f"clusters need sm_90 or newer, the target is sm_{self.opts.arch_cc}")
        set.add(attrs, '"nvvm.cluster_dim"="%d,%d,%d"' % tuple(fn.cluster))

    def launch_entry(self, fn: N.Function) -> None:
        """After the parameters are read: a pdl=True kernel without its own pdl.wait waits here."""
        if fn.pdl and not explicit_wait(fn):
            self._pdl_wait()

    # ------------------------------------------------------------------ operations
    def visit_LaunchOp(self, e: LaunchOp):
        row = vocab.get(e.op)
        if row is None:
            raise CodegenError(f"no code generation for launch operation {e.op!r}", e.loc)
        if self.opts.arch_cc < row.min_cc:
            if row.older == "no-op":
                return None
            raise TargetError(f"{e.loc}: {row.spelling('simt')} needs sm_{row.min_cc} or newer, the target is "
                              f"sm_{self.opts.arch_cc}")
        if e.op == "pdl.wait":
            # a top-level statement of the kernel (the front ends' rule) also launders the pointers; one
            # elsewhere (a persistent tile kernel's loop: the entry waits too) is the instruction alone
            top = self.st.fn.is_kernel and any(isinstance(s, N.ExprStmt) and s.value is e for s in self.st.fn.body)
            self._pdl_wait() if top else self._asm("griddepcontrol.wait;", [])
        elif e.op == "pdl.launch_dependents":
            self._asm("griddepcontrol.launch_dependents;", [])
        elif e.op == "cluster.sync":
            self._asm(_CLUSTER_SYNC, self._array_pointers(), convergent=True)
        elif e.op == "grid.sync":
            self._grid_sync()
        else:
            raise CodegenError(f"no code generation for launch operation {e.op!r}", e.loc)
        return None

    def visit_ClusterShared(self, e):
        """Block `rank`'s copy of a static shared array: mapa on its generic address."""
        if self.opts.arch_cc < 90:
            raise TargetError(f"{e.loc}: simt.cluster.map_shared needs sm_90 or newer, the target is "
                              f"sm_{self.opts.arch_cc}")
        b = self.st.b
        local: ArrayVal = self.visit_SharedArray(N.SharedArray(e.alloc, e.loc))
        generic = b.ptrtoint(b.addrspacecast(local.ptr, ir.PointerType()), T.I64)
        rank = b.trunc(self.expr(e.rank), T.I32)
        mapa = ir.InlineAsm(ir.FunctionType(T.I64, [T.I64, T.I32]), "mapa.u64 $0, $1, $2;", "=l,l,r",
                            side_effect=False)
        ptr = b.inttoptr(b.call(mapa, [generic, rank]), ir.PointerType())
        return replace(local, name=f"{local.name}@rank", ptr=ptr)

    # ------------------------------------------------------------------ helpers
    def _asm(self, text: str, pointers: list, convergent: bool = False) -> None:
        """A side-effecting inline asm statement; `pointers` (i64) are inputs its text does not read,
        passed so that LLVM assumes it may access memory through them."""
        cons = ",".join(["l"] * len(pointers) + [_MEM])
        asm = ir.InlineAsm(ir.FunctionType(T.VOID, [a.type for a in pointers]), text, cons, side_effect=True)
        self.st.b.call(asm, pointers, attrs=("convergent",) if convergent else ())

    def _array_pointers(self) -> list[ir.Value]:
        """The data pointers of the current function's global array parameters (as i64)."""
        b = self.st.b
        return [b.ptrtoint(v.ptr, T.I64) for p, v in self.st.params.items()
                if isinstance(v, ArrayVal) and v.type.space == "global"]

    def _pdl_wait(self) -> None:
        """griddepcontrol.wait (sm_90+), the array parameters' pointers passing through it."""
        if self.opts.arch_cc < 90:
            return
        b = self.st.b
        arrays = [(p, v) for p, v in self.st.params.items() if isinstance(v, ArrayVal)]
        if not arrays:
            self._asm("griddepcontrol.wait;", [])
            return
        n = len(arrays)
        fty = ir.FunctionType(ir.LiteralStructType([T.I64] * n) if n > 1 else T.I64, [T.I64] * n)
        cons = ",".join(["=l"] * n + [str(k) for k in range(n)] + [_MEM])
        asm = ir.InlineAsm(fty, "griddepcontrol.wait;", cons, side_effect=True)
        space = [1 if v.type.space == "global" else None for _, v in arrays]   # global pointers stay global
        out = b.call(asm, [b.ptrtoint(b.addrspacecast(v.ptr, ir.PointerType(addrspace=a)) if a else v.ptr, T.I64)
                           for a, (_, v) in zip(space, arrays)])
        for k, (a, (p, v)) in enumerate(zip(space, arrays)):
            word = b.extract_value(out, k) if n > 1 else out
            ptr = b.inttoptr(word, ir.PointerType(addrspace=a) if a else v.ptr.type)
            self.st.params[p] = replace(v, ptr=b.addrspacecast(ptr, v.ptr.type) if a else ptr)

    def _grid_sync(self) -> None:
        """The grid barrier (module docstring): elect, arrive and spin, broadcast the outcome."""
        b = self.st.b
        words = self._grid_words()
        sreg = self.sreg
        tid = b.add(sreg("tid.x"), b.mul(sreg("ntid.x"), b.add(sreg("tid.y"), b.mul(sreg("ntid.y"), sreg("tid.z")))))
        self._shared_word(words["lead"], tid)
        self.visit_SyncThreads(N.SyncThreads())
        lead = self._shared_word(words["lead"])
        elected, after = self.new_block("gridsync.arrive"), self.new_block("gridsync.after")
        b.cbranch(b.icmp_unsigned("==", lead, tid), elected, after)
        b.position_at_end(elected)
        blocks = b.mul(sreg("nctaid.x"), b.mul(sreg("nctaid.y"), sreg("nctaid.z")))
        first = b.icmp_unsigned("==", b.or_(sreg("ctaid.x"), b.or_(sreg("ctaid.y"), sreg("ctaid.z"))),
                                ir.Constant(T.I32, 0))
        inc = b.select(first, b.sub(ir.Constant(T.I32, 0x80000000), b.sub(blocks, ir.Constant(T.I32, 1))),
                       ir.Constant(T.I32, 1))
        rec = self.st.fault_record
        fault = b.ptrtoint(rec, T.I64) if rec is not None else ir.Constant(T.I64, 0)
        bar = b.ptrtoint(words["bar"], T.I64)
        extra = self._array_pointers()
        fty = ir.FunctionType(T.I32, [T.I64, T.I32, T.I64] + [T.I64] * len(extra))
        cons = ",".join(["=r", "l", "r", "l"] + ["l"] * len(extra) + [_MEM])
        aborted = b.call(ir.InlineAsm(fty, _SPIN, cons, side_effect=True), [bar, inc, fault, *extra],
                         attrs=("convergent",))
        self._shared_word(words["abort"], aborted)
        b.branch(after)
        b.position_at_end(after)
        self.visit_SyncThreads(N.SyncThreads())
        flag = self._shared_word(words["abort"])
        stop, go = self.new_block("gridsync.abort"), self.new_block("gridsync.done")
        b.cbranch(b.icmp_unsigned("!=", flag, ir.Constant(T.I32, 0)), stop, go)
        b.position_at_end(stop)
        from dsl.backend.intrinsics import EXIT
        ex = self.declare(EXIT, T.VOID, [])
        ex.attributes.add("noreturn")
        ex.attributes.add("nounwind")
        b.call(ex, [])
        b.unreachable()
        b.position_at_end(go)

    def _shared_word(self, gv: ir.GlobalVariable, value: ir.Value | None = None) -> ir.Value | None:
        """A volatile 32-bit shared-memory store of `value`, or load (value None): inline asm, so that
        no compiler pass keeps the value in a register across the barrier between them (llvmlite has
        no volatile accesses)."""
        b = self.st.b
        addr = b.ptrtoint(gv, T.I32)
        if value is not None:
            asm = ir.InlineAsm(ir.FunctionType(T.VOID, [T.I32, T.I32]), "st.volatile.shared.u32 [$0], $1;",
                               "r,r," + _MEM, side_effect=True)
            b.call(asm, [addr, value])
            return None
        asm = ir.InlineAsm(ir.FunctionType(T.I32, [T.I32]), "ld.volatile.shared.u32 $0, [$1];", "=r,r," + _MEM,
                           side_effect=True)
        return b.call(asm, [addr])

    def _grid_words(self) -> dict[str, ir.GlobalVariable]:
        """The kernel's barrier word (`.global`, zero when the module loads) and the block's election
        and outcome words (`.shared`), made once per module."""
        words = getattr(self, "_grid_sync_words", None)
        if words is None:
            name = self.kernel_symbol
            words = {}
            for key, space in (("bar", 1), ("lead", T.SHARED_AS), ("abort", T.SHARED_AS)):
                gv = ir.GlobalVariable(self.module, T.I32, f"{name}.grid_sync.{key}", addrspace=space)
                gv.linkage = "internal"
                gv.initializer = ir.Constant(T.I32, 0 if space == 1 else ir.Undefined)
                gv.align = 4
                gv.type = ir.PointerType(addrspace=space)   # llvmlite types globals as typed pointers
                words[key] = gv
            self._grid_sync_words = words
        return words
