"""A loop-local variable naming a load's index (`kk = n - 1 - k; tile.load(a, (i, kk), ...)`) keeps the loop's
pipeline (cp.async copies an iteration ahead, or a TMA ring on sm_90): the lowering reads the variable's
expression in the load's index (dsl/tile/lower/index_aliases.py). Before, such a loop silently ran its loads
unpipelined. The PTX of the two spellings is compared, and both are simulated against NumPy float64."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from dsl import bf16, f32, tile
from dsl.tile import ir as T
from dsl.tile.lower.index_aliases import inline_index_aliases

BK = 32


def backwards_inline(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2], c: tile.Partition[f32, 2]):
    """c = a @ b with the k blocks walked last to first, the index written in the loads."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    n = a.shape[1] // BK
    acc = tile.zeros((bm, bn), f32)
    for k in range(n):
        acc = tile.mma(tile.load(a, (i, n - 1 - k), (bm, BK)), tile.load(b, (n - 1 - k, j), (BK, bn)), acc)
    c.store(acc)


def backwards_named(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2], c: tile.Partition[f32, 2]):
    """The same with the k block named first."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    n = a.shape[1] // BK
    acc = tile.zeros((bm, bn), f32)
    for k in range(n):
        kk = n - 1 - k
        acc = tile.mma(tile.load(a, (i, kk), (bm, BK)), tile.load(b, (kk, j), (BK, bn)), acc)
    c.store(acc)


def backwards_reassigned(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2], c: tile.Partition[f32, 2]):
    """A variable the body assigns twice is no alias: its value at the load is not its first expression."""
    bm, bn = c.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    n = a.shape[1] // BK
    acc = tile.zeros((bm, bn), f32)
    for k in range(n):
        kk = k
        kk = n - 1 - kk
        acc = tile.mma(tile.load(a, (i, kk), (bm, BK)), tile.load(b, (kk, j), (BK, bn)), acc)
    c.store(acc)


def _operands(rng):
    a = rng.standard_normal((64, 4 * BK)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((4 * BK, 64)).astype(ml_dtypes.bfloat16)
    return a, b


def _run(fn, rng, arch: str, lowering: dict | None = None):
    a, b = _operands(rng)
    c = np.full((64, 64), np.nan, np.float32)
    kern = tile.kernel(num_warps=4, lowering=lowering)(fn)
    args = (a, b, tile.partition(c, (64, 64)))
    kern.simulate_lowered(*args, tensor_cores=True, arch=arch)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    return kern.ptx(*args, arch=arch)


@pytest.mark.parametrize("arch,lowering,copy", [("sm_80", None, "cp.async.cg.shared.global"),
                                                ("sm_90", {"loop_pipeline": "tma"}, "cp.async.bulk.tensor")],
                         ids=["cp.async", "tma ring"])
def test_a_named_index_keeps_the_loops_pipeline(rng, arch, lowering, copy):
    inline = _run(backwards_inline, rng, arch, lowering)
    named = _run(backwards_named, np.random.default_rng(1), arch, lowering)
    assert inline.count(copy) > 0 and named.count(copy) == inline.count(copy)
    assert named.count("bar.sync") == inline.count("bar.sync")


def test_a_variable_the_body_assigns_twice_is_not_read_as_its_first_expression(rng):
    """Its loads stay as written (not pipelined) and the result is right."""
    _run(backwards_reassigned, rng, "sm_80")
    fn = tile.kernel(num_warps=4)(backwards_reassigned)
    a, b = _operands(rng)
    ir = fn._ir_for(fn.specialisation((a, b, tile.partition(np.zeros((64, 64), np.float32), (64, 64))))[0])
    assert inline_index_aliases(ir) is ir


def test_a_kernel_without_aliases_keeps_its_tile_ir_object(rng):
    fn = tile.kernel(num_warps=4)(backwards_inline)
    a, b = _operands(rng)
    ir = fn._ir_for(fn.specialisation((a, b, tile.partition(np.zeros((64, 64), np.float32), (64, 64))))[0])
    assert inline_index_aliases(ir) is ir
    loads = [x for s in T.walk_stmts(ir.body) if isinstance(s, T.Assign) for x in T.walk_exprs(s.value)
             if isinstance(x, T.Load)]
    assert len(loads) == 2
