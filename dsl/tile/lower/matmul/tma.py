"""sm_90 GEMM main loop fed by TMA (plan.kind == "tma"): bulk tensor copies on mbarriers into the
swizzled stages the warpgroup MMA of matmul/wgmma.py reads.

Why TMA: with cp.async every thread computes addresses, bounds and predicates for its share of each
stage (~200 instructions per stage); here one thread issues 1 + BN/64 bulk copies and an
`expect_tx`, the copy engine does the bounds (out-of-range box elements are zero-filled: ragged M, N
and K need no code), and the other threads only wait on the stage's mbarrier.

The tensor maps are kernel parameters (TensorMapType, __grid_constant__) that the launcher builds
from the validated views (contract "tensor_maps"; the one validator checks what TMA needs, so a bad
view is a typed refusal naming the argument). A is one box [BM, BK] (128-byte swizzle for 128-byte rows,
64-byte for 64-byte rows: the layout compute_wgmma's descriptors expect); B is BN/64 boxes [BK, 64]
with 128-byte swizzle, the MN-major atoms [BN/64][BK][64], or, stored N x K (K-major), one box
[BN, BK] swizzled like A. Plan kind "tma-transpose" (tf32 with an A stored K x M or a row-major B):
those operands come through registers instead (matmul/transposing.py, stored between the group's
commit and its wait_group 1), only the others by TMA (no TMA at all when both are staged: then
there is no mbarrier to wait on); the barrier loop only (never warp-specialised or persistent).

Pipeline (S stages, phase = use count & 1), by default ("sync", the loop measured best on the H200):
stage `it` is waited for on its "full" mbarrier, its wgmma group is issued and wait_group 1 leaves it
in flight while completing the group of tile it-1; a __syncthreads per k tile makes sure every
warpgroup is done with tile it-2, whose stage thread 0 then refills with k tile it+S-2.
KB_TILE_GEMM_PIPELINE=ws (warp-specialised, L.ws): thread 0 of an extra producer warpgroup
(tid.x < 128) issues every copy in a loop of its own, S-1 tiles ahead, beside the compute warpgroups'
loop, under one concurrent If (the simulator runs the two sides as coroutines, dsl/sim/roles.py); each
compute warpgroup's first thread arrives on a stage's "empty" mbarrier (count 2) once wait_group 1 has
passed its wgmma, and the producer waits for that phase before refilling it (the CUTLASS
consumer-release pipeline). A producer step inside the compute loop would put the wgmmas in a path
ptxas cannot prove uniform, and it serialises them (C7518); the role test itself goes through a
shuffle, so ptxas sees it uniform per warp. H200, 2026-12-01: sync and ws tie at 128x256x64
(725 TFLOP/s bf16 8192^3); at BK=32 sync keeps 724 where ws gives 676 and a lock-step release loop
(dropped) 605. KB_TILE_SETMAXNREG reallocates registers between the roles (warp_specialised.reallocate;
not persistent kernels, whose roles start again every tile); the code after the loop then runs inside
the consumer role, since accumulators live across the roles' join are what made ptxas 13.0 fail at
setmaxnreg 232 (C7600: after the join only the producer's registers are left).
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U32, U64, ArrayType, TensorMapType
from dsl.tile.lower.layout import c32




def tensor_map_param(L, array_param, box: tuple[int, int], swizzle: int) -> N.Expr:
    """A TensorMapType parameter of the kernel, appended after the others (contract order)."""
    name = f"{array_param.name}__tmap"
    p = N.Param(name, TensorMapType(array_param.name, box, swizzle), len(L.params) + len(L.extra_params))
    L.extra_params.append(p)
    return N.ParamRef(p)


def lower_loop_tma(L, plan, acc_vars: list[N.Var]) -> None:
    loop = _TmaLoop(L, plan, acc_vars)
    if L.ws:
        loop.warp_specialised()
    else:
        loop.synchronous()
    L.relied.update({plan.a.param.name, plan.b.param.name})


class _TmaLoop:
    """One TMA-fed wgmma GEMM loop: its tensor maps, stage mbarriers (S "full" ones: the stage's
    copies landed; warp-specialised, S "empty" ones after them: both compute warpgroups are done with
    it) and the loop-invariant values; the two loop forms are `synchronous` and `warp_specialised`.
    Persistent kernels set the barriers up once, before the tile loop, and run a k-tile counter
    (kbase: the k tiles of the block's earlier tiles) on across tiles, so stages and phases carry over."""

    def __init__(self, L, plan, acc_vars: list[N.Var]) -> None:
        from dsl.tile.lower.matmul.stages import operand_stages
        from dsl.tile.lower.matmul.wgmma import kmajor_swizzle
        self.L, self.plan, self.acc_vars = L, plan, acc_vars
        bm, bn, bk, S = plan.bm, plan.bn, plan.bk, plan.stages
        self.S, self.kmaj, self.ws = S, plan.b_kmajor, L.ws
        # operands TMA copies (the others are staged through registers, matmul/transposing.py)
        self.tma_a, self.tma_b = "a" not in plan.staged, "b" not in plan.staged
        L.arch_specific = True
        kswz = kmajor_swizzle(plan)
        self.tmaps = []
        if self.tma_a:
            self.tmap_a = tensor_map_param(L, plan.a.param, (bm, bk), kswz)
            self.tmaps.append(self.tmap_a)
        if self.tma_b:
            self.tmap_b = tensor_map_param(L, plan.b.param, (bn, bk) if self.kmaj else (bk, 64),
                                            kswz if self.kmaj else 128)
            self.tmaps.append(self.tmap_b)
        base_a, _, self.sa, self.sb = operand_stages(L, plan)
        nbars = 2 * S if self.ws else S
        bars = N.SharedAlloc("gemm_stage_bars", ArrayType(U64, 1, writable=True, space="shared", shape=(nbars,)),
                             align=8)
        L.extra_shared.append(bars)
        self.once = L.in_prologue if L.persistent else (lambda f: f())
        self.kbase = L.new_var(I32, "kbase") if L.persistent else None
        if self.kbase is not None:
            self.once(lambda: L.emit(N.Assign(self.kbase, c32(0))))
        self.bar0 = self.once(lambda: L.tmp(TN.SharedAddress(N.SharedArray(bars), N.Const(0, INDEX)), "bar0"))
        self.tid = L.geo.tid
        self.consumer = L.ws_consumer
        self.leader = self.once(lambda: L.tmp(N.Compare("eq", L.ws_tid if self.ws else self.tid, c32(0)), "leader"))
        if self.tma_a:
            self.row0 = L.tmp(N.BinOp("mul", N.Cast(L.scalar(plan.a.index[0]), I32), c32(bm), I32), "arow")
        if self.tma_b:
            self.col0 = L.tmp(N.BinOp("mul", N.Cast(L.scalar(plan.b.index[0 if self.kmaj else 1]), I32), c32(bn),
                                      I32), "bcol")
        self.start, stop = L.scalar(plan.loop.start), L.scalar(plan.loop.stop)
        self.kt_n = L.tmp(N.BinOp("max", N.BinOp("sub", stop, self.start, I32), c32(0), I32), "ktiles")
        self.tx = (bm * bk * self.tma_a + bk * bn * self.tma_b) * plan.esize     # 0: no TMA copies at all
        self.once(self._set_up)
        self.staged = None
        if plan.staged:
            from dsl.tile.lower.matmul.transposing import RegisterStages
            self.staged = RegisterStages(L, plan, base_a, self.start)

    def g(self, local: N.Expr) -> N.Expr:
        """The block's running k-tile number of this tile's k tile `local`."""
        return local if self.kbase is None else N.BinOp("add", N.ReadVar(self.kbase), local, I32)

    def bar(self, stage: N.Expr, empty: bool = False) -> N.Expr:
        slot = N.BinOp("add", stage, c32(self.S), I32) if empty else stage
        return N.BinOp("add", self.bar0, N.BinOp("mul", N.Cast(slot, U32), N.Const(8, U32), U32), U32)

    def wait(self, at: N.Expr, parity: N.Expr) -> None:
        self.L.asm("mbarrier.try_wait.parity", [at, parity])

    def _set_up(self) -> None:
        L = self.L

        def init() -> None:
            for st in range(self.S):
                L.asm("mbarrier.init", [self.bar(c32(st))], count=1)
                if self.ws:
                    L.asm("mbarrier.init", [self.bar(c32(st), True)], count=2)
            L.asm("fence.mbarrier_init")
            for tmap in self.tmaps:
                L.asm("prefetch.tensormap", [tmap])
        L.emit(N.If(self.leader, L.block_of(init), []))
        L.sync()

    def issue(self, kt: N.Expr, stage: N.Expr) -> None:
        """Thread 0: expect the stage's bytes, then copy k tile `kt` of A and B into `stage`."""
        L, bm, bn, bk = self.L, self.plan.bm, self.plan.bn, self.plan.bk
        k0 = L.tmp(N.BinOp("mul", N.BinOp("add", kt, self.start, I32), c32(bk), I32), "k0")
        b_at = L.tmp(self.bar(stage), "sbar")
        L.asm("mbarrier.arrive.expect_tx", [b_at, N.Const(self.tx, U32)])
        copy = "cp.async.bulk.tensor.2d"
        if self.tma_a:
            L.asm(copy, [self.sa(N.BinOp("mul", stage, c32(bm * bk), I32)), self.tmap_a, k0, self.row0, b_at])
        if self.kmaj:      # one box [BN, BK] of the N x K array, swizzled like A's
            L.asm(copy, [self.sb(N.BinOp("mul", stage, c32(bk * bn), I32)), self.tmap_b, k0, self.col0, b_at])
        for t in range(0 if self.kmaj or not self.tma_b else bn // 64):
            b_dst = self.sb(N.BinOp("add", N.BinOp("mul", stage, c32(bk * bn), I32), c32(t * bk * 64), I32))
            L.asm(copy, [b_dst, self.tmap_b, N.BinOp("add", self.col0, c32(t * 64), I32), k0, b_at])

    def refill(self, pre: N.Expr) -> None:
        """Leader: copy k tile `pre` into its stage (ws: once both compute warpgroups released the
        stage's previous use: tile gp - S, phase gp / S - 1 of its empty barrier)."""
        L, S = self.L, self.S
        gp = L.tmp(self.g(pre), "gpre")
        pst = L.tmp(N.BinOp("mod", gp, c32(S), I32), "pst")
        if self.ws:
            used = N.Compare("ge", gp, c32(S))
            par = N.BinOp("and_", N.BinOp("add", N.BinOp("floordiv", gp, c32(S), I32), c32(1), I32), c32(1), I32)
            L.emit(N.If(used, L.block_of(lambda: self.wait(self.bar(pst, True), par)), []))
        self.issue(pre, pst)

    def advance(self) -> None:
        if self.kbase is not None:
            self.L.emit(N.Assign(self.kbase, N.BinOp("add", N.ReadVar(self.kbase), self.kt_n, I32)))

    def body(self, it: N.Var, ahead: int, wg_first: N.Expr | None) -> None:
        """One k tile: wait for its stage, (sync) refill the stage `ahead` tiles on, multiply, (ws)
        release the previous tile's stage."""
        from dsl.tile.lower.matmul.wgmma import compute_wgmma
        L, S = self.L, self.S
        git = L.tmp(self.g(N.ReadVar(it)), "git")
        stage = L.tmp(N.BinOp("mod", git, c32(S), I32), "cst")
        parity = L.tmp(N.BinOp("and_", N.BinOp("floordiv", git, c32(S), I32), c32(1), I32), "par")
        pre = None if self.ws else L.tmp(N.BinOp("add", N.ReadVar(it), c32(ahead), I32), "pre")
        if self.tx:
            self.wait(self.bar(stage), parity)
        if not self.ws:
            L.sync()    # every warpgroup is past wait_group 1 of the last iteration: stage it-2 is free
            if self.tx:
                L.emit(N.If(N.Logical("and", self.leader, N.Compare("lt", pre, self.kt_n)),
                            L.block_of(lambda: self.refill(pre)), []))
        after = None if self.staged is None else (lambda: self.staged.step(pre, self.kt_n))
        compute_wgmma(L, self.plan, self.sa, self.sb, stage, self.acc_vars, after_issue=after)
        if self.ws:            # wait_group 1 passed: this warpgroup is done with tile it - 1's stage
            prev = N.BinOp("mod", N.BinOp("add", git, c32(S - 1), I32), c32(S), I32)
            L.emit(N.If(N.Logical("and", wg_first, N.Compare("gt", N.ReadVar(it), c32(0))), L.block_of(
                lambda: L.asm("mbarrier.arrive", [self.bar(prev, True)])), []))

    def synchronous(self) -> None:
        """Copies run S - 2 tiles ahead, issued by thread 0 after the block's barrier."""
        from dsl.tile.lower.matmul.wgmma import wait_wgmma
        L, S, ahead = self.L, self.S, self.S - 2
        for st in range(ahead if self.tx else 0):
            L.emit(N.If(N.Logical("and", self.leader, N.Compare("lt", c32(st), self.kt_n)),
                        L.block_of(lambda st=st: self.issue(c32(st), N.BinOp("mod", self.g(c32(st)), c32(S), I32)
                                                            if self.kbase is not None else c32(st))), []))
        if self.staged is not None:        # not persistent (mma_sync.match): local k tile = stage count
            self.staged.prologue(ahead, self.kt_n)
        it = L.new_var(I32, "kit")
        L.emit(N.ForRange(it, c32(0), self.kt_n, c32(1), L.block_of(lambda: self.body(it, ahead, None)),
                          self.plan.loop.loc))
        wait_wgmma(L, 0, self.acc_vars)
        L.sync()
        self.advance()

    def warp_specialised(self) -> None:
        """The roles' own loops, under one concurrent If (the simulator runs its sides as coroutines):
        the compute warpgroups wait, multiply, release and drain; thread 0 of the producer warpgroup
        copies every k tile into its stage once the tile S before it was released."""
        from dsl.tile.lower.matmul.warp_specialised import reallocate
        from dsl.tile.lower.matmul.wgmma import wait_wgmma
        L, kt_n, loc = self.L, self.kt_n, self.plan.loop.loc
        it = L.new_var(I32, "kit")
        wg_first = L.tmp(N.Compare("eq", N.BinOp("and_", self.tid, c32(127), I32), c32(0)), "wg0")
        jt = L.new_var(I32, "pkt")

        def consumers() -> None:
            if self.kbase is None:      # KB_TILE_SETMAXNREG (a persistent kernel would repeat it per tile)
                reallocate(L, consumer=True)
            L.emit(N.ForRange(it, c32(0), kt_n, c32(1), L.block_of(lambda: self.body(it, self.S - 2, wg_first)), loc))
            wait_wgmma(L, 0, self.acc_vars)
            if self.kbase is None and L.setmaxnreg != "off":
                # what follows the loop runs here, inside the consumer role: after the roles join, ptxas
                # would have to fit the live accumulators in the producer's registers (C7600)
                tail, L.ws_tail = L.ws_tail, None
                L.consumers_only = True
                L.stmts(tail)
            if self.kbase is not None:     # persistent: release the last stage too (the next tile refills it)
                last = N.BinOp("mod", self.g(N.BinOp("sub", kt_n, c32(1), I32)), c32(self.S), I32)
                L.emit(N.If(N.Logical("and", wg_first, N.Compare("gt", kt_n, c32(0))), L.block_of(
                    lambda: L.asm("mbarrier.arrive", [self.bar(last, True)])), []))

        def producer() -> None:
            if self.kbase is None:
                reallocate(L, consumer=False)
            L.emit(N.If(self.leader, L.block_of(lambda: L.emit(N.ForRange(jt, c32(0), kt_n, c32(1), L.block_of(
                lambda: self.refill(N.ReadVar(jt))), loc))), []))
        L.emit(N.If(self.consumer, L.block_of(consumers), L.block_of(producer), concurrent=True))
        self.advance()
        L.consumers_only = True       # from here on only the consumers run (dsl/tile/lower/kernel.py)
        if not (L.persistent and L.store_by_warpgroup and not L.lazy_barriers):
            L.emit(N.If(self.consumer, L.block_of(L.sync), []))
        # else no barrier of the two consumer warpgroups: a persistent kernel's stores stage in a tile of their
        # own (store_tma._staging), never in the operand stages the other warpgroup may still read, and under
        # store_by_warpgroup each warpgroup stages its own rows between barriers of its own. So the warpgroups
        # drift apart by up to the ring's depth: one runs the next tile's first products while the other
        # stores this tile, and their epilogues no longer leave the tensor cores idle together. (Other shared
        # memory of the epilogue, a reduction's, closes with a barrier of both, which neither passes before the
        # other is done reading; lazy_barriers leaves that to the next barrier, so it keeps this one.)
