"""sm_90 warpgroup MMA for a tile.matmul outside the GEMM loops (matmul/products.py hands it the
products tc_operands.wgmma_b accepts): flash attention's S = Q K^T and O += P V.

The warps split M in 16-row slices, four to a warpgroup, so one m64nNk16 `wgmma.mma_async` per
warpgroup and 16-element step of K computes the product. Its accumulators are laid out per warp
exactly as mma.sync's m16n8 accumulators of MmaLayout (register i: row g (+8 for i % 4 >= 2),
column 8 (i / 4) + 2t + i % 2), and its A operand comes from registers in mma.sync's A-fragment
layout, so S, P (S's accumulators packed pairwise), the row statistics and a loop-invariant Q keep
the layouts and registers of the mma.sync lowering (with KB_TILE_WGMMA_A=shared a loop-invariant Q
waits in shared memory instead and its products are SS wgmmas: matmul/shared_a.py). B is read by the
tensor cores from shared memory through a matrix descriptor: the tile is staged by cp.async (copied a loop iteration ahead where the
pipeline takes it) in 128-byte swizzle atoms [cols / 64][rows][64]: K of S = Q K^T is K-major B,
V of P V is MN-major B (imm-trans-b). Each product waits for its group (wait_group 0) before its
result is used; warpgroups of other blocks on the SM overlap with that wait.
"""
from __future__ import annotations

from dsl.ir import nodes as N
from dsl.ir.types import F32
from dsl.tile import ir as T
from dsl.tile.lower.layout import LV, MmaLayout
from dsl.tile.lower.matmul.stages import aligned_base
from dsl.tile.lower.copies import cp_async_commit, cp_async_wait, fence_proxy_async
from dsl.tile.lower.matmul import batches, overlap, pingpong
from dsl.tile.lower.matmul.fragments import pack_pairs
from dsl.tile.lower.pipeline import prefetch_next, ring_done, ring_wait, stage_base, wait_for
from dsl.tile.lower.matmul.wgmma import wait_wgmma
from dsl.tile.lower.matmul.wgmma_rs import issue_product, issue_product_ss
from dsl.tile.lower.matmul.swizzled import SwizzledA
from dsl.tile.lower.matmul.transposed_a import TransposedA
from dsl.tile.lower.matmul.operands import STAGE_SLACK_ELEMS, issue_copies, wgmma_stage


def lower_product_wgmma(L, e: T.Matmul, layout: MmaLayout, acc_vars: list[N.Var], a_frags: dict | None,
                        b: T.Load | T.Read, a_shared: SwizzledA | TransposedA | None = None,
                        a_packed: dict | None = None) -> LV:
    """e: the product, b: its B load (e.b itself, or the operand of e.b's transpose: K-major B), or a
    read of a variable kept in swizzle atoms (operands.wgmma_b);
    a_frags: {(0, ks): 8 A elements} in registers, or None with `a_packed` ({(mt, ks): 4 packed
    registers}, ldmatrix'd from shared memory) or with `a_shared`, A's swizzle atoms in shared memory
    (KB_TILE_WGMMA_A=shared, matmul/shared_a.py; never a rotated last product's), or the transpose of a
    register tile written into them (matmul/transposed_a.py); acc_vars: the initialised accumulators."""
    (m, k), (_, n) = e.a.type.shape, e.b.type.shape
    dtype = e.a.type.dtype
    L.arch_specific = True              # warpgroup MMA exists only on the arch-specific target sm_90a
    rows, cols = b.type.shape
    pipe = L.pipelined.get(id(b))
    a_regs = None
    rot = pipe.rotation if pipe is not None and pipe.ring is not None else None
    if rot is not None and e is rot.last:           # issued in the next iteration (matmul/overlap.py)
        assert a_shared is None, "a rotated last product takes its A from registers"
        a_regs = _packed(L, layout, k, dtype, a_frags, a_packed)
        overlap.stash_last(L, pipe, b, a_regs)
        return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])
    # in a batch (matmul/batches.py) a product on a ring stage or on atoms it does not rewrite waits later;
    # any other completes the batch so far first
    can_defer = (rot is None and pingpong.of(pipe, e) is None
                 and ((pipe is not None and pipe.ring is not None) or (pipe is None and isinstance(b, T.Read))))
    if L.deferred and not (can_defer and batches.takes(L)):
        batches.complete(L)
    if pipe is not None and pipe.ring is not None:  # a TMA ring's stage (matmul/ring.py)
        at, it, base = ring_wait(L, pipe, b)
    elif pipe is not None:
        stage = pipe.stages[pipe.position(b)]
        assert stage.swizzled, "the pipeline staged a wgmma operand for ldmatrix"
        wait_for(L, pipe, [b], async_proxy=True)
        base = stage_base(L, pipe, stage)
    elif isinstance(b, T.Read):                     # kept in swizzle atoms where it was assigned
        base = L.vars[id(b.var)][0].base
    else:
        buf = wgmma_stage(L, dtype, rows * cols + STAGE_SLACK_ELEMS, ("product", id(e)))
        issue_copies(L, b, buf, cols, [L.scalar(i) for i in b.index], swizzled=aligned_base(L, buf, "swz"))
        cp_async_commit(L)
        cp_async_wait(L, 0)
        fence_proxy_async(L)
        L.sync()
        base = aligned_base(L, buf, "swz")
    pingpong.before_issue(L, pipe, e)              # the product that opens this warpgroup's turn
    if a_shared is not None:
        issue_product_ss(L, e, b, base, acc_vars, a_shared, layout.wn if layout.by_warpgroup else 1)
    else:
        issue_product(L, e, b, base, acc_vars, _packed(L, layout, k, dtype, a_frags, a_packed))
    L.asm("wgmma.commit_group")
    pending = 0
    if rot is not None and e is rot.first:          # the previous iteration's last product, behind it
        overlap.issue_last(L, pipe, it)
        pending = 1
    pingpong.after_commit(L, pipe, e)               # the first product's group (and the rotated one) end it
    # a deferred product frees its stage only if it was the stage's last reader when it was issued (a
    # later product of the batch may read the same stage: it frees it after its own wait)
    last = pipe.last_use(at) if pipe is not None and pipe.ring is not None else False
    if can_defer and batches.defer(L, acc_vars, (lambda: ring_done(L, pipe, at, it, last=last)) if pipe is not None
                                   else (lambda: None)):
        return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])
    wait_wgmma(L, pending, acc_vars)
    if pipe is not None and pipe.ring is not None:  # the stage is free once this group completed
        ring_done(L, pipe, at, it)
    elif pipe is None and isinstance(b, T.Read):    # B's atoms are not rewritten: nothing to release
        pass
    elif pipe is not None and pipe.ahead > 1:      # the copies go into the buffer of iteration j - 1,
        prefetch_next(L, pipe, [b])                 # which every warp left before this iteration's wait
    else:
        L.sync()                        # every warpgroup is done reading the stage
        if pipe is not None:
            prefetch_next(L, pipe, [b])
    return LV(layout, (m, n), F32, [N.ReadVar(v) for v in acc_vars])


def _packed(L, layout: MmaLayout, k: int, dtype, a_frags: dict | None, a_packed: dict | None) -> list:
    """The A registers of each m-tile and 16-element step of K, packed pairwise."""
    return [a_packed[mt, ks] if a_packed is not None else pack_pairs(L, a_frags[mt, ks], dtype)
            for mt in range(layout.mt) for ks in range(k // 16)]
