"""Which tile a block owns: tile counts per partition, and tile.bid(k) from the block's linear id.

The grid is 1-D (x = linear tile id of the grid partition). It is unravelled row-major, or for GEMM
kernels in groups of GROUP_M tile rows (an L2-friendly order, a bijection of the row-major one), or
in groups of the kernel's own `@tile.kernel(group_m=)` rows. A
partition of another ndim than the grid partition (dsl/tile/types.tiles_by_number) owns tile b of
its own tile grid for the block whose row-major tile number is b; its counts and ids are kept apart
(`L.part_counts`, `L.part_ids`) and `Lowerer.tile_ids(p)` picks the right ones.
"""
from __future__ import annotations

from typing import Callable

from dsl.ir import nodes as N
from dsl.ir.types import I32, INDEX
from dsl.tile import ir as T
from dsl.tile.lower.layout import c32, log2
from dsl.tile.types import PartitionParamType, tiles_by_number

GROUP_M = 8         # tile-row group of the L2-friendly block order of GEMM kernels


def num_blocks(L) -> list[N.Expr]:
    """Tile blocks per grid axis (L.nblocks), and the tile counts of each partition matched to the grid
    by tile number (L.part_counts), computed once per kernel."""
    gp = L.fn.grid_param
    L.nblocks = tile_counts(L, gp)
    L.part_counts = {id(p): tile_counts(L, p) for p in L.fn.params
                     if isinstance(p.type, PartitionParamType) and tiles_by_number(p.type, gp.type)}
    return L.nblocks


def tile_counts(L, p: T.TParam) -> list[N.Expr]:
    """ceil(extent / tile) per axis of partition `p`."""
    nb = []
    for k, t in enumerate(p.type.tile_shape):  # type: ignore[union-attr]
        ext = N.ArrayLen(L.pref(p), k)
        n = N.BinOp("rshift", N.BinOp("add", ext, N.Const(t - 1, INDEX), INDEX), N.Const(log2(t), INDEX), INDEX)
        nb.append(L.tmp(N.Cast(n, I32), "nblocks"))
    return nb


def block_ids(L, lin: N.Expr, nb: list[N.Expr]) -> None:
    """tile.bid(k) from the linear tile id (L.bids: row-major, or grouped for GEMM kernels), and the
    block's tile in each partition matched by tile number (L.part_ids: its row-major number
    unravelled)."""
    group = block_group(L.fn, len(nb))
    grouped = group > 1
    L.bids = grouped_ids(L, lin, nb, group) if grouped else unravel_ids(L, lin, nb)
    if L.part_counts and grouped:     # the row-major number of the grouped tile
        lin = L.tmp(N.BinOp("add", N.BinOp("mul", L.bids[0], nb[1], I32), L.bids[1], I32), "tileno")
    L.part_ids = {pid: unravel_ids(L, lin, counts) for pid, counts in L.part_counts.items()}


def tile_number(L, lin: N.Expr, total: N.Expr) -> N.Expr:
    """The tile a block's linear number `lin` takes: itself, or in the kernel's tile.block_order
    (interleaved), and then under the lowering switch reverse_blocks total - 1 - that (the grid has a
    block a tile; a persistent block's tile loop counts up to the tile count): the last tiles first,
    where they hold the most work (causal attention's query blocks)."""
    if L.order_run is not None:
        lin = interleaved_tile(lin, total, L.order_run, order_group(L), _IrOps(L))
    if not L.reverse_blocks:
        return lin
    return L.tmp(N.BinOp("sub", N.BinOp("sub", total, c32(1), I32), lin, I32), "rbid")


def order_group(L) -> int:
    """Runs taken in turn: tile.block_order's `group`, or where it left it None the switch block_group's."""
    order = L.fn.block_order
    return 1 if order is None else order[1] if order[1] is not None else L.block_group


def order_run(L) -> N.Expr | None:
    """The kernel's tile.block_order run length, evaluated once (it reads parameters only), or None where
    the order is the natural one (no block_order, or a group of one run)."""
    if order_group(L) == 1:
        return None
    return L.tmp(L.scalar(L.fn.block_order[0]), "orun")


class _IrOps:
    """Integer steps as SIMT IR (each a temporary): what interleaved_tile and the snake's formulas build in a
    kernel; _IntOps runs the same steps on Python ints (the tests' and the docs' model)."""
    CMP = ("lt", "ge", "eq")

    def __init__(self, L) -> None:
        self.L = L

    def __call__(self, o: str, a, b):
        a, b = (c32(x) if isinstance(x, int) else x for x in (a, b))
        node = N.Compare(o, a, b) if o in self.CMP else N.BinOp(o, a, b, I32)
        return self.L.tmp(node, "ord")

    def select(self, c, a, b):
        a, b = (c32(x) if isinstance(x, int) else x for x in (a, b))
        return self.L.tmp(N.IfExp(c, a, b, I32), "ord")

    def both(self, a, b):
        return self.L.tmp(N.Logical("and", a, b), "ord")


class _IntOps:
    STEPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
             "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "min": min, "max": max,
             "lt": lambda a, b: a < b, "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b}

    def __call__(self, o: str, a, b):
        return self.STEPS[o](a, b)

    def select(self, c, a, b):
        return a if c else b

    def both(self, a, b):
        return a and b


def interleaved_tile(lin, total, run, group: int, op=None):
    """tile.block_order's tile for linear number `lin` of `total`: runs of `run` consecutive tiles, taken
    `group` runs at a time, every run's first tile, then every run's second (the last group may hold fewer
    runs); `lin` itself where `run` < 1 or does not divide `total`. The same steps build the lowering's IR
    (`op` over IR values) and, with Python ints (`op` None), the tests' and the docs' model."""
    op = op or _IntOps()
    one = op("max", run, 1)                          # no division by zero where the order does not apply
    span = op("mul", one, group)                     # tiles of a whole group of runs
    gi = op("floordiv", lin, span)
    first = op("mul", gi, group)                     # the group's first run
    size = op("max", op("min", op("sub", op("floordiv", total, one), first), group), 1)   # its runs (the last: fewer)
    within = op("sub", lin, op("mul", gi, span))
    tile = op("add", op("mul", op("add", first, op("mod", within, size)), one), op("floordiv", within, size))
    applies = op.both(op("ge", run, 1), op("eq", op("mod", total, one), 0))
    return op.select(applies, tile, lin)


def tile_walk(L, nb: list[N.Expr], lin: N.Expr) -> Callable[[Callable[[], None]], None]:
    """How the tile program runs over the block's tiles: `walk(work)` emits `work` for each of them. A
    block a tile: its ids bound here, `work` once. Persistent: tile t = lin + i * nctaid.x, every tile
    visited by exactly one block, in order (under persistent_order "snake": snake_walk's order); a
    warp-specialised ring split hands the walk to each role (matmul/ring_ws.py), so a role may walk on
    its own side (both walk the same tiles in the same order)."""
    if not L.persistent:
        block_ids(L, tile_number(L, lin, N.Cast(N.Special("nctaid.x"), I32)), nb)
        return lambda work: work()
    total = c32(1)
    for n in nb:
        total = L.tmp(N.BinOp("mul", total, n, I32), "ntiles")
    step = L.tmp(N.Cast(N.Special("nctaid.x"), I32), "nctas")
    if L.persistent_order == "snake":
        return snake_walk(L, nb, lin, total, step)

    def walk(work: Callable[[], None]) -> None:
        tv = L.new_var(I32, "tile")

        def body() -> None:
            block_ids(L, tile_number(L, N.ReadVar(tv), total), nb)
            work()
        L.emit(N.ForRange(tv, lin, total, step, L.block_of(body)))
    return walk


def snake_count(block, blocks, total, op=None):
    """How many tiles block `block` of `blocks` takes under persistent_order "snake": R = total // P rounds and
    one of the r = total % P left, which the last round's first r blocks take when R is even, its last r when
    odd. With `op` an _IrOps, the kernel's IR; without, Python ints."""
    op = op or _IntOps()
    rounds = op("floordiv", total, blocks)
    rest = op("sub", total, op("mul", rounds, blocks))
    late = op.select(op("eq", op("mod", rounds, 2), 0), op.select(op("lt", block, rest), 1, 0),
                     op.select(op("ge", block, op("sub", blocks, rest)), 1, 0))
    return op("add", rounds, late)


def snake_tile(i, block, blocks, op=None):
    """The tile block `block` of `blocks` takes in its round `i` under the snake: round i holds tiles
    i P .. i P + P - 1, taken by blocks 0 .. P - 1 in even rounds and P - 1 .. 0 in odd ones."""
    op = op or _IntOps()
    mirror = op("sub", op("sub", blocks, 1), block)
    return op("add", op("mul", i, blocks), op.select(op("eq", op("mod", i, 2), 0), block, mirror))


def snake_tiles(block: int, blocks: int, total: int) -> list[int]:
    """The tiles block `block` of `blocks` takes under the snake, in order (the walk's own formulas)."""
    return [snake_tile(i, block, blocks) for i in range(snake_count(block, blocks, total))]


def snake_walk(L, nb: list[N.Expr], lin: N.Expr, total: N.Expr, step: N.Expr) -> Callable[[Callable[[], None]], None]:
    """A persistent block's tiles in rounds of nctaid.x tiles, the block order reversed every other round
    (boustrophedon): a block late in one round is early in the next, so where work grows along the tile
    order (causal attention: a query block's keys) each block's sum evens out. The static round-robin
    gave a block of 132 at S1024 twice another's causal work (blocks c and c + 4 of 8 query blocks a head);
    this order's worst block is 3 % past the mean (interop_tests/dsl_tile/test_tile_snake_walk.py)."""
    ops = _IrOps(L)
    count = snake_count(lin, step, total, ops)

    def walk(work: Callable[[], None]) -> None:
        iv = L.new_var(I32, "round")

        def body() -> None:
            block_ids(L, tile_number(L, snake_tile(N.ReadVar(iv), lin, step, ops), total), nb)
            work()
        L.emit(N.ForRange(iv, c32(0), count, c32(1), L.block_of(body)))
    return walk


def block_group(fn: T.TileFunction, ndim: int) -> int:
    """Tile rows per group of a 2-D grid's block order: the kernel's `group_m=`, else GROUP_M for GEMM
    kernels (a tile.matmul in the body) and 1 (row-major) otherwise."""
    if ndim != 2:
        return 1
    if fn.group_m is not None:
        return fn.group_m
    return GROUP_M if any(isinstance(e, T.Matmul) for e in T.body_exprs(fn.body)) else 1


def unravel_ids(L, lin: N.Expr, nb: list[N.Expr]) -> list[N.Expr]:
    """Row-major coordinates of tile number `lin` in a tile grid of `nb` tiles per axis."""
    ids: list[N.Expr] = [c32(0)] * len(nb)
    for k in reversed(range(len(nb))):
        if k == 0:
            ids[k] = lin
        else:
            ids[k] = L.tmp(N.BinOp("mod", lin, nb[k], I32), "bid")
            lin = L.tmp(N.BinOp("floordiv", lin, nb[k], I32), "bid")
    return ids


def grouped_ids(L, lin: N.Expr, nb: list[N.Expr], group: int) -> list[N.Expr]:
    """2-D tile ids in groups of `group` tile rows (a bijection of the row-major order), so
    consecutive blocks of a GEMM share A row panels and B column panels in L2."""
    def op(o, a, b):
        return L.tmp(N.BinOp(o, a, b, I32), "g")
    per_group = op("mul", c32(group), nb[1])
    gid = op("floordiv", lin, per_group)
    first = op("mul", gid, c32(group))
    size = op("min", op("sub", nb[0], first), c32(group))
    inner = op("mod", lin, per_group)
    return [op("add", first, op("mod", inner, size)), op("floordiv", inner, size)]
