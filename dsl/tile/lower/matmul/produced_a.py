"""Loop-invariant A operands in shared memory copied by the producer warpgroup (loop_pipeline "ws" with
wgmma_a "shared"): FlashAttention-3's Q. Without it the consumers copy such an operand themselves
(matmul/shared_a.py: cp.async by every consumer thread, a wait, a fence and two barriers of both
consumer warpgroups) before their first product can issue; a persistent block then starts every tile
with that latency exposed. Here the producer's thread 0 copies it by TMA, as it copies the ring's
stages (boxes [rows, 64] with the 128-byte swizzle: the atoms [K / 64][M][64] the A descriptors read),
on a "full" mbarrier the consumers wait on, and in a persistent block after an "empty" mbarrier the
consumer warpgroups arrive on once their last product reading it completed: the next tile's copy then
runs while they finish this one (its loops' drain, the epilogue).

    producer, tile k:  k > 0: wait empty (phase k - 1);  expect bytes on full;  the boxes
    consumers, tile k: wait full (phase k);  ... the loops ...;  each warpgroup's first thread arrives on empty

Which operands: a top-level assignment before the split loop whose variable is hinted into the swizzle
atoms (shared_a.wanted) from a load of a 2-D array whose tile TMA can copy (what the ring asks of its
loads) and whose indices the producer can compute (ring_ws.producer_prefix). Every product reading it
must lie in the split loop or the loops chained to it (the release follows the last of them).
"""
from __future__ import annotations

from dataclasses import dataclass

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U32, U64, ArrayType, TensorMapType
from dsl.tile import ir as T
from dsl.tile.lower.layout import c32
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, wgmma_stage
from dsl.tile.lower.matmul.ring import ATOM_COLS
from dsl.tile.lower.matmul.shared_a import swizzled_layout
from dsl.tile.lower.matmul.swizzled import ATOM_BYTES, SwizzledA


@dataclass
class ProducedA:
    """One operand the producer copies: its assignment, tensor map, buffer layout and barriers."""
    assign: T.Assign
    tmap: N.Expr
    layout: SwizzledA
    full: N.Expr
    empty: N.Expr
    consumers: int

    def wait(self, L, tile_count: N.Expr) -> None:
        """(Consumers) where the operand is assigned: wait for tile `tile_count`'s copy."""
        L.asm("mbarrier.try_wait.parity", [self.full, N.BinOp("and_", tile_count, c32(1), I32)])

    @property
    def load(self) -> T.Load:
        return self.assign.value  # type: ignore[return-value]

    @property
    def nbytes(self) -> int:
        rows, cols = self.load.type.shape
        return rows * cols * self.load.type.dtype.itemsize


def candidates(L, before: list[T.TStmt], loops: list[T.For]) -> list[T.Assign]:
    """The assignments of `before` (the statements ahead of the split loop) the producer can copy:
    hinted into the swizzle atoms, a TMA-copyable load of a 2-D array, read only inside `loops`."""
    if L.wgmma_a != "shared" or L.cc < 90:
        return []
    inside = {id(x) for loop in loops for x in T.body_exprs(loop.body)}
    out = []
    for s in before:
        if not (isinstance(s, T.Assign) and L.layout_hints.get(id(s.var), ("",))[0] == "W"):
            continue
        op = s.value
        if not isinstance(op, T.Load) or op.param.type.ndim != 2:
            continue
        rows, cols = op.type.shape
        if cols % ATOM_COLS or rows % 8 or rows > 256 or op.type.dtype.itemsize != 2:
            continue
        reads = [x for x in T.body_exprs(L.fn.body) if isinstance(x, T.Read) and x.var is s.var]
        if reads and all(id(x) in inside for x in reads):
            out.append(s)
    return out


def bind(L, assigns: list[T.Assign]) -> list[ProducedA]:
    """Buffers, tensor maps and barriers of `assigns` (in the prologue, so both roles see them); the
    variables are bound to their atoms, where shared_a.assign_swizzled finds them."""
    if not assigns:
        return []
    bars = N.SharedAlloc(f"produced_a_bars{len(L.extra_shared)}",
                         ArrayType(U64, 1, writable=True, space="shared", shape=(2 * len(assigns),)), align=8)
    L.extra_shared.append(bars)
    L.arch_specific = True
    out = []
    for k, s in enumerate(assigns):
        op = s.value
        rows, cols = op.type.shape
        buf = wgmma_stage(L, op.type.dtype, rows * cols + STAGE_SLACK_ELEMS, ("A", id(s.var)))
        name = f"{op.param.name}__tmap{len(L.extra_params)}"
        p = N.Param(name, TensorMapType(op.param.name, (rows, ATOM_COLS), 128), len(L.params) + len(L.extra_params))
        L.extra_params.append(p)
        L.relied.add(op.param.name)

        def made(buf=buf, rows=rows, cols=cols, k=k) -> tuple:
            bar0 = L.tmp(TN.SharedAddress(N.SharedArray(bars), N.Const(0, INDEX)), "pabar")
            full = L.tmp(N.BinOp("add", bar0, N.Const(16 * k, U32), U32), "pafull")
            empty = L.tmp(N.BinOp("add", bar0, N.Const(16 * k + 8, U32), U32), "paempty")
            return swizzled_layout(L, buf, (rows, cols)), full, empty
        layout, full, empty = L.in_prologue(made)
        L.vars[id(s.var)] = (layout, [])
        out.append(ProducedA(s, N.ParamRef(p), layout, full, empty, L.T // 128))
    L.produced_a = {id(pa.assign.var): pa for pa in out}
    return out


def init(L, produced: list[ProducedA]) -> None:
    """(Leader) the barriers: full, one arrival (the expect_tx); empty, one a consumer warpgroup. The
    ring's set_up fences and meets after."""
    for pa in produced:
        L.asm("mbarrier.init", [pa.full], count=1)
        L.asm("mbarrier.init", [pa.empty], count=pa.consumers)
        L.asm("prefetch.tensormap", [pa.tmap])


def produce(L, produced: list[ProducedA], leader: N.Expr, tile_count: N.Expr) -> None:
    """(Producer) copy each operand of tile `tile_count` (0, 1, ...: the block's tiles so far) once the
    consumers released the previous tile's."""
    def copies() -> None:
        for pa in produced:
            par = N.BinOp("and_", N.BinOp("add", tile_count, c32(1), I32), c32(1), I32)
            L.emit(N.If(N.Compare("gt", tile_count, c32(0)), L.block_of(
                lambda pa=pa, par=par: L.asm("mbarrier.try_wait.parity", [pa.empty, par])), []))
            L.asm("mbarrier.arrive.expect_tx", [pa.full, N.Const(pa.nbytes, U32)])
            rows, cols = pa.load.type.shape
            index = [L.scalar(i) for i in pa.load.index]
            row0 = L.tmp(N.BinOp("mul", N.Cast(index[0], I32), c32(rows), I32), "parow")
            col0 = L.tmp(N.BinOp("mul", N.Cast(index[1], I32), c32(cols), I32), "pacol")
            for t in range(cols // ATOM_COLS):
                L.asm("cp.async.bulk.tensor.2d", [N.BinOp("add", pa.layout.base, N.Const(t * rows * ATOM_BYTES, U32), U32),
                                                  pa.tmap, N.BinOp("add", col0, c32(t * ATOM_COLS), I32), row0, pa.full])
    L.emit(N.If(leader, L.block_of(copies), []))


def release(L, produced: list[ProducedA]) -> None:
    """(Consumers) after the last loop reading them: each warpgroup's first thread arrives on empty."""
    first = N.Compare("eq", N.BinOp("and_", L.geo.tid, c32(127), I32), c32(0))
    L.emit(N.If(first, L.block_of(lambda: [L.asm("mbarrier.arrive", [pa.empty]) for pa in produced]), []))
