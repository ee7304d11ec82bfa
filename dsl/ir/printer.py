"""Readable text form of the typed IR (the `ir` stage dump, test failure messages).

One line per statement, nested blocks indented; expressions print inline with their type where it
is not obvious (`load.fault#1 a[i]: f32`). Variables print as `name.N` (N = first-seen order) because
identity, not the name, distinguishes them.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.verify import callees_of


class _Printer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.lines: list[str] = []

    def var(self, v: N.Var) -> str:
        if id(v) not in self.names:
            self.names[id(v)] = f"{v.name}.{len(self.names)}"
        return self.names[id(v)]

    # ------------------------------------------------------------------ expressions
    def e(self, x) -> str:
        m = getattr(self, "e_" + type(x).__name__, None)
        return m(x) if m else f"<{type(x).__name__}>"

    def idx(self, xs) -> str:
        return ", ".join(self.e(i) for i in xs)

    def e_Const(self, x: N.Const) -> str:
        return f"{x.value!r}:{x.type}"

    def e_ReadVar(self, x: N.ReadVar) -> str:
        return self.var(x.var)

    def e_ParamRef(self, x: N.ParamRef) -> str:
        return f"%{x.param.name}"

    def e_BinOp(self, x: N.BinOp) -> str:
        return f"{x.op}({self.e(x.lhs)}, {self.e(x.rhs)}):{x.type}"

    def e_UnaryOp(self, x: N.UnaryOp) -> str:
        return f"{x.op}({self.e(x.operand)}):{x.type}"

    def e_Compare(self, x: N.Compare) -> str:
        return f"{x.op}({self.e(x.lhs)}, {self.e(x.rhs)})"

    def e_Logical(self, x: N.Logical) -> str:
        return f"({self.e(x.lhs)} {x.op} {self.e(x.rhs)})"

    def e_IfExp(self, x: N.IfExp) -> str:
        return f"({self.e(x.then)} if {self.e(x.cond)} else {self.e(x.else_)})"

    def e_Cast(self, x: N.Cast) -> str:
        return f"{x.type}({self.e(x.operand)})"

    def e_ArrayLen(self, x: N.ArrayLen) -> str:
        return f"{self.e(x.array)}.shape[{x.axis}]"

    def e_Load(self, x: N.Load) -> str:
        chk = f".fault#{x.site}" if x.check == "fault" else ""
        return f"load{chk} {self.e(x.array)}[{self.idx(x.indices)}]:{x.type}"

    def e_ThreadIndexValue(self, x: N.ThreadIndexValue) -> str:
        return f"thread.index_{x.ndim}d()"

    def e_OwnerIndexValue(self, x: N.OwnerIndexValue) -> str:
        return f"{x.scope}.index_1d()"

    def e_TupleGet(self, x: N.TupleGet) -> str:
        return f"{self.e(x.value)}[{x.k}]"

    def e_MakeTuple(self, x: N.MakeTuple) -> str:
        return f"({self.idx(x.elems)},)"

    def e_ChunkValue(self, x: N.ChunkValue) -> str:
        return f"thread.chunk_{x.ndim}d({x.n})"

    def e_ChunkStart(self, x: N.ChunkStart) -> str:
        return f"{self.e(x.chunk)}.start"

    def e_Special(self, x: N.Special) -> str:
        return f"%{x.name}"

    def e_Math(self, x: N.Math) -> str:
        return f"math.{x.fn}({self.idx(x.args)}):{x.type}"

    def e_Atomic(self, x: N.Atomic) -> str:
        chk = f".fault#{x.site}" if x.check == "fault" else ""
        return f"atomic.{x.op}{chk}({self.e(x.array)}[{self.idx(x.indices)}], {self.idx(x.args)}):{x.type}"

    def e_Warp(self, x: N.Warp) -> str:
        return f"warp.{x.op}({self.idx(x.args)}):{x.type}"

    def e_Call(self, x: N.Call) -> str:
        return f"call {x.callee.name}({self.idx(x.args)}):{x.type}"

    def e_SharedArray(self, x: N.SharedArray) -> str:
        return f"@{x.alloc.name}"

    def e_SlotCheck(self, x: N.SlotCheck) -> str:
        return f"is_some({self.e(x.slot)})"

    def e_GetMut(self, x: N.GetMut) -> str:
        return f"get_mut {self.e(x.array)}[{self.idx(x.indices)}]"

    def e_LaunchOp(self, x) -> str:            # dsl/ir/launch_nodes.py
        return f"{x.op}({self.idx(x.args)})"

    def e_ClusterShared(self, x) -> str:
        return f"@{x.alloc.name}@rank({self.e(x.rank)})"

    # ------------------------------------------------------------------ statements
    def block(self, stmts, depth: int) -> None:
        if not stmts:
            self.lines.append("  " * depth + "pass")
        for s in stmts:
            self.s(s, depth)

    def s(self, x, d: int) -> None:
        pad = "  " * d
        add = self.lines.append
        k = type(x).__name__
        if isinstance(x, N.Assign):
            add(f"{pad}{self.var(x.var)}: {x.var.type} = {self.e(x.value)}")
        elif isinstance(x, N.Store):
            site = f"#{x.site}" if x.mode == "checked" else ""
            add(f"{pad}store.{x.mode}{site} {self.e(x.array)}[{self.idx(x.indices)}] = {self.e(x.value)}")
        elif isinstance(x, N.SlotSet):
            add(f"{pad}slot_set {self.e(x.slot)} = {self.e(x.value)}")
        elif isinstance(x, N.GuardedRegion):
            add(f"{pad}guarded{' (proven)' if x.proven else ''} {self.e(x.array)}[{self.idx(x.indices)}]:")
            self.block(x.body, d + 1)
        elif isinstance(x, N.If):
            add(f"{pad}if {self.e(x.cond)}:")
            self.block(x.then, d + 1)
            if x.else_:
                add(f"{pad}else:")
                self.block(x.else_, d + 1)
        elif isinstance(x, N.While):
            add(f"{pad}while {self.e(x.cond)}:")
            self.block(x.body, d + 1)
        elif isinstance(x, N.ForRange):
            hint = f", unroll={x.unroll}" if x.unroll != 1 else ""
            add(f"{pad}for {self.var(x.var)} in range({self.e(x.start)}, {self.e(x.stop)}, {self.e(x.step)}{hint}):")
            self.block(x.body, d + 1)
        elif isinstance(x, N.ChunkLoop):
            row = f"[{self.idx(x.lead)}, :]" if x.lead else ""
            add(f"{pad}for {self.var(x.var)} in {self.e(x.chunk)} guarded {self.e(x.array)}{row}:")
            self.block(x.body, d + 1)
        elif isinstance(x, N.Return):
            add(f"{pad}return" + (f" {self.e(x.value)}" if x.value is not None else ""))
        elif isinstance(x, N.ExprStmt):
            add(f"{pad}{self.e(x.value)}")
        else:   # Break, Continue, SyncThreads
            add(f"{pad}{k.lower()}")

    def function(self, fn: N.Function) -> None:
        kind = "kernel" if fn.is_kernel else "device"
        params = ", ".join(f"{p.name}: {p.type}" for p in fn.params)
        facts = []
        if fn.exact_block:
            facts.append(f"block={fn.exact_block}")
        if fn.max_threads:
            facts.append(f"launch_bounds={fn.max_threads}")
        if fn.export_name:
            facts.append(f"export={fn.export_name!r}")
        facts += [k for k in ("pdl", "cooperative") if getattr(fn, k, False)]
        if getattr(fn, "cluster", None):
            facts.append(f"cluster={fn.cluster}")
        if fn.extern_name:
            facts.append(f"extern={fn.extern_name!r}")
        self.lines.append(f"{kind} {fn.name}({params}) -> {fn.return_type}"
                          + (f"  [{', '.join(facts)}]" if facts else "") + ":")
        for a in fn.shared:
            self.lines.append(f"  shared @{a.name}: {a.type} shape={a.type.shape}")
        for f in fn.fault_sites:
            self.lines.append(f"  fault_site #{f.id} {f.array} at {f.loc}")
        if fn.extern_name is None:
            self.block(fn.body, 1)


def format_function(fn: N.Function, with_callees: bool = True) -> str:
    """The function (and, by default, every device function it calls, once each) as text."""
    p = _Printer()
    for f in [fn, *(callees_of(fn) if with_callees else [])]:
        if p.lines:
            p.lines.append("")
        p.function(f)
    return "\n".join(p.lines) + "\n"
