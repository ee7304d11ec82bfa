"""One shared-memory node (`nodes.SharedAlloc` + `nodes.SharedArray`) and one allocator for both front
ends: static buffers are internal `.shared` arrays with the alignment their allocation asks for, and
every dynamic allocation — SIMT `simt.shared.dynamic`, the tile GEMM's operand stages — is a view of
the one extern symbol `__kb_dynamic_smem`, aligned to the largest alignment any of them asks for."""
from __future__ import annotations

import re

import numpy as np

from dsl import f32, simt, tile
from dsl.backend.memory import DYNAMIC_SMEM_SYMBOL
from dsl.ir import nodes as N
from dsl.ir import tile_nodes as TN
from dsl.ir.types import F32, I32, INDEX, ArrayType
from interop_tests.dsl_codegen.codegen_kit import C, P, R, arr, gid, kernel, load, params, ptx_of, store

EXTERN = re.compile(r"\.extern \.shared \.align (\d+) \.b8 (\w+)\[\];")
STATIC = re.compile(r"^\s*\.shared \.align (\d+) \.b8 (\S+)\[(\d+)\];", re.M)


def shared(name: str, shape: tuple[int, ...], align: int = 16, dtype=F32) -> N.SharedAlloc:
    return N.SharedAlloc(name, ArrayType(dtype, len(shape), writable=True, space="shared", shape=shape),
                         align=align)


def test_the_shared_alloc_says_whether_it_is_dynamic():
    assert shared("d", (-1,)).dynamic and not shared("s", (8, 4)).dynamic
    assert shared("s", (8,)).align == 16        # the default every SIMT allocation gets


def test_two_dynamic_allocations_share_one_symbol_with_the_largest_alignment():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    d16, d1024 = shared("d16", (-1,)), shared("d1024", (-1,), align=1024)
    st = shared("st", (64,), align=1024)
    i, tx = N.Var("i", INDEX), N.Var("tx", INDEX)
    body = [N.Assign(i, gid()), N.Assign(tx, N.Special("tid.x")),
            store(N.SharedArray(d16), [R(tx)], load(a, [R(i)])),
            store(N.SharedArray(st), [N.BinOp("mod", R(tx), C(64), INDEX)], C(1.0, F32)),
            N.SyncThreads(),
            N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], N.BinOp(
                "add", load(N.SharedArray(d1024), [R(tx)]), load(N.SharedArray(st), [C(3)]), F32))])]
    ptx = ptx_of(kernel("smem2", [a, out], body, shared=[d16, d1024, st]))
    assert EXTERN.findall(ptx) == [("1024", DYNAMIC_SMEM_SYMBOL)]
    assert STATIC.findall(ptx) == [("1024", "smem2_$_smem_$_st_$_1", "256")]


@simt.kernel(block=64, shared_mem=("max", 1024))
def staged(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    with simt.unsafe():
        buf = simt.shared.dynamic(f32)
        t = simt.threadIdx.x
        if i < len(x):
            buf[t] = x[i]
        simt.sync_threads()
        if i < len(out):
            out[i] = buf[t] * 2.0


@tile.kernel
def gemm(a: tile.Array[tile.f16, 2], b: tile.Array[tile.f16, 2], c: tile.Partition[f32, 2],
         bk: tile.Constant[int]):
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.zeros((bm, bn), f32)
    for k in range((a.shape[1] + bk - 1) // bk):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    c.store(acc)


def test_simt_dynamic_shared_memory_and_the_tile_gemm_stages_use_the_same_symbol():
    x = np.zeros(100, np.float32)
    simt_ptx = staged.ptx(x, x.copy(), arch="sm_80")
    assert EXTERN.findall(simt_ptx) == [("16", DYNAMIC_SMEM_SYMBOL)]
    a = np.zeros((128, 128), np.float16)           # C-contiguous, aligned, rows of 8k: the mma path
    args = (a, a, tile.partition(np.zeros((128, 128), np.float32), (64, 64)), 32)
    tile_ptx = gemm.ptx(*args, arch="sm_80")
    assert "mma.sync.aligned" in tile_ptx
    assert EXTERN.findall(tile_ptx) == [("1024", DYNAMIC_SMEM_SYMBOL)]   # 1024-byte operand stages
    assert "tile_dyn" not in tile_ptx


def test_the_tile_lowering_declares_its_dynamic_stages_as_a_shared_alloc():
    from dsl.tile.lower import lower, pick_threads
    a = np.zeros((128, 128), np.float16)
    args = (a, a, tile.partition(np.zeros((128, 128), np.float32), (64, 64)), 32)
    fn = gemm.tile_ir(*args)
    info: dict = {}
    simt_fn = lower(fn, pick_threads(fn), "gemm", gemm.facts(args), info, cc=80)
    dyn = [s for s in simt_fn.shared if s.dynamic]
    assert [(s.name, s.align, s.type.dtype.name) for s in dyn] == [("gemm_operands", 1024, "f16")]
    assert info["dynamic_smem"] > 1024
    refs = [e for e in _exprs(simt_fn.body) if isinstance(e, TN.SharedAddress)]
    assert refs and all(isinstance(r.array, N.SharedArray) and r.array.alloc is dyn[0] for r in refs)
    assert not hasattr(TN, "SharedBuffer")          # no second shared-memory node


def _exprs(stmts):
    """Every expression under `stmts` (nested statements included)."""
    todo = list(stmts)
    while todo:
        n = todo.pop()
        if isinstance(n, N.Expr):
            yield n
        for v in vars(n).values():
            if isinstance(v, (N.Expr, N.Stmt)):
                todo.append(v)
            elif isinstance(v, list):
                todo.extend(x for x in v if isinstance(x, (N.Expr, N.Stmt)))


def test_static_alignment_reaches_the_ptx():
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    st = shared("wide", (32,), align=256, dtype=I32)
    i, tx = N.Var("i", INDEX), N.Var("tx", INDEX)
    lane = N.BinOp("mod", R(tx), C(32), INDEX)
    body = [N.Assign(i, gid()), N.Assign(tx, N.Special("tid.x")),
            store(N.SharedArray(st), [lane], N.Cast(R(tx), I32)), N.SyncThreads(),
            N.GuardedRegion(P(out), [R(i)], [store(out, [R(i)], N.Cast(
                load(N.SharedArray(st), [N.BinOp("mod", N.BinOp("add", R(tx), C(1), INDEX), C(32), INDEX)], I32),
                F32))])]
    ptx = ptx_of(kernel("aligned", [a, out], body, shared=[st]))
    assert STATIC.findall(ptx) == [("256", "aligned_$_smem_$_wide_$_0", "128")]
    assert not EXTERN.findall(ptx)
