"""Block barriers the tile lowering drops (dsl/tile/lower/barriers.py): a barrier right after another of
the same block, with only statements between them that a barrier does not order (register arithmetic,
descriptors, a TMA load and its mbarrier arming). Any shared or global access, fence or other
instruction between them keeps the second. (The fused attention backward's 8-warp step, where it first
dropped one, releases its ring stages by mbarrier arrivals since: its barriers are pinned here too.)"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from dsl.ir import nodes as N
from dsl.ir.types import BOOL, F32, I32, U32, U64
from dsl.tile.lower.barriers import redundant_barrier
from dsl.tile.ptx.table import instruction
from interop_tests.dsl_tile.test_flash_attention_bwd_fused import FUSED, nan


def assign(value, t=I32) -> N.Assign:
    return N.Assign(N.Var("x", t), value)


def tma_refill() -> N.If:
    """The leader's refill of a ring stage: arm the mbarrier, then the TMA load."""
    c = N.Const(0, U32)
    arm = N.ExprStmt(instruction("mbarrier.arrive.expect_tx", [c, c]))
    load = N.ExprStmt(instruction("cp.async.bulk.tensor.2d", [c, N.Const(0, U64), N.Const(0, I32), N.Const(0, I32), c]))
    return N.If(N.Const(True, BOOL), [arm, load], [])


def test_a_barrier_after_a_barrier_and_register_arithmetic_is_dropped():
    block = [N.SyncThreads(), assign(N.BinOp("add", N.Const(1, I32), N.Const(2, I32), I32))]
    assert redundant_barrier(block, named=False)


def test_a_barrier_after_the_leaders_tma_refill_of_a_ring_stage_is_dropped():
    assert redundant_barrier([N.SyncThreads(), tma_refill(), assign(N.Const(3, I32))], named=False)


def test_a_shared_store_between_keeps_the_barrier():
    st = N.ExprStmt(instruction("st.shared.b32", [N.Const(0, U32), N.Const(1, U32)]))
    assert not redundant_barrier([N.SyncThreads(), st], named=False)


def test_a_fence_or_a_load_between_keeps_the_barrier():
    fence = N.ExprStmt(instruction("fence.proxy.async", []))
    assert not redundant_barrier([N.SyncThreads(), fence], named=False)
    load = assign(N.Load(N.ParamRef(N.Param("a", None, 0)), [N.Const(0, I32)], "none", 0, F32), F32)
    assert not redundant_barrier([N.SyncThreads(), load], named=False)


def test_no_earlier_barrier_in_the_block_keeps_it():
    assert not redundant_barrier([], named=False)
    assert not redundant_barrier([assign(N.Const(1, I32))], named=False)


def test_the_fused_backwards_8_warp_step_meets_only_where_both_warpgroups_must():
    """The 8-warp form's loop: its ring stages are released by arrivals on their empty mbarriers (ring.py:
    two warpgroups), not block barriers, so what stays is the pair around dS^T's staging for dQ (both
    warpgroups' halves of dS^T) and each warpgroup's own two around its dQ adds (store_tma.py, a pair of
    branches: 4 `bar.sync 4|5, 128`). 10 block barriers in the kernel (15 before 2026-12-05 night, 13
    once this module dropped the one the Q stage's release barrier made redundant)."""
    d, seq, rows = 128, 256, 512
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    form = "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads"
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    kern, args = steps[1]
    ptx = kern.compile(args, "sm_90").ptx
    own = ptx.count("bar.sync 4, 128;") + ptx.count("bar.sync 5, 128;")
    assert own == 4 and ptx.count("bar.sync") - own == 10
    assert ptx.count("mbarrier.arrive.shared::cta.b64 _,") == 2          # Q's and dO's stage releases
