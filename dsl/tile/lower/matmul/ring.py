"""TMA rings for the tensor-core products of tile loops (sm_90; KB_TILE_LOOP_PIPELINE=tma or ws).

    for j in range(stop):
        s = tile.matmul(q, tile.transpose(tile.load(k, (kv0 + j, 0), (BN, D))))
        ...
        acc = tile.matmul(p, tile.load(v, (kv0 + j, 0), (BN, D)), acc)

The loop pipeline (pipeline.py) copies such loads one iteration ahead with cp.async, every thread
computing addresses and bounds for its share. Where every load it pipelines is the B operand of a
warpgroup-MMA product (matmul/wgmma_products.py) of a 2-D array the launch facts allow a tensor map
of (C-contiguous, 16-byte aligned, rows whole 16-byte chunks: what cp.async needs too), a ring
replaces it: each load gets S stages (KB_TILE_LOOP_STAGES, 2 or 3) in dynamic shared memory and one
"full" mbarrier per stage; one thread expects the stage's bytes and issues cols/64 TMA boxes [rows,
64] with the 128-byte swizzle (the swizzle atoms the product's descriptors read: K-major for a
transposed load, MN-major otherwise), and the copy engine zero-fills what lies outside the array as
tile.load pads. A product waits on its stage's full barrier (phase n / S of iteration n) instead of
cp.async groups and a block barrier.

Who refills a stage once the product is done with it:
- "tma": thread 0 copies iteration n + S into it once every warpgroup is past the product's
  wait_group: with one warpgroup a block barrier; with two or more, each warpgroup's first thread
  arrives on the stage's "empty" mbarrier and thread 0 waits for that phase (so a warpgroup never
  waits for another at a release; thread 0's waits for the last one). Iterations 0..S-1 are copied
  before the loop.
- "ws" (ring_ws.py): a producer warpgroup of its own, whose thread 0 walks the loop's iterations and
  copies each load of iteration n once every consumer warpgroup released iteration n - S's stage:
  each warpgroup's first thread arrives on the stage's "empty" mbarrier (count: the consumer
  warpgroups) after the product's wait_group.

The tensor maps are kernel parameters (contract "tensor_maps") the launcher encodes from the
validated views, as for the GEMM loop (matmul/tma.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U32, U64, ArrayType, TensorMapType
from dsl.tile import ir as T
from dsl.tile.lower.layout import c32
from dsl.tile.lower.matmul.operands import wgmma_stage
from dsl.tile.lower.matmul.stages import aligned_base

RING_BUDGET = 192 * 1024     # dynamic shared bytes the rings of one loop may take (227 KiB on sm_90)
ATOM_COLS = 64               # 16-bit elements of one 128-byte swizzle row: one TMA box's width


def ring_wanted(L, loads: list[tuple[T.Load, bool]]) -> bool:
    """Do `loads` (a loop's pipelined loads, each with whether it is a warpgroup-MMA B) take a ring:
    KB_TILE_LOOP_PIPELINE asks for one, every load is a wgmma B of a 2-D array (the facts cp.async
    checked are those a tensor map needs), whose boxes TMA can copy, and the stages fit."""
    if L.loop_pipeline == "cp.async" or L.cc < 90 or not loads or not all(swz for _, swz in loads):
        return False
    for op, _ in loads:
        rows, cols = op.type.shape
        if op.param.type.ndim != 2 or cols % ATOM_COLS or rows % 8 or rows > 256:
            return False
    return L.loop_stages * sum(_stage_bytes(op) for op, _ in loads) <= RING_BUDGET


def _stage_bytes(op: T.Load) -> int:
    rows, cols = op.type.shape
    return rows * cols * op.type.dtype.itemsize


@dataclass
class Ring:
    """The stages, tensor maps and mbarriers of one loop's ring. Addresses are bound in the kernel's
    prologue, so the producer role, the loop and the code before it all see them."""
    loads: list[T.Load]
    S: int
    ws: bool
    consumers: int                      # warpgroups that release a stage (ws, or tma with two or more)
    bases: list[N.Expr] = field(default_factory=list)   # aligned start of each load's S stages
    tmaps: list[N.Expr] = field(default_factory=list)
    bar0: N.Expr | None = None
    leader: N.Expr | None = None        # the thread that sets up and copies

    @property
    def arrivals(self) -> bool:
        """Are stages released by arrivals on their empty mbarriers (not a block barrier)."""
        return self.ws or self.consumers > 1

    def position(self, load: T.Load) -> int:
        return next(i for i, ld in enumerate(self.loads) if ld is load)

    def bar(self, i: int, stage: N.Expr, empty: bool = False) -> N.Expr:
        slot = N.BinOp("add", stage, c32(i * self.S + (len(self.loads) * self.S if empty else 0)), I32)
        return N.BinOp("add", self.bar0, N.BinOp("mul", N.Cast(slot, U32), N.Const(8, U32), U32), U32)


def make_ring(L, loads: list[T.Load], ws: bool) -> tuple[Ring, list[N.Expr]]:
    """Allocate the ring of `loads` (one stage buffer each, holding its S stages) and its barriers;
    returns the ring and the buffers (the pipeline's stages)."""
    ring = Ring(list(loads), L.loop_stages, ws, L.T // 128)
    # keyed by position, size and dtype, not by load: the rings of loops that run one after the other
    # (causal attention's two stages) share their stages, since a ring loop ends drained (every copy it
    # issued was waited for, every product that read a stage completed before the loop's last release)
    bufs = [wgmma_stage(L, op.type.dtype, ring.S * _stage_bytes(op) // op.type.dtype.itemsize,
                        ("ring", i, ring.S * _stage_bytes(op), str(op.type.dtype))) for i, op in enumerate(loads)]
    nbars = len(loads) * ring.S * (2 if ring.arrivals else 1)
    bars = N.SharedAlloc(f"ring_bars{len(L.extra_shared)}", ArrayType(U64, 1, writable=True, space="shared", shape=(nbars,)), align=8)
    L.extra_shared.append(bars)
    L.arch_specific = True
    tid = L.ws_tid if ws else L.geo.tid

    def bind() -> None:
        ring.bases = [aligned_base(L, buf, "ring") for buf in bufs]
        ring.bar0 = L.tmp(TN.SharedAddress(N.SharedArray(bars), N.Const(0, INDEX)), "ringbar")
        ring.leader = L.tmp(N.Compare("eq", tid, c32(0)), "ringlead")
    L.in_prologue(bind)
    maps: dict[tuple, N.Expr] = {}
    for op in loads:
        key = (op.param.name, op.type.shape[0])
        if key not in maps:
            name = f"{op.param.name}__tmap{len(L.extra_params)}"      # unique in the kernel
            p = N.Param(name, TensorMapType(op.param.name, (op.type.shape[0], ATOM_COLS), 128),
                        len(L.params) + len(L.extra_params))
            L.extra_params.append(p)
            maps[key] = N.ParamRef(p)
        ring.tmaps.append(maps[key])
        L.relied.add(op.param.name)
    return ring, bufs


def set_up(L, ring: Ring) -> None:
    """The leader initialises the barriers (full: one arrival, the expect_tx; empty: one per consumer
    warpgroup) and prefetches the tensor maps; then the whole block meets."""
    def init() -> None:
        for i in range(len(ring.loads)):
            for st in range(ring.S):
                L.asm("mbarrier.init", [ring.bar(i, c32(st))], count=1)
                if ring.arrivals:
                    L.asm("mbarrier.init", [ring.bar(i, c32(st), True)], count=ring.consumers)
        L.asm("fence.mbarrier_init")
        for tmap in dict.fromkeys(ring.tmaps):
            L.asm("prefetch.tensormap", [tmap])
    L.emit(N.If(ring.leader, L.block_of(init), []))
    L.sync()


def stage_of(L, ring: Ring, n: N.Expr) -> tuple[N.Expr, N.Expr]:
    """(stage, parity of its use) of the loop's iteration number `n` (0, 1, ...)."""
    stage = L.tmp(N.BinOp("mod", n, c32(ring.S), I32), "rst")
    parity = L.tmp(N.BinOp("and_", N.BinOp("floordiv", n, c32(ring.S), I32), c32(1), I32), "rph")
    return stage, parity


def stage_address(L, ring: Ring, i: int, stage: N.Expr) -> N.Expr:
    """Shared address of load i's stage `stage`."""
    nbytes = _stage_bytes(ring.loads[i])
    return L.tmp(N.BinOp("add", ring.bases[i], N.BinOp("mul", N.Cast(stage, U32), N.Const(nbytes, U32), U32), U32),
                 "rsa")


def issue(L, ring: Ring, i: int, n: N.Expr, index: list[N.Expr]) -> None:
    """(Leader) copy load i of iteration `n`, whose tile index is `index`, into its stage: expect the
    stage's bytes on its full barrier, then one TMA box [rows, 64] per 64 columns."""
    op = ring.loads[i]
    rows, cols = op.type.shape
    stage, _ = stage_of(L, ring, n)
    full = L.tmp(ring.bar(i, stage), "rfull")
    L.asm("mbarrier.arrive.expect_tx", [full, N.Const(_stage_bytes(op), U32)])
    row0 = L.tmp(N.BinOp("mul", N.Cast(index[0], I32), c32(rows), I32), "rrow")
    col0 = L.tmp(N.BinOp("mul", N.Cast(index[1], I32), c32(cols), I32), "rcol")
    dst = stage_address(L, ring, i, stage)
    for t in range(cols // ATOM_COLS):
        L.asm("cp.async.bulk.tensor.2d", [N.BinOp("add", dst, N.Const(t * rows * 128, U32), U32), ring.tmaps[i],
                                          N.BinOp("add", col0, c32(t * ATOM_COLS), I32), row0, full])


def wait_full(L, ring: Ring, i: int, n: N.Expr) -> N.Expr:
    """Before a product reads load i of iteration `n`: wait for its copies; returns the stage's address."""
    stage, parity = stage_of(L, ring, n)
    L.asm("mbarrier.try_wait.parity", [ring.bar(i, stage), parity])
    return stage_address(L, ring, i, stage)


def release(L, ring: Ring, i: int, n: N.Expr) -> None:
    """After the wait_group that completes the product reading load i of iteration `n`: each
    (consumer) warpgroup's first thread arrives on the stage's empty barrier; tma with one warpgroup,
    a block barrier (tma: the caller's leader then copies iteration n + S into the stage: pipeline.py,
    after producer_wait where there are arrivals)."""
    if not ring.arrivals:
        L.sync()
        return
    stage, _ = stage_of(L, ring, n)
    first = N.Compare("eq", N.BinOp("and_", L.geo.tid, c32(127), I32), c32(0))
    L.emit(N.If(first, L.block_of(lambda: L.asm("mbarrier.arrive", [ring.bar(i, stage, True)])), []))


def producer_wait(L, ring: Ring, i: int, n: N.Expr) -> None:
    """(Producer leader) before copying load i of iteration `n` >= S: wait until the consumers
    released iteration n - S's use of the stage (phase n / S - 1 of its empty barrier)."""
    stage, _ = stage_of(L, ring, n)
    par = N.BinOp("and_", N.BinOp("add", N.BinOp("floordiv", n, c32(ring.S), I32), c32(1), I32), c32(1), I32)
    L.emit(N.If(N.Compare("ge", n, c32(ring.S)), L.block_of(
        lambda: L.asm("mbarrier.try_wait.parity", [ring.bar(i, stage, True), par])), []))


def drop(L, ring: Ring) -> None:
    """Forget the ring's tensor maps (the loop was lowered again without it)."""
    gone = {id(m.param) for m in ring.tmaps if isinstance(m, N.ParamRef)}
    L.extra_params[:] = [p for p in L.extra_params if id(p) not in gone]
