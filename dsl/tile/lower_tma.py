"""sm_90 GEMM main loop fed by TMA (plan.kind == "tma"): bulk tensor copies on mbarriers into the
swizzled stages the warpgroup MMA of lower_wgmma.py reads.

Why TMA: with cp.async every thread computes addresses, bounds and predicates for its share of each
stage (~200 instructions per stage); here one thread issues 1 + BN/64 bulk copies and an
`expect_tx`, the copy engine does the bounds (out-of-range box elements are zero-filled: ragged M, N
and K need no code), and the other threads only wait on the stage's mbarrier.

The tensor maps are kernel parameters (TensorMapType, __grid_constant__) that the launcher builds
from the validated views (contract "tensor_maps"; the one validator checks what TMA needs, so a bad
view is a typed refusal naming the argument). A is one box [BM, BK] (128-byte swizzle for 128-byte rows,
64-byte for 64-byte rows: the layout compute_wgmma's descriptors expect); B is BN/64 boxes [BK, 64]
with 128-byte swizzle, the MN-major atoms [BN/64][BK][64], or, stored N x K (K-major), one box
[BN, BK] swizzled like A.

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
(dropped) 605. No register reallocation: ptxas 13.0 failed to allocate
the compute side at setmaxnreg 232 (C7600), so a 128x256 tile with a bias epilogue spills in ws mode.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import I32, INDEX, U32, U64, ArrayType, TensorMapType
from dsl.tile import ptx_sim_sm90 as S90
from dsl.tile.ptx_sim import no_op
from dsl.tile.layout import c32

BAR = "mbarrier.{}.shared::cta.b64"



def _tensor_map_param(L, array_param, box: tuple[int, int], swizzle: int) -> N.Expr:
    """A TensorMapType parameter of the kernel, appended after the others (contract order)."""
    name = f"{array_param.name}__tmap"
    p = N.Param(name, TensorMapType(array_param.name, box, swizzle), len(L.params) + len(L.extra_params))
    L.extra_params.append(p)
    return N.ParamRef(p)


def lower_loop_tma(L, plan, acc_vars: list[N.Var]) -> None:
    from dsl.tile.gemm_stages import operand_stages
    from dsl.tile.lower_wgmma import compute_wgmma, kmajor_swizzle, wait_wgmma
    s = plan.loop
    bm, bn, bk, S = plan.bm, plan.bn, plan.bk, plan.stages
    es = plan.esize
    L.arch_specific = True
    kswz = kmajor_swizzle(plan)
    tmap_a = _tensor_map_param(L, plan.a.param, (bm, bk), kswz)
    kmaj = plan.b_kmajor
    tmap_b = _tensor_map_param(L, plan.b.param, (bn, bk) if kmaj else (bk, 64), kswz if kmaj else 128)
    _, _, sa, sb = operand_stages(L, plan)
    ws = L.ws            # warp-specialised: tid.x < 128 produce (thread 0 copies), the rest compute
    # S "full" barriers (the stage's copies landed), then S "empty" ones (both warpgroups are done with it)
    nbars = 2 * S if ws else S
    bars = N.SharedAlloc("gemm_stage_bars", ArrayType(U64, 1, writable=True, space="shared", shape=(nbars,)),
                         align=8)
    L.extra_shared.append(bars)
    # persistent: the barriers are set up once, before the tile loop, and a k-tile counter (kbase, the
    # k tiles of the block's earlier tiles) runs on across tiles, so stages and phases carry over
    once = L.in_prologue if L.persistent else (lambda f: f())
    kbase = L.new_var(I32, "kbase") if L.persistent else None
    if kbase is not None:
        once(lambda: L.emit(N.Assign(kbase, c32(0))))
    bar0 = once(lambda: L.tmp(TN.SharedAddress(N.SharedArray(bars), N.Const(0, INDEX)), "bar0"))

    def g(local: N.Expr) -> N.Expr:
        """The block's running k-tile number of this tile's k tile `local`."""
        return local if kbase is None else N.BinOp("add", N.ReadVar(kbase), local, I32)

    def bar(stage: N.Expr, empty: bool = False) -> N.Expr:
        slot = N.BinOp("add", stage, c32(S), I32) if empty else stage
        return N.BinOp("add", bar0, N.BinOp("mul", N.Cast(slot, U32), N.Const(8, U32), U32), U32)

    def wait(at: N.Expr, parity: N.Expr) -> None:
        L.asm("{ .reg .pred p; KB_WAIT_${:uid}: " + BAR.format("try_wait.parity") + " p, [$0], $1; "
              "@!p bra KB_WAIT_${:uid}; }", "r,r", [at, parity], sim=S90.try_wait_parity)

    tid = L.geo.tid
    leader = once(lambda: L.tmp(N.Compare("eq", L.ws_tid if ws else tid, c32(0)), "leader"))
    consumer = L.ws_consumer
    row0 = L.tmp(N.BinOp("mul", N.Cast(L.scalar(plan.a.index[0]), I32), c32(bm), I32), "arow")
    col0 = L.tmp(N.BinOp("mul", N.Cast(L.scalar(plan.b.index[0 if kmaj else 1]), I32), c32(bn), I32), "bcol")
    start, stop = L.scalar(s.start), L.scalar(s.stop)
    kt_n = L.tmp(N.BinOp("max", N.BinOp("sub", stop, start, I32), c32(0), I32), "ktiles")
    tx = (bm * bk + bk * bn) * es

    def init() -> None:
        for st in range(S):
            L.asm(BAR.format("init") + " [$0], 1;", "r", [bar(c32(st))], sim=S90.mbarrier_init(1))
            if ws:
                L.asm(BAR.format("init") + " [$0], 2;", "r", [bar(c32(st), True)], sim=S90.mbarrier_init(2))
        L.asm("fence.mbarrier_init.release.cluster;", sim=no_op)
        L.asm("prefetch.tensormap [$0];", "l", [tmap_a], sim=no_op)
        L.asm("prefetch.tensormap [$0];", "l", [tmap_b], sim=no_op)

    def set_up() -> None:
        L.emit(N.If(leader, L.block_of(init), []))
        L.sync()
    once(set_up)

    def issue(kt: N.Expr, stage: N.Expr) -> None:
        """Thread 0: expect the stage's bytes, then copy k tile `kt` of A and B into `stage`."""
        k0 = L.tmp(N.BinOp("mul", N.BinOp("add", kt, start, I32), c32(bk), I32), "k0")
        b_at = L.tmp(bar(stage), "sbar")
        L.asm(BAR.format("arrive.expect_tx") + " _, [$0], $1;", "r,r", [b_at, N.Const(tx, U32)],
              sim=S90.arrive_expect_tx)
        copy = ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                "[$0], [$1, {$2, $3}], [$4];")
        a_dst = sa(N.BinOp("mul", stage, c32(bm * bk), I32))
        L.asm(copy, "r,l,r,r,r", [a_dst, tmap_a, k0, row0, b_at], sim=S90.tma_load_2d)
        if kmaj:      # one box [BN, BK] of the N x K array, swizzled like A's
            L.asm(copy, "r,l,r,r,r", [sb(N.BinOp("mul", stage, c32(bk * bn), I32)), tmap_b, k0, col0, b_at],
                  sim=S90.tma_load_2d)
        for t in range(0 if kmaj else bn // 64):
            b_dst = sb(N.BinOp("add", N.BinOp("mul", stage, c32(bk * bn), I32), c32(t * bk * 64), I32))
            L.asm(copy, "r,l,r,r,r", [b_dst, tmap_b, N.BinOp("add", col0, c32(t * 64), I32), k0, b_at],
                  sim=S90.tma_load_2d)

    ahead = S - 2        # sync: copies run S - 2 tiles ahead (ws: the producer has its own loop)
    for st in range(0 if ws else ahead):
        L.emit(N.If(N.Logical("and", leader, N.Compare("lt", c32(st), kt_n)),
                    L.block_of(lambda st=st: issue(c32(st), N.BinOp("mod", g(c32(st)), c32(S), I32)
                                                   if kbase is not None else c32(st))), []))
    it = L.new_var(I32, "kit")
    wg_first = L.tmp(N.Compare("eq", N.BinOp("and_", tid, c32(127), I32), c32(0)), "wg0") if ws else None

    def refill(pre: N.Expr) -> None:
        """Leader: copy k tile `pre` into its stage (ws: once both compute warpgroups released the
        stage's previous use)."""
        gp = L.tmp(g(pre), "gpre")
        pst = L.tmp(N.BinOp("mod", gp, c32(S), I32), "pst")
        if ws:            # the stage's last use was tile gp - S: wait for phase (gp / S - 1) of its empty barrier
            used = N.Compare("ge", gp, c32(S))
            par = N.BinOp("and_", N.BinOp("add", N.BinOp("floordiv", gp, c32(S), I32), c32(1), I32), c32(1), I32)
            L.emit(N.If(used, L.block_of(lambda: wait(bar(pst, True), par)), []))
        issue(pre, pst)

    def advance() -> None:
        if kbase is not None:
            L.emit(N.Assign(kbase, N.BinOp("add", N.ReadVar(kbase), kt_n, I32)))

    def body() -> None:
        git = L.tmp(g(N.ReadVar(it)), "git")
        stage = L.tmp(N.BinOp("mod", git, c32(S), I32), "cst")
        parity = L.tmp(N.BinOp("and_", N.BinOp("floordiv", git, c32(S), I32), c32(1), I32), "par")
        pre = None if ws else L.tmp(N.BinOp("add", N.ReadVar(it), c32(ahead), I32), "pre")
        wait(bar(stage), parity)
        if not ws:
            L.sync()    # every warpgroup is past wait_group 1 of the last iteration: stage it-2 is free
            L.emit(N.If(N.Logical("and", leader, N.Compare("lt", pre, kt_n)), L.block_of(lambda: refill(pre)), []))
        compute_wgmma(L, plan, sa, sb, stage, acc_vars)
        if ws:            # wait_group 1 passed: this warpgroup is done with tile it - 1's stage
            prev = N.BinOp("mod", N.BinOp("add", git, c32(S - 1), I32), c32(S), I32)
            L.emit(N.If(N.Logical("and", wg_first, N.Compare("gt", N.ReadVar(it), c32(0))), L.block_of(
                lambda: L.asm(BAR.format("arrive") + " _, [$0];", "r", [bar(prev, True)], sim=S90.arrive)), []))
    if ws:
        # The roles' own loops, under one concurrent If (the simulator runs its sides as coroutines):
        # the compute warpgroups wait, multiply, release and drain; thread 0 of the producer warpgroup
        # copies every k tile into its stage once the tile S before it was released.
        jt = L.new_var(I32, "pkt")

        def consumers() -> None:
            L.emit(N.ForRange(it, c32(0), kt_n, c32(1), L.block_of(body), s.loc))
            wait_wgmma(L, 0, acc_vars)
            if kbase is not None:     # persistent: release the last stage too (the next tile refills it)
                last = N.BinOp("mod", g(N.BinOp("sub", kt_n, c32(1), I32)), c32(S), I32)
                L.emit(N.If(N.Logical("and", wg_first, N.Compare("gt", kt_n, c32(0))), L.block_of(
                    lambda: L.asm(BAR.format("arrive") + " _, [$0];", "r", [bar(last, True)], sim=S90.arrive)), []))

        def producer() -> None:
            L.emit(N.If(leader, L.block_of(lambda: L.emit(N.ForRange(jt, c32(0), kt_n, c32(1), L.block_of(
                lambda: refill(N.ReadVar(jt))), s.loc))), []))
        L.emit(N.If(consumer, L.block_of(consumers), L.block_of(producer), concurrent=True))
        advance()
        L.consumers_only = True       # from here on only the consumers run (dsl/tile/lower.py)
        L.emit(N.If(consumer, L.block_of(L.sync), []))
    else:
        L.emit(N.ForRange(it, c32(0), kt_n, c32(1), L.block_of(body), s.loc))
        wait_wgmma(L, 0, acc_vars)
        L.sync()
        advance()
    L.relied.update({plan.a.param.name, plan.b.param.name})
