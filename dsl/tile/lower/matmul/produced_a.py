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

Under the lowering switch produced_a_buffers=2 a persistent block keeps two buffers of each operand (and two
pairs of barriers), tile k in buffer k % 2: the producer copies the next tile's Q while the consumers still
read this one's, so the next tile's first product waits for no copy (at the price of the operand's size in
shared memory again: 32 KiB for attention's 128 x 128 Q tile).

    producer, tile k:  k > 1: wait empty[k % 2] (phase k // 2 - 1);  expect bytes on full[k % 2];  the boxes
    consumers, tile k: wait full[k % 2] (phase k // 2);  ... read buffer k % 2 ...;  arrive on empty[k % 2]

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

BAR_BYTES = 16      # one buffer's full and empty mbarriers (8 bytes each): buffer b's are 16 * b bytes past buffer 0's


@dataclass
class ProducedA:
    """One operand the producer copies: its assignment, tensor map, buffer layout (of buffer 0) and barriers
    (of buffer 0: buffer b's are BAR_BYTES * b further), in `buffers` buffers taken in turn by tile."""
    assign: T.Assign
    tmap: N.Expr
    layout: SwizzledA
    full: N.Expr
    empty: N.Expr
    consumers: int
    buffers: int = 1

    def slot(self, L, tile_count: N.Expr) -> tuple[N.Expr, N.Expr, N.Expr]:
        """(buffer offset in bytes, its full barrier, its empty barrier) of tile `tile_count`."""
        if self.buffers == 1:
            return N.Const(0, U32), self.full, self.empty
        b = L.tmp(N.Cast(N.BinOp("and_", tile_count, c32(1), I32), U32), "pabuf")
        step = L.tmp(N.BinOp("mul", b, N.Const(BAR_BYTES, U32), U32), "pabar")
        return (L.tmp(N.BinOp("mul", b, N.Const(self.nbytes, U32), U32), "paoff"),
                L.tmp(N.BinOp("add", self.full, step, U32), "pafullb"),
                L.tmp(N.BinOp("add", self.empty, step, U32), "paemptyb"))

    def use(self, tile_count: N.Expr) -> N.Expr:
        """Which use of its buffer tile `tile_count` is (0, 1, ...): the phase of that buffer's barriers."""
        return N.BinOp("rshift", tile_count, c32(self.buffers - 1), I32) if self.buffers > 1 else tile_count

    def wait(self, L, tile_count: N.Expr) -> None:
        """(Consumers) where the operand is assigned: wait for tile `tile_count`'s copy; with two buffers,
        the variable is bound to that tile's buffer from here on."""
        off, full, _ = self.slot(L, tile_count)
        L.asm("mbarrier.try_wait.parity", [full, N.BinOp("and_", self.use(tile_count), c32(1), I32)])
        if self.buffers > 1:
            lay = self.layout
            moved = SwizzledA(lay.shape, lay.buf, L.tmp(N.BinOp("add", lay.base, off, U32), "pabase"),
                              L.tmp(N.BinOp("add", lay.wg_base, off, U32), "pawg"))
            L.vars[id(self.assign.var)] = (moved, [])

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
    buffers = L.produced_a_buffers if L.persistent else 1     # a block of one tile has no next tile's copy
    bars = N.SharedAlloc(f"produced_a_bars{len(L.extra_shared)}",
                         ArrayType(U64, 1, writable=True, space="shared", shape=(2 * buffers * len(assigns),)),
                         align=8)
    L.extra_shared.append(bars)
    L.arch_specific = True
    out = []
    for k, s in enumerate(assigns):
        op = s.value
        rows, cols = op.type.shape
        # buffer b at b * rows * cols elements: a multiple of 1024 bytes (rows % 8, cols % 64), so aligned too
        buf = wgmma_stage(L, op.type.dtype, buffers * rows * cols + STAGE_SLACK_ELEMS, ("A", id(s.var)))
        name = f"{op.param.name}__tmap{len(L.extra_params)}"
        p = N.Param(name, TensorMapType(op.param.name, (rows, ATOM_COLS), 128), len(L.params) + len(L.extra_params))
        L.extra_params.append(p)
        L.relied.add(op.param.name)

        def made(buf=buf, rows=rows, cols=cols, k=k) -> tuple:
            bar0 = L.tmp(TN.SharedAddress(N.SharedArray(bars), N.Const(0, INDEX)), "pabar")
            full = L.tmp(N.BinOp("add", bar0, N.Const(BAR_BYTES * buffers * k, U32), U32), "pafull")
            empty = L.tmp(N.BinOp("add", full, N.Const(8, U32), U32), "paempty")
            return swizzled_layout(L, buf, (rows, cols)), full, empty
        layout, full, empty = L.in_prologue(made)
        L.vars[id(s.var)] = (layout, [])
        out.append(ProducedA(s, N.ParamRef(p), layout, full, empty, L.T // 128, buffers))
    L.produced_a = {id(pa.assign.var): pa for pa in out}
    return out


def init(L, produced: list[ProducedA]) -> None:
    """(Leader) the barriers: full, one arrival (the expect_tx); empty, one a consumer warpgroup. The
    ring's set_up fences and meets after."""
    for pa in produced:
        for b in range(pa.buffers):
            L.asm("mbarrier.init", [N.BinOp("add", pa.full, N.Const(BAR_BYTES * b, U32), U32)], count=1)
            L.asm("mbarrier.init", [N.BinOp("add", pa.empty, N.Const(BAR_BYTES * b, U32), U32)], count=pa.consumers)
        L.asm("prefetch.tensormap", [pa.tmap])


def produce(L, produced: list[ProducedA], leader: N.Expr, tile_count: N.Expr) -> None:
    """(Producer) copy each operand of tile `tile_count` (0, 1, ...: the block's tiles so far) once the
    consumers released the last tile's in the same buffer (the previous tile's, with one buffer)."""
    def copies() -> None:
        for pa in produced:
            off, full, empty = pa.slot(L, tile_count)
            par = N.BinOp("and_", N.BinOp("add", pa.use(tile_count), c32(1), I32), c32(1), I32)
            L.emit(N.If(N.Compare("gt", tile_count, c32(pa.buffers - 1)), L.block_of(
                lambda empty=empty, par=par: L.asm("mbarrier.try_wait.parity", [empty, par])), []))
            L.asm("mbarrier.arrive.expect_tx", [full, N.Const(pa.nbytes, U32)])
            rows, cols = pa.load.type.shape
            index = [L.scalar(i) for i in pa.load.index]
            row0 = L.tmp(N.BinOp("mul", N.Cast(index[0], I32), c32(rows), I32), "parow")
            col0 = L.tmp(N.BinOp("mul", N.Cast(index[1], I32), c32(cols), I32), "pacol")
            base = pa.layout.base if pa.buffers == 1 else L.tmp(N.BinOp("add", pa.layout.base, off, U32), "padst")
            for t in range(cols // ATOM_COLS):
                L.asm("cp.async.bulk.tensor.2d", [N.BinOp("add", base, N.Const(t * rows * ATOM_BYTES, U32), U32),
                                                  pa.tmap, N.BinOp("add", col0, c32(t * ATOM_COLS), I32), row0, full])
    L.emit(N.If(leader, L.block_of(copies), []))


def release(L, produced: list[ProducedA]) -> None:
    """(Consumers) after the last loop reading them: each warpgroup's first thread arrives on empty (this
    tile's buffer's: L.produced_tiles counts the consumers' tiles)."""
    first = N.Compare("eq", N.BinOp("and_", L.geo.tid, c32(127), I32), c32(0))
    empties = [pa.slot(L, N.ReadVar(L.produced_tiles))[2] for pa in produced]
    L.emit(N.If(first, L.block_of(lambda: [L.asm("mbarrier.arrive", [e]) for e in empties]), []))
