"""Nodes of the typed kernel IR: a structured (tree-shaped) IR with explicit types on every value.

Structured control flow (If/While/ForRange) keeps two consumers simple: the llvmlite code generator
(dsl/backend) builds the CFG, and the CPU simulator (dsl/sim) runs all threads of a block at once with
masks. Every node carries a source location for diagnostics and fault reports.

Conventions:
- Locals are mutable variables (`Var`), declared once per function with a fixed type; codegen turns them
  into allocas (mem2reg makes SSA), the simulator into per-thread NumPy vectors.
- Integer `//` and `%` follow C semantics (truncation toward zero), see docs/dsl.md.
- Memory accesses say how they are checked: `check="none"` (proven in range or boundscheck=False) or
  `check="fault"` (run-time check; on failure record fault site `site` and exit the thread).
- Guarded stores (`Store.mode == "guarded"`) silently do nothing when out of range: the DisjointSlice
  write at a ThreadIndex. The frontend wraps the whole statement in `GuardedRegion` so the loads feeding
  it are skipped too (and known in range where a contract relation says so).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsl.ir.types import (BOOL, INDEX, VOID, ArrayType, ChunkType, ScalarType, SlotType,
                          ThreadIndexType, TupleType, Type)


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    col: int
    text: str = ""          # the source line, for messages

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NOLOC = Loc("<unknown>", 0, 0)


# ------------------------------------------------------------------------------------------- values
class Expr:
    type: Type
    loc: Loc


@dataclass(eq=False)
class Const(Expr):
    value: Any              # int, float or bool (Python value, already representable in `type`)
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Var:
    """A local variable (or a by-value parameter copy). Identity matters, not the name."""
    name: str
    type: Type
    loc: Loc = NOLOC


@dataclass(eq=False)
class Param:
    name: str
    type: Type              # ScalarType or ArrayType
    index: int
    loc: Loc = NOLOC


@dataclass(eq=False)
class ReadVar(Expr):
    var: Var
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return self.var.type


@dataclass(eq=False)
class ParamRef(Expr):
    param: Param
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return self.param.type


@dataclass(eq=False)
class BinOp(Expr):
    """op: add sub mul truediv floordiv mod pow and_ or_ xor lshift rshift min max copysign.
    Operands have the same type as the result (the frontend inserts Casts), except shifts
    (right operand any int) and pow with an integer exponent on a float base."""
    op: str
    lhs: Expr
    rhs: Expr
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class UnaryOp(Expr):
    """op: neg, not_ (bool), invert (ints), abs."""
    op: str
    operand: Expr
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Compare(Expr):
    """op: eq ne lt le gt ge. Operands share one type (frontend casts). Result is bool.
    Float comparisons are ordered (NaN compares false) except `ne` (unordered), like Python."""
    op: str
    lhs: Expr
    rhs: Expr
    loc: Loc = NOLOC
    type: ScalarType = BOOL


@dataclass(eq=False)
class Logical(Expr):
    """Short-circuit `and` / `or` on bools (op: "and" | "or")."""
    op: str
    lhs: Expr
    rhs: Expr
    loc: Loc = NOLOC
    type: ScalarType = BOOL


@dataclass(eq=False)
class IfExp(Expr):
    """`a if cond else b`: lazy (only the chosen side is evaluated)."""
    cond: Expr
    then: Expr
    else_: Expr
    type: Type
    loc: Loc = NOLOC


@dataclass(eq=False)
class Cast(Expr):
    """Numeric conversion with C semantics (float→int truncates toward zero; out-of-range is
    saturated like PTX cvt.rzi.sat is NOT assumed: the result is what `cvt.rzi` gives); bool→x is 0/1;
    x→bool is x != 0."""
    operand: Expr
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class ArrayLen(Expr):
    """Extent of `array` along `axis` (len(a) is axis 0). INDEX typed."""
    array: Expr
    axis: int
    loc: Loc = NOLOC
    type: ScalarType = INDEX


@dataclass(eq=False)
class Load(Expr):
    """array[indices]; each index is INDEX typed. check: "none" | "fault". site: fault-site id."""
    array: Expr
    indices: list[Expr]
    check: str
    site: int
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class ThreadIndexValue(Expr):
    """simt.thread.index_Nd(): global thread index, components in array-index order."""
    ndim: int
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return ThreadIndexType(self.ndim)


@dataclass(eq=False)
class OwnerIndexValue(Expr):
    """`simt.warp.index_1d()` (scope "warp": the global warp number, (blockIdx.x * blockDim.x +
    threadIdx.x) // 32), `simt.warp.group(n).index_1d()` ("group<n>": the same // n) or
    `simt.block.index_1d()` ("block": blockIdx.x). Like a ThreadIndex it is read
    through TupleGet(.., 0), so the front end can tell the unforgeable value from arithmetic on it
    (dsl/frontend/ownership.py)."""
    scope: str
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return TupleType((INDEX,))

    @property
    def width(self) -> int | None:
        return scope_width(self.scope)


def scope_width(scope: str) -> int | None:
    """Lanes of an owning group: "warp" 32, "group8" 8 (`simt.warp.group(8)`), "block" None."""
    if scope == "block":
        return None
    return 32 if scope == "warp" else int(scope.removeprefix("group"))


@dataclass(eq=False)
class TupleGet(Expr):
    """Component k of a ThreadIndex (or other tuple-typed value). Result is a plain INDEX int."""
    value: Expr
    k: int
    type: Type
    loc: Loc = NOLOC


@dataclass(eq=False)
class MakeTuple(Expr):
    elems: list[Expr]
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return TupleType(tuple(e.type for e in self.elems))


@dataclass(eq=False)
class ChunkValue(Expr):
    """simt.thread.chunk_Nd(n): start = global_thread_id_x * n along the last array axis (ndim 1: the
    only one); the other axes are the ThreadIndex components 0..ndim-2 of an ndim-D launch."""
    n: int
    loc: Loc = NOLOC
    ndim: int = 1

    @property
    def type(self) -> Type:  # type: ignore[override]
        return ChunkType(self.n, self.ndim)


@dataclass(eq=False)
class ChunkStart(Expr):
    chunk: Expr
    loc: Loc = NOLOC
    type: ScalarType = INDEX


@dataclass(eq=False)
class Special(Expr):
    """A hardware register: "tid.x" "tid.y" "tid.z" "ntid.*" "ctaid.*" "nctaid.*" "laneid" "warpsize".
    Typed INDEX (i64) for uniformity (the backend reads 32-bit registers and widens)."""
    name: str
    loc: Loc = NOLOC
    type: ScalarType = INDEX


@dataclass(eq=False)
class Math(Expr):
    """Math function on floats with CUDA accuracy: `fn` is a row of the math table, dsl/vocab/math.py
    (sqrt, exp, pow, fma, ...); predicates (isnan, isinf) have type bool."""
    fn: str
    args: list[Expr]
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Atomic(Expr):
    """Atomic read-modify-write on array[indices]; returns the old value.
    op: add sub min max exch and_ or_ xor cas (cas: args = [compare, value])."""
    op: str
    array: Expr
    indices: list[Expr]
    args: list[Expr]
    check: str
    site: int
    type: ScalarType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Warp(Expr):
    """Warp-synchronous op over the full warp (mask 0xffffffff), or with `width` n < 32 over the
    executing lane's aligned group of n lanes (mask = those lanes; `simt.warp.group(n)`, whose
    operations read only lanes of their own group).
    op: shfl (args value, src_lane) shfl_up/shfl_down (value, delta) shfl_xor (value, lane_mask),
    ballot (pred) -> u32, any/all (pred) -> bool, sum (value) -> value's type (butterfly reduction;
    every lane gets the sum)."""
    op: str
    args: list[Expr]
    type: ScalarType
    loc: Loc = NOLOC
    width: int = 32


@dataclass(eq=False)
class Call(Expr):
    """Call of a @simt.device function (always inlined by the backend) or an extern device function."""
    callee: "Function"
    args: list[Expr]
    type: Type
    loc: Loc = NOLOC


@dataclass(eq=False)
class SharedArray(Expr):
    """Reference to a shared-memory allocation declared in Function.shared."""
    alloc: "SharedAlloc"
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return self.alloc.type


@dataclass(eq=False)
class SlotCheck(Expr):
    """`slot is not None` for a get_mut() slot (bool)."""
    slot: Expr
    loc: Loc = NOLOC
    type: ScalarType = BOOL


@dataclass(eq=False)
class GetMut(Expr):
    """out.get_mut(index): a SlotType value = (array, index, in_range)."""
    array: Expr
    indices: list[Expr]
    loc: Loc = NOLOC

    @property
    def type(self) -> Type:  # type: ignore[override]
        return SlotType(self.array.type)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------- statements
class Stmt:
    loc: Loc


@dataclass(eq=False)
class Assign(Stmt):
    var: Var
    value: Expr
    loc: Loc = NOLOC


@dataclass(eq=False)
class Store(Stmt):
    """array[indices] = value.
    mode: "guarded" (skip silently when out of range: DisjointSlice at a ThreadIndex/owned index),
          "checked" (run-time check → fault site `site`), "unchecked" (proven or boundscheck=False).
    proven: a "guarded" store whose indices the frontend proved in range (the test would always pass,
    so the backend emits none; the simulator still tests and reports a wrong proof)."""
    array: Expr
    indices: list[Expr]
    value: Expr
    mode: str
    site: int
    loc: Loc = NOLOC
    proven: bool = False


@dataclass(eq=False)
class SlotSet(Stmt):
    """slot.set(value): only reachable where the frontend proved SlotCheck(slot) is true."""
    slot: Expr
    value: Expr
    loc: Loc = NOLOC


@dataclass(eq=False)
class GuardedRegion(Stmt):
    """Run `body` only when every index in `indices` is within `array`'s extents (the guarded
    DisjointSlice write and the loads that feed it). Threads outside do nothing, silently.
    `proven`: the frontend proved the indices in range wherever the region is reached (an enclosing
    `if r > 0 and r < u.shape[0] - 1 ...` with `requires=["u.shape == out.shape"]`): the backend runs
    the body without a test; the simulator still tests and reports a wrong proof."""
    array: Expr
    indices: list[Expr]
    body: list[Stmt]
    loc: Loc = NOLOC
    proven: bool = False


@dataclass(eq=False)
class If(Stmt):
    """`concurrent`: the two sides are roles of one block that wait on each other (a warp-specialised
    kernel's producer and consumer warps, synchronised by mbarriers); code generation is the same,
    the simulator runs the sides as coroutines (dsl/sim/roles.py)."""
    cond: Expr
    then: list[Stmt]
    else_: list[Stmt]
    loc: Loc = NOLOC
    concurrent: bool = False


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: list[Stmt]
    loc: Loc = NOLOC


@dataclass(eq=False)
class ForRange(Stmt):
    """for var in range(start, stop, step): all INDEX-or-int typed like var. `step` may be negative;
    if it is a Const the backend specialises the comparison, else it tests the sign at run time.
    The trip count is fixed when the loop starts (Python semantics: stop/step evaluated once).
    `unroll`: the `unroll=N` hint (1..64; 1: none): the back end runs the body in groups of N copies
    (dsl/backend/unroll.py); the meaning is the same, the simulator ignores it."""
    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]
    loc: Loc = NOLOC
    unroll: int = 1


@dataclass(eq=False)
class ChunkLoop(Stmt):
    """for var in chunk: var (an INDEX Var) takes start..start+n-1. Guarded on
    `array` (the DisjointSlice the chunk indexes): the backend emits a vectorisable fast path when the
    whole chunk is in range and a per-element guarded path otherwise. `lead` (n-D chunks): the row's
    indices along the array's other axes (the ThreadIndex components); the loop runs only when they
    are inside `array`, and `var` runs along its last axis."""
    var: Var
    chunk: Expr
    array: Expr
    body: list[Stmt]
    loc: Loc = NOLOC
    lead: list[Expr] = field(default_factory=list)


@dataclass(eq=False)
class Break(Stmt):
    loc: Loc = NOLOC


@dataclass(eq=False)
class Continue(Stmt):
    loc: Loc = NOLOC


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None = None
    loc: Loc = NOLOC


@dataclass(eq=False)
class ExprStmt(Stmt):
    value: Expr
    loc: Loc = NOLOC


@dataclass(eq=False)
class SyncThreads(Stmt):
    loc: Loc = NOLOC


# ------------------------------------------------------------------------------------ containers
@dataclass(eq=False)
class SharedAlloc:
    """One shared-memory allocation of a kernel, the only kind both front ends use (SIMT
    `simt.shared.array` / `simt.shared.dynamic`, the tile lowering's scratch buffers and tensor-core
    operand stages). Static: `type.shape` is its fixed shape. Dynamic: `type.shape == (-1,)`: a view
    of the kernel's dynamic shared memory (the one `extern` symbol every dynamic allocation aliases;
    its length comes from the launch). `align`: byte alignment of the start (static buffers; for
    dynamic ones the extern symbol gets the largest alignment any of them asks for). `offset`: where
    a dynamic view starts, in bytes into the dynamic shared memory (a multiple of `align`), so one
    kernel can lay several buffers side by side there."""
    name: str
    type: ArrayType          # space="shared", static shape (or (-1,) for dynamic)
    loc: Loc = NOLOC
    align: int = 16
    offset: int = 0

    @property
    def dynamic(self) -> bool:
        return self.type.shape is None or -1 in self.type.shape


@dataclass(frozen=True)
class FaultSite:
    id: int                  # 1-based, unique within one compiled kernel
    array: str               # parameter or shared array name
    loc: Loc


@dataclass(eq=False)
class Function:
    """A kernel (is_kernel) or a device function, fully typed."""
    name: str
    params: list[Param]
    return_type: Type
    body: list[Stmt]
    is_kernel: bool
    loc: Loc = NOLOC
    locals: list[Var] = field(default_factory=list)
    shared: list[SharedAlloc] = field(default_factory=list)
    fault_sites: list[FaultSite] = field(default_factory=list)
    callees: list["Function"] = field(default_factory=list)
    # kernel launch facts the backend turns into PTX directives (.reqntid / .maxntid)
    exact_block: tuple[int, int, int] | None = None
    max_threads: int | None = None
    min_blocks: int | None = None   # .minnctapersm: setmaxnreg kernels (ptxas sizes the register pool by it)
    boundscheck: bool = True
    # extern device functions (C name, link inputs) resolved at link time (C++ interop)
    extern_name: str | None = None
    link: tuple[str, ...] = ()
    export_name: str | None = None   # @simt.device(export="c_name"): emitted with this C symbol
    # launch features of a kernel (dsl/vocab/launch.py): PDL (griddepcontrol.wait at entry unless the body
    # waits), a cooperative grid (grid.sync's barrier word), a thread-block cluster (.reqnctapercluster)
    pdl: bool = False
    cooperative: bool = False
    cluster: tuple[int, int, int] | None = None

    @property
    def uses_fault_record(self) -> bool:
        return bool(self.fault_sites)


__all__ = [n for n in dir() if not n.startswith("_")] + ["VOID", "TupleType", "ScalarType", "ArrayType"]
