"""Typed IR -> llvmlite.ir: one `visit_<Node>` method per IR node class.

Architecture: `ModuleBuilder.build()` emits the kernel (ptx_kernel calling convention, parameters per
the view ABI of docs/architecture.md, `.reqntid`/`.maxntid` via the "nvvm.reqntid"/"nvvm.maxntid"
function attributes LLVM 22 understands), then every device function it calls (internal +
alwaysinline; exported ones external under their C name). Statements live here, expressions in
`exprs.py`, memory accesses and bounds checks in `memory.py`. Locals are allocas in the entry block.

Semantics chosen here (the CPU simulator implements the same, see docs/dsl.md):
- integer + - * wrap (two's complement); `//` and `%` truncate toward zero; x // 0 == 0 and x % 0 == 0
  (PTX leaves it unspecified; we define it, like the simulator); MIN // -1 == MIN, MIN % -1 == 0 — no
  LLVM undefined behaviour is ever emitted;
- float `//` is floor(a / b) (Python), float `%` is C fmod (the sign of the dividend);
- shifts: an amount >= the bit width (or negative) gives 0 (<<, logical >>) or the sign fill (>> on
  signed), like PTX's clamped shifts;
- float ops are IEEE round-to-nearest, never contracted into fma unless options.fastmath or
  options.contract (LLVM's `contract` flag: a product feeding an add may round once, as fma);
- float -> int casts saturate, NaN -> 0 (PTX cvt.rzi semantics, `llvm.fpto[su]i.sat`);
- ForRange with step 0 runs zero times; with an `unroll=N` hint it runs range()'s trip count (unroll.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import llvmlite.ir as ir

from dsl.backend import lltypes as T
from dsl.backend.debuginfo import LineTables
from dsl.backend.errors import CodegenError
from dsl.backend.exprs import ExprMixin
from dsl.backend.launch_codegen import LaunchMixin
from dsl.backend.memory import MemoryMixin
from dsl.backend.tile_codegen import TileNodesMixin
from dsl.backend.unroll import UnrollMixin
from dsl.backend.values import ArrayVal, leaves, rebuild
from dsl.ir import nodes as N
from dsl.ir.relations import Relations
from dsl.ir.types import ArrayType, ScalarType, TensorMapType, TupleType, VoidType


@dataclass
class FnState:
    """Per-LLVM-function emission state."""
    fn: N.Function
    llfn: ir.Function
    b: ir.IRBuilder
    alloca_b: ir.IRBuilder
    params: dict[N.Param, Any] = field(default_factory=dict)
    vars: dict[N.Var, tuple[list[ir.Value], Any]] = field(default_factory=dict)
    # a variable's leaves as last stored or loaded in a block: a read later in the same block takes them, not
    # a load of each leaf (a 96-leaf fragment tuple read 96 times made 9216 loads; mem2reg removes them all, but
    # building and printing them was most of a big tile kernel's compile time)
    in_block: dict[N.Var, tuple[ir.Block, list[ir.Value]]] = field(default_factory=dict)
    loops: list[tuple[ir.Block, ir.Block]] = field(default_factory=list)   # (continue, break)
    ret_block: ir.Block | None = None
    ret_slot: Any = None
    fault_record: ir.Value | None = None
    known: set[tuple[Any, N.Var]] = field(default_factory=set)   # (array key, var) proven in range
    lanes: dict[tuple[Any, N.Var], Any] = field(default_factory=dict)   # chunk accesses moved out (chunks.py)
    chunk_rows: dict[tuple[Any, N.Var], list] = field(default_factory=dict)  # n-D chunk: its row, in range
    preloaded: dict[int, Any] = field(default_factory=dict)   # id(Load) -> value issued early (unroll.py)
    scope: Any = None                 # the function's DISubprogram (None: no line table)


@dataclass
class BuildOptions:
    arch_cc: int = 90
    fastmath: bool = False
    contract: bool = False            # fmul + fadd/fsub may fuse into fma (the tile switch fp_fusion)
    ftz: bool = False                 # f32 denormals flush to zero (the tile switch ftz, nvcc -ftz=true)
    arcp: bool = False                # a division may multiply by the divisor's reciprocal (tile div_reciprocal)
    inplace: frozenset[frozenset[str]] = frozenset()   # parameter-name pairs that may overlap
    invariant_loads: bool = True      # mark loads of read-only, non-overlapping arrays !invariant.load
    lineinfo: bool = False            # emit line tables (.file/.loc); off: the PTX has no debug trace
    requires: tuple[str, ...] = ()    # the kernel's `requires=` relations (checked before every launch)


class ModuleBuilder(ExprMixin, MemoryMixin, TileNodesMixin, UnrollMixin, LaunchMixin):
    def __init__(self, kernel: N.Function, options: BuildOptions | None = None):
        self.kernel = kernel
        self.opts = options or BuildOptions()
        self.module = ir.Module(name=kernel.name)
        self.module.triple = "nvptx64-nvidia-cuda"
        self.st: FnState | None = None
        self._functions: dict[int, ir.Function] = {}
        self._pending: list[N.Function] = []
        self._shared: dict[int, ir.GlobalVariable] = {}
        self._invariant_md = None
        self.kernel_symbol = kernel.name
        self.keep: set[str] = set()
        self.lines: LineTables | None = None    # set by build() when opts.lineinfo
        self.slow_paths: list = []              # dsl.perf.SlowPath records of this module (chunks.py)

    # ------------------------------------------------------------------ entry point
    def build(self) -> ir.Module:
        self._module_flags()
        if self.opts.lineinfo and self.kernel.loc is not N.NOLOC:
            self.lines = LineTables(self.module, self.kernel.loc.file)
        self._emit_kernel(self.kernel)
        while self._pending:
            self._emit_device(self._pending.pop())
        return self.module

    def _module_flags(self) -> None:
        """libdevice reads these through __nvvm_reflect: flush-to-zero only under opts.ftz, IEEE sqrt/div."""
        flags = [self.module.add_metadata([ir.Constant(T.I32, 4), ir.MetaDataString(self.module, k),
                                           ir.Constant(T.I32, v)])
                 for k, v in (("nvvm-reflect-ftz", int(self.opts.ftz)), ("nvvm-reflect-prec-sqrt", 1))]
        self.module.add_named_metadata("llvm.module.flags").operands.extend(flags)

    def _float_mode(self, attrs: set) -> None:
        """Under opts.ftz the f32 arithmetic of a function flushes denormals (NVPTX then picks the .ftz
        forms of add, mul, fma, ...), as libdevice does through its reflect flag."""
        if self.opts.ftz:
            _raw_attr(attrs, '"denormal-fp-math-f32"="preserve-sign,preserve-sign"')

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def call(self, name: str, ret: ir.Type, args: list[ir.Value], **kw) -> ir.Value:
        return self.st.b.call(self.declare(name, ret, [a.type for a in args]), args, **kw)

    # ------------------------------------------------------------------ kernel
    def _emit_kernel(self, fn: N.Function) -> None:
        if not isinstance(fn.return_type, VoidType):
            raise CodegenError(f"kernel {fn.name!r} must return nothing", fn.loc)
        lltys: list[ir.Type] = []
        for p in fn.params:
            if isinstance(p.type, ArrayType):
                lltys += [T.GENERIC_PTR] + [T.I64] * (2 * p.type.ndim)
            elif isinstance(p.type, ScalarType):
                lltys.append(T.I8 if p.type.kind == "bool" else T.scalar(p.type))
            elif isinstance(p.type, TensorMapType):
                lltys.append(T.GENERIC_PTR)
            else:
                raise CodegenError(f"kernel parameter {p.name!r} has unsupported type {p.type}", p.loc)
        if fn.uses_fault_record:
            lltys.append(T.GENERIC_PTR)
        llfn = ir.Function(self.module, ir.FunctionType(T.VOID, lltys), name=self.kernel_symbol)
        llfn.calling_convention = "ptx_kernel"
        llfn.attributes.add("nounwind")
        self._float_mode(llfn.attributes)
        self.keep.add(self.kernel_symbol)
        if fn.exact_block:
            _raw_attr(llfn.attributes, '"nvvm.reqntid"="%d,%d,%d"' % tuple(fn.exact_block))
        if fn.max_threads:
            _raw_attr(llfn.attributes, f'"nvvm.maxntid"="{int(fn.max_threads)}"')
        if fn.min_blocks:
            _raw_attr(llfn.attributes, f'"nvvm.minctasm"="{int(fn.min_blocks)}"')
        self.launch_attributes(fn, llfn.attributes)     # cluster directives (launch_codegen.py)
        self._begin(fn, llfn)
        args = iter(llfn.args)
        for p in fn.params:
            if isinstance(p.type, ArrayType):
                self.st.params[p] = self._kernel_array(p, args)
            elif isinstance(p.type, TensorMapType):   # .param .align 64 .b8 [128], read in place
                a = next(args)
                a.name = p.name
                _raw_attr(a.attributes, "byval([128 x i8])")
                _raw_attr(a.attributes, '"nvvm.grid_constant"')
                a.attributes.align = 64
                self.st.params[p] = self.st.b.ptrtoint(a, T.I64)
            else:
                a = next(args)
                a.name = p.name
                self.st.params[p] = (self.st.b.icmp_unsigned("!=", a, ir.Constant(T.I8, 0))
                                     if p.type.kind == "bool" else a)
        if fn.uses_fault_record:
            rec = next(args)
            rec.name = "fault_record"
            self.st.fault_record = rec
        self._share_equal_extents(fn)
        self.launch_entry(fn)                           # a pdl=True kernel's wait (launch_codegen.py)
        self._body(fn.body)
        self._finish_void()

    def _share_equal_extents(self, fn: N.Function) -> None:
        """An extent that a `requires=` equality (`u.shape == out.shape`, `len(a) == len(b)`) makes
        equal to an earlier array parameter's extent is read from that parameter. The launch contract
        checks the relation before every launch (the frontend's range proofs already rely on it), so
        the values are the same; sharing one LLVM value lets the optimiser see it: two C-layout arrays
        of one shape get one row-major offset (one multiply, one address) and one bounds compare."""
        if not self.opts.requires:
            return
        arrays = [(p, self.st.params[p]) for p in fn.params if isinstance(p.type, ArrayType)]
        rel = Relations(self.opts.requires, {p.name: p.type.ndim for p, _ in arrays})
        for j, (p, val) in enumerate(arrays):
            for k in range(p.type.ndim):
                here = (p.name, k)
                for q, earlier in arrays[:j]:
                    same = [a for a in range(q.type.ndim)
                            if rel.at_most(here, (q.name, a)) and rel.at_most((q.name, a), here)]
                    if same:
                        val.extents[k] = earlier.extents[same[0]]
                        break

    def _kernel_array(self, p: N.Param, args) -> ArrayVal:
        t: ArrayType = p.type
        ptr = next(args)
        ptr.name = p.name
        ext = [next(args) for _ in range(t.ndim)]
        strides = [next(args) for _ in range(t.ndim)]
        for k, (e, s) in enumerate(zip(ext, strides)):
            e.name, s.name = f"{p.name}.shape{k}", f"{p.name}.stride{k}"
        overlapping = any(p.name in pair for pair in self.opts.inplace)
        if not overlapping:
            ptr.add_attribute("noalias")
            if not t.writable:
                _raw_attr(ptr.attributes, "readonly")   # readonly + noalias -> ld.global.nc
        if t.aligned16:
            _raw_attr(ptr.attributes, "align 16")
        return ArrayVal(t, p.name, ptr, ext, strides, key=p,
                        invariant=not t.writable and not overlapping)

    # ------------------------------------------------------------------ device functions
    def function_for(self, fn: N.Function) -> ir.Function:
        """The LLVM function of a callee, declared on first use and emitted later."""
        got = self._functions.get(id(fn))
        if got is not None:
            return got
        params: list[ir.Type] = []
        for p in fn.params:
            params += [v.type for v in leaves(self._param_template(p))]
        if self._hidden_fault_param(fn):
            params.append(T.GENERIC_PTR)
        name = fn.extern_name or fn.export_name or f"{self.kernel.name}__{fn.name}_{len(self._functions)}"
        llfn = ir.Function(self.module, ir.FunctionType(self._ret_type(fn.return_type), params), name=name)
        llfn.attributes.add("nounwind")
        self._float_mode(llfn.attributes)
        if fn.extern_name is None:
            if fn.export_name:
                self.keep.add(name)
            else:
                llfn.linkage = "internal"
                llfn.attributes.add("alwaysinline")
            self._pending.append(fn)
        self._functions[id(fn)] = llfn
        return llfn

    def _hidden_fault_param(self, fn: N.Function) -> bool:
        return self.kernel.uses_fault_record and fn.extern_name is None and fn.export_name is None

    def _ret_type(self, t) -> ir.Type:
        if isinstance(t, VoidType):
            return T.VOID
        if isinstance(t, ScalarType):
            return T.scalar(t)
        if isinstance(t, TupleType):
            return ir.LiteralStructType([self._ret_type(e) for e in t.elems])
        raise CodegenError(f"device functions cannot return {t}")

    def _param_template(self, p: N.Param) -> Any:
        """A placeholder value with the shape of parameter p (for flattening its LLVM params)."""
        t = p.type
        if isinstance(t, ArrayType):
            u = ir.Constant(T.I64, 0)
            return ArrayVal(t, p.name, ir.Constant(T.pointer(t), None), [u] * t.ndim, [u] * t.ndim, key=p)
        if isinstance(t, ScalarType):
            return ir.Constant(T.scalar(t), 0)
        raise CodegenError(f"device function parameter {p.name!r} has unsupported type {t}", p.loc)

    def _emit_device(self, fn: N.Function) -> None:
        llfn = self._functions[id(fn)]
        self._begin(fn, llfn)
        args = iter(llfn.args)
        for p in fn.params:
            tmpl = self._param_template(p)
            val = rebuild(tmpl, args)
            if isinstance(val, ArrayVal):
                val.key = p
            self.st.params[p] = val
        if self._hidden_fault_param(fn):
            self.st.fault_record = next(args)
        rt = self._ret_type(fn.return_type)
        self.st.ret_block = llfn.append_basic_block("return")
        if rt != T.VOID:
            self.st.ret_slot = self.st.alloca_b.alloca(rt, name="retval")
        self._body(fn.body)
        if not self.st.b.block.is_terminated:
            self.st.b.branch(self.st.ret_block)
        self.st.b.position_at_end(self.st.ret_block)
        if rt == T.VOID:
            self.st.b.ret_void()
        else:
            self.st.b.ret(self.st.b.load(self.st.ret_slot, typ=rt))

    # ------------------------------------------------------------------ function plumbing
    def _begin(self, fn: N.Function, llfn: ir.Function) -> None:
        entry = llfn.append_basic_block("entry")
        body = llfn.append_basic_block("body")
        alloca_b = ir.IRBuilder(entry)
        alloca_b.branch(body)
        alloca_b.position_at_start(entry)
        self.st = FnState(fn, llfn, ir.IRBuilder(body), alloca_b)
        if self.lines is not None:
            # code no statement owns (parameter set-up, the return block) belongs to the `def` line
            self.st.scope = self.lines.subprogram(fn, llfn)
            if self.st.scope is not None:
                self.st.b.debug_metadata = self.lines.location(fn.loc, self.st.scope, fn.loc.file)

    def _finish_void(self) -> None:
        if not self.st.b.block.is_terminated:
            self.st.b.ret_void()

    def new_block(self, name: str) -> ir.Block:
        return self.st.llfn.append_basic_block(name)

    def after_terminator(self) -> None:
        """Statements after break/continue/return/exit are dead: give them an unreachable block."""
        self.st.b.position_at_end(self.new_block("dead"))

    def _body(self, stmts: list[N.Stmt]) -> None:
        for s in stmts:
            if self.st.b.block.is_terminated:
                self.after_terminator()
            self.stmt(s)

    def stmt(self, s: N.Stmt) -> None:
        method = getattr(self, "visit_" + type(s).__name__, None)
        if method is None:
            raise CodegenError(f"no code generation for statement {type(s).__name__}", s.loc)
        st = self.st
        if st.scope is None or s.loc is N.NOLOC:
            method(s)                     # a statement without a location keeps the enclosing one
            return
        outer = st.b.debug_metadata       # every instruction the statement emits carries its line;
        st.b.debug_metadata = self.lines.location(s.loc, st.scope, st.fn.loc.file)
        try:                              # what follows a nested body (branches) is the parent's
            method(s)
        finally:
            st.b.debug_metadata = outer

    # ------------------------------------------------------------------ variables
    def assign(self, var: N.Var, value: Any) -> None:
        slot = self.st.vars.get(var)
        if slot is None:
            allocas = [self.st.alloca_b.alloca(v.type, name=var.name) for v in leaves(value)]
            slot = (allocas, value)
            self.st.vars[var] = slot
        values = leaves(value)
        for a, v in zip(slot[0], values):
            self.st.b.store(v, a)
        self.st.in_block[var] = (self.st.b.block, values)

    def read_var(self, var: N.Var, loc: N.Loc) -> Any:
        """The variable's value: its allocas loaded, or within one basic block the leaves it last stored or
        loaded there (instructions of a block run in order, and only assign stores to these allocas)."""
        slot = self.st.vars.get(var)
        if slot is None:
            raise CodegenError(f"variable {var.name!r} read before assignment", loc)
        allocas, template = slot
        block = self.st.b.block
        seen = self.st.in_block.get(var)
        if seen is not None and seen[0] is block:
            return rebuild(template, iter(seen[1]))
        values = [self.st.b.load(a, typ=a.allocated_type) for a in allocas]
        self.st.in_block[var] = (block, values)
        return rebuild(template, iter(values))

    # ------------------------------------------------------------------ statements
    def visit_Assign(self, s: N.Assign) -> None:
        self.assign(s.var, self.expr(s.value))

    def visit_ExprStmt(self, s: N.ExprStmt) -> None:
        self.expr(s.value)

    def visit_If(self, s: N.If) -> None:
        cond = self.expr(s.cond)
        b = self.st.b
        then_bb, else_bb, end_bb = self.new_block("if.then"), self.new_block("if.else"), self.new_block("if.end")
        b.cbranch(cond, then_bb, else_bb)
        for bb, stmts in ((then_bb, s.then), (else_bb, s.else_)):
            b.position_at_end(bb)
            self._body(stmts)
            if not b.block.is_terminated:
                b.branch(end_bb)
        b.position_at_end(end_bb)

    def visit_While(self, s: N.While) -> None:
        b = self.st.b
        head, body, end = self.new_block("while.cond"), self.new_block("while.body"), self.new_block("while.end")
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(self.expr(s.cond), body, end)
        b.position_at_end(body)
        self._loop_body(s.body, head, end)
        b.position_at_end(end)

    def _loop_body(self, stmts: list[N.Stmt], cont: ir.Block, brk: ir.Block) -> None:
        self.st.loops.append((cont, brk))
        self._body(stmts)
        self.st.loops.pop()
        if not self.st.b.block.is_terminated:
            self.st.b.branch(cont)

    def visit_ForRange(self, s: N.ForRange) -> None:
        if s.unroll > 1:
            self.visit_unrolled_for(s)      # groups of `unroll` copies, loads first (unroll.py)
            return
        b = self.st.b
        start, stop, step = self.expr(s.start), self.expr(s.stop), self.expr(s.step)
        signed = isinstance(s.var.type, ScalarType) and s.var.type.is_signed
        counter = self.st.alloca_b.alloca(start.type, name=f"{s.var.name}.iter")
        b.store(start, counter)
        head, body, latch, end = (self.new_block(n) for n in ("for.cond", "for.body", "for.latch", "for.end"))
        b.branch(head)
        b.position_at_end(head)
        i = b.load(counter, typ=start.type)
        lt = b.icmp_signed("<", i, stop) if signed else b.icmp_unsigned("<", i, stop)
        gt = b.icmp_signed(">", i, stop) if signed else b.icmp_unsigned(">", i, stop)
        zero = ir.Constant(step.type, 0)
        if isinstance(s.step, N.Const):
            v = int(s.step.value)
            cond = lt if v > 0 else (gt if v < 0 else ir.Constant(T.I1, 0))
        elif signed:
            up = b.icmp_signed(">", step, zero)
            down = b.icmp_signed("<", step, zero)
            cond = b.or_(b.and_(up, lt), b.and_(down, gt))
        else:
            cond = b.and_(b.icmp_unsigned("!=", step, zero), lt)
        b.cbranch(cond, body, end)
        b.position_at_end(body)
        self.assign(s.var, i)
        self._loop_body(s.body, latch, end)
        b.position_at_end(latch)
        b.store(b.add(b.load(counter, typ=start.type), step), counter)
        b.branch(head)
        b.position_at_end(end)

    def visit_Break(self, s: N.Break) -> None:
        if not self.st.loops:
            raise CodegenError("break outside a loop", s.loc)
        self.st.b.branch(self.st.loops[-1][1])

    def visit_Continue(self, s: N.Continue) -> None:
        if not self.st.loops:
            raise CodegenError("continue outside a loop", s.loc)
        self.st.b.branch(self.st.loops[-1][0])

    def visit_Return(self, s: N.Return) -> None:
        b = self.st.b
        if self.st.ret_block is None:          # kernel
            if s.value is not None:
                raise CodegenError("a kernel cannot return a value", s.loc)
            b.ret_void()
            return
        if s.value is not None:
            val = self.expr(s.value)
            if isinstance(self.st.ret_slot.allocated_type, ir.LiteralStructType):
                agg = ir.Constant(self.st.ret_slot.allocated_type, ir.Undefined)
                for k, leaf in enumerate(leaves(val)):
                    agg = b.insert_value(agg, leaf, k)
                val = agg
            b.store(val, self.st.ret_slot)
        b.branch(self.st.ret_block)

    def visit_SyncThreads(self, s: N.SyncThreads) -> None:
        from dsl.backend.intrinsics import BARRIER
        fn = self.declare(BARRIER, T.VOID, [])
        fn.attributes.add("convergent")
        self.st.b.call(fn, [])


def _raw_attr(attrs: set, text: str) -> None:
    """Add an attribute llvmlite's whitelist does not know (LLVM 22 spellings: `readonly` on a
    parameter, `align 16`, string attributes such as "nvvm.reqntid"). Printed verbatim."""
    set.add(attrs, text)
