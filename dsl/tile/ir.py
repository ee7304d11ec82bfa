"""The tile IR: a small structured IR whose values are whole tiles with static shapes.

The front end (dsl/tile/frontend.py) builds it with every shape and dtype resolved and every implicit
broadcast made explicit (`Broadcast`), so the simulator (NumPy per tile block) and the lowering onto the
SIMT IR (dsl/tile/lower/kernel.py) never infer anything. Every node carries a `dsl.ir.nodes.Loc`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dsl.ir.nodes import NOLOC, Loc
from dsl.tile.types import ArrayParamType, PartitionParamType, ScalarParamType, TileType


class TExpr:
    type: TileType
    loc: Loc


@dataclass(eq=False)
class TParam:
    name: str
    type: ArrayParamType | PartitionParamType | ScalarParamType
    index: int


@dataclass(eq=False)
class TVar:
    name: str
    type: TileType


@dataclass(eq=False)
class Const(TExpr):
    value: object            # Python int/float/bool
    type: TileType           # shape ()
    loc: Loc = NOLOC


@dataclass(eq=False)
class ScalarArg(TExpr):
    param: TParam
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Read(TExpr):
    var: TVar
    loc: Loc = NOLOC

    @property
    def type(self) -> TileType:  # type: ignore[override]
        return self.var.type


@dataclass(eq=False)
class BlockId(TExpr):
    """tile.bid(axis): this tile block's coordinate along axis `axis` of the grid (i32 scalar). With
    `param`, a partition of another ndim than the grid's: the block's tile in it, the block's
    row-major tile number unravelled over that partition's tiles (`p.load()` reads it)."""
    axis: int
    type: TileType
    loc: Loc = NOLOC
    param: TParam | None = None


@dataclass(eq=False)
class NumBlocks(TExpr):
    """tile.num_blocks(axis): tiles of the grid along `axis`; with `param`, of that partition."""
    axis: int
    type: TileType
    loc: Loc = NOLOC
    param: TParam | None = None


@dataclass(eq=False)
class ArrayDim(TExpr):
    """a.shape[axis] of an array or partition parameter (i32 scalar; extents must fit i32)."""
    param: TParam
    axis: int
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Load(TExpr):
    """Tile `index` (in tile units) of `param`, shape `type.shape`; elements outside the array read
    `padding`. `param` is an Array or a Partition (own tile only, index is then the block's tile)."""
    param: TParam
    index: list[TExpr]
    padding: object
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class BinOp(TExpr):
    """Elementwise: add sub mul truediv floordiv mod pow min max and_ or_ xor lshift rshift.
    Operands already have the result's shape and dtype. floordiv/mod: Python (floor) semantics."""
    op: str
    lhs: TExpr
    rhs: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class UnaryOp(TExpr):
    """neg, not_ (bool), invert (ints), abs."""
    op: str
    operand: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Compare(TExpr):
    """eq ne lt le gt ge; operands share shape and dtype; result dtype bool."""
    op: str
    lhs: TExpr
    rhs: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Math(TExpr):
    """Float math: `fn` is a row of the math table, dsl/vocab/math.py (the names of dsl.ir.nodes.Math);
    predicates (isnan, isinf) give bool."""
    fn: str
    args: list[TExpr]
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Where(TExpr):
    cond: TExpr
    then: TExpr
    else_: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Cast(TExpr):
    operand: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Broadcast(TExpr):
    """NumPy broadcasting of `operand` to `type.shape` (operand's rank may be lower)."""
    operand: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Reduce(TExpr):
    """op: sum max min argmax argmin along `axis` (None = all axes). sum accumulates f16/bf16 in
    f32. argmax/argmin: first index of the extreme value, i32 (flat index when axis is None)."""
    op: str
    operand: TExpr
    axis: int | None
    keepdims: bool
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Reshape(TExpr):
    operand: TExpr
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Permute(TExpr):
    operand: TExpr
    axes: tuple[int, ...]
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Matmul(TExpr):
    """acc + a @ b over the last two axes; f16/bf16 inputs and tf32 (f32 inputs) with f32 result."""
    a: TExpr
    b: TExpr
    acc: TExpr | None
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Full(TExpr):
    value: object
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Arange(TExpr):
    """0, 1, ..., n-1 as a 1-D tile."""
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Gather(TExpr):
    """tile.gather: element e is `param`[indices[0][e], ..., indices[n-1][e]] (one integer index tile
    per axis of the array, all of `type.shape`), or `padding` where an index is outside the array or
    `mask` (a bool tile of `type.shape`, or None) is False. `param` is a read-only tile.Array."""
    param: TParam
    indices: list[TExpr]
    padding: object
    mask: TExpr | None
    type: TileType
    loc: Loc = NOLOC


@dataclass(eq=False)
class Arrival(TExpr):
    """The condition of `if tile.arrive(counter, index, count):` (dsl/tile/arrivals.py), and only that: every
    block that reaches it adds one to `counter`[`index`] once its earlier updates of memory are done and
    visible; true in the block whose arrival is the `count`-th, which then sees every arrived block's updates,
    owns the tiles of the tile.Atomic arrays whose leading index components are `index` inside the branch, and
    sets the counter element back to zero. A side effect: evaluated once, where its `If` stands (the simulator
    and the lowering look for it there)."""
    counter: TParam
    index: list[TExpr]       # i32 scalars, one per axis of the counter
    count: TExpr             # i32 scalar
    type: TileType           # bool scalar
    loc: Loc = NOLOC


@dataclass(eq=False)
class LaunchValue(TExpr):
    """tile.cluster_rank() / tile.cluster_size(): a launch-table row's value (dsl/vocab/launch.py,
    `op` its key), an i32 scalar."""
    op: str
    type: TileType
    loc: Loc = NOLOC


# --------------------------------------------------------------------------------------- statements
class TStmt:
    loc: Loc


@dataclass(eq=False)
class LaunchStmt(TStmt):
    """tile.pdl.wait(), tile.pdl.launch_dependents(), tile.grid_sync(), tile.cluster_sync(): a
    launch-table statement (dsl/vocab/launch.py, `op` its key; dsl/tile/launch.py)."""
    op: str
    loc: Loc = NOLOC


@dataclass(eq=False)
class Assign(TStmt):
    var: TVar
    value: TExpr
    loc: Loc = NOLOC


@dataclass(eq=False)
class Store(TStmt):
    """Write `value` (shape == the partition's tile shape) to this block's own tile of `param`;
    elements past the array's edge are skipped (edge masking). With `chunk`, `value` is a sub-tile
    whose shape divides the tile shape and `chunk` its index in units of that shape inside the
    block's own tile (dsl/tile/chunks.py): a chunk outside the tile writes nothing."""
    param: TParam
    value: TExpr
    loc: Loc = NOLOC
    chunk: list[TExpr] | None = None


@dataclass(eq=False)
class For(TStmt):
    var: TVar                # i32 scalar
    start: TExpr
    stop: TExpr
    step: TExpr
    body: list[TStmt]
    loc: Loc = NOLOC


@dataclass(eq=False)
class If(TStmt):
    cond: TExpr              # bool scalar (uniform across the tile block)
    then: list[TStmt]
    else_: list[TStmt]
    loc: Loc = NOLOC


@dataclass(eq=False)
class Scatter(TStmt):
    """tile.atomic_<op> / tile.scatter_<op> (dsl/tile/atomics.py): element e of `value` is combined
    atomically (`op`: add, max, min) into `param`[indices[0][e], ...] (index tiles and `mask` of the
    value's shape); elements whose index is outside the array, or whose `mask` is False, are skipped.
    `param` is a tile.Atomic array: any block may update any element, and nothing stores it."""
    op: str
    param: TParam
    indices: list[TExpr]
    value: TExpr
    mask: TExpr | None = None
    loc: Loc = NOLOC
    # the region form (tile.atomic_<op>): the region's index per axis, in tile units of the value's
    # shape, from which `indices` were made; a lowering may update the region as a whole (TMA reduce)
    region: list[TExpr] | None = None


@dataclass(eq=False)
class StoreAt(TStmt):
    """tile.store_at (dsl/tile/arrivals.py): `value` into the tile at `index` (tile units of its shape) of
    the tile.Atomic `param`, elements past the array's edge skipped; only in the branch of an `Arrival`
    whose index leads `index`, so the one block that won that arrival writes that tile."""
    param: TParam
    index: list[TExpr]
    value: TExpr
    loc: Loc = NOLOC


@dataclass(eq=False)
class TileFunction:
    name: str
    params: list[TParam]
    body: list[TStmt]
    grid_param: TParam       # the partition that defines the grid
    locals: list[TVar] = field(default_factory=list)
    loc: Loc = NOLOC
    requires: tuple[str, ...] = ()   # the kernel's `requires=` relations (the launch contract's)
    group_m: int | None = None       # block order: tile rows per group (None: 8 for GEMM kernels, else 1)
    launch: object = None            # the kernel's launch features (dsl.options.LaunchFeatures; None: none)
    # tile.block_order(run, group): (run, an i32 scalar of parameters and constants; group, an int >= 1 or None
    # for the lowering switch block_group's), the blocks' order over the grid's tiles (dsl/tile/lower/tiles.py
    # interleaved_tile); None: the natural order
    block_order: tuple | None = None


def walk_stmts(body: list):
    """Yield every statement of `body`, nested loop and branch bodies included (pre-order)."""
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then)
            yield from walk_stmts(s.else_)


# The fields of an expression that hold one sub-expression, and those that hold a list of them
EXPR_FIELDS = ("operand", "lhs", "rhs", "cond", "then", "else_", "a", "b", "acc", "mask", "count")
LIST_FIELDS = ("args", "index", "indices")


def walk_exprs(e: TExpr):
    """Yield `e` and all sub-expressions (pre-order)."""
    yield e
    for name in EXPR_FIELDS:
        sub = getattr(e, name, None)
        if isinstance(sub, TExpr):
            yield from walk_exprs(sub)
    for name in LIST_FIELDS:
        for sub in getattr(e, name, None) or ():
            yield from walk_exprs(sub)


def stored_partitions(fn: TileFunction) -> set[str]:
    """The partitions `fn`'s body stores: writable in the lowered kernel (lowered_params) and in an op's plan;
    one only loaded (a grid over an input) is read-only."""
    return {s.param.name for s in walk_stmts(fn.body) if isinstance(s, Store)}


def body_exprs(body: list):
    """Yield every expression of the statements of `body`, nested bodies included."""
    for s in body:
        if isinstance(s, (Assign, Store)):
            yield from walk_exprs(s.value)
            for c in getattr(s, "chunk", None) or ():
                yield from walk_exprs(c)
        elif isinstance(s, Scatter):
            for x in (*s.indices, s.value, *([s.mask] if s.mask is not None else [])):
                yield from walk_exprs(x)
        elif isinstance(s, StoreAt):
            for x in (*s.index, s.value):
                yield from walk_exprs(x)
        elif isinstance(s, For):
            for x in (s.start, s.stop, s.step):
                yield from walk_exprs(x)
            yield from body_exprs(s.body)
        elif isinstance(s, If):
            yield from walk_exprs(s.cond)
            yield from body_exprs(s.then)
            yield from body_exprs(s.else_)

