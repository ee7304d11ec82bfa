"""The tile lowering switch early_loads (dsl/tile/lower/anchors.py): element loads of an array the kernel
never writes are issued at the start of their block (after whatever assigns their indices), not at
their first use, so that a load whose values wait on a product is in flight during the product's wgmma.
The placement rule, the PTX order it gives, and the same results in the simulators."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from dsl import bf16, f32, f64, i32, tile
from dsl.ir import nodes as N
from dsl.ir.types import I32
from dsl.tile.lower.anchors import emit_early
from dsl.tile.switches import switches_key

ROWS = 64


def scaled_products_pyfunc(a: tile.Array[bf16, 2], b: tile.Array[bf16, 2], r: tile.Array[f64, 1],
                           out: tile.Partition[f32, 2], n: i32):
    """out = sum_j (A_j B) * r_j[None, :]: each step's row vector r_j (f64, so that its loads are told apart
    from A's in the PTX) scales its product's columns."""
    acc = tile.zeros((ROWS, ROWS), f32)
    for j in range(n):
        s = tile.matmul(tile.load(a, (j, 0), (ROWS, ROWS)), tile.load(b, (0, 0), (ROWS, ROWS)))
        acc = acc + s * tile.load(r, (j,), (ROWS,)).astype(f32)[None, :]
    out.store(acc)


PLAIN = tile.kernel(scaled_products_pyfunc, num_warps=4)
EARLY = tile.kernel(scaled_products_pyfunc, num_warps=4, lowering={"early_loads": True})


def _inputs(rng, n=3):
    a = rng.standard_normal((n * ROWS, ROWS)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((ROWS, ROWS)).astype(ml_dtypes.bfloat16)
    r = rng.standard_normal(n * ROWS)
    return a, b, r, n


def _reference(a, b, r, n):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return sum((a64[j * ROWS:(j + 1) * ROWS] @ b64) * r[j * ROWS:(j + 1) * ROWS][None, :] for j in range(n))


def _args(a, b, r, n, out):
    return a, b, r, tile.partition(out, (ROWS, ROWS)), n


def _loop_order(kernel) -> tuple[int, int]:
    """(position of the first 8-byte ld.global, r's, of the first wgmma.wait_group) in the PTX text."""
    a, b, r, n = _inputs(np.random.default_rng(0))
    ptx = kernel.compile(_args(a, b, r, n, np.zeros((ROWS, ROWS), np.float32)), "sm_90").ptx
    loads = [k for k, line in enumerate(ptx.splitlines()) if re.search(r"ld\.global(\.nc)?(\.v\d)?\.(f64|b64)\s", line)]
    waits = [k for k, line in enumerate(ptx.splitlines()) if "wgmma.wait_group" in line]
    assert loads and waits, ptx[-3000:]
    return loads[0], waits[0]


def test_under_early_loads_the_row_vector_is_loaded_before_the_products_wait():
    load, wait = _loop_order(EARLY)
    assert load < wait


def test_without_the_switch_the_row_vector_is_loaded_where_it_is_first_used():
    load, wait = _loop_order(PLAIN)
    assert load > wait


def test_the_switch_is_part_of_the_compile_key():
    assert "early_loads" in switches_key((("early_loads", True),)) and "early_loads" not in switches_key()


@pytest.mark.parametrize("kernel", [PLAIN, EARLY], ids=["plain", "early"])
def test_both_match_float64_in_the_simulator_and_the_lowered_sm90_simulator(rng, kernel):
    a, b, r, n = _inputs(rng)
    want = _reference(a, b, r, n)
    for run in ("simulate", "lowered"):
        out = np.full((ROWS, ROWS), np.nan, np.float32)
        if run == "simulate":
            kernel.simulate(*_args(a, b, r, n, out))
        else:
            kernel.simulate_lowered(*_args(a, b, r, n, out), tensor_cores=True, arch="sm_90")
        np.testing.assert_allclose(out, want, rtol=0, atol=1e-2 * np.abs(want).max(), err_msg=run)


class _Lowerer:
    """The part of the tile lowering emit_early uses: a stack of open statement lists, and the scratch
    buffers a relayout left unordered (lazy_barriers: emit_early refuses to move such a relayout)."""

    def __init__(self, block: list) -> None:
        self.stack = [block]
        self.war_pending: set[str] = set()

    def emit(self, s: N.Stmt) -> None:
        self.stack[-1].append(s)


def _assign(name: str, value: N.Expr) -> N.Assign:
    return N.Assign(N.Var(name, I32), value)


def test_emit_early_puts_the_statements_after_the_last_assignment_they_read():
    x = _assign("x", N.Const(1, I32))
    y = _assign("y", N.Const(2, I32))
    z = _assign("z", N.ReadVar(x.var))
    block = [x, y, z]
    L = _Lowerer(block)
    reads_y = _assign("a", N.ReadVar(y.var))
    got = emit_early(L, lambda: (L.emit(reads_y), [N.ReadVar(reads_y.var)])[1])
    assert block == [x, y, reads_y, z] and isinstance(got[0], N.ReadVar)
    free = _assign("b", N.Const(3, I32))                 # reads nothing assigned here: the block's start
    emit_early(L, lambda: (L.emit(free), [])[1])
    assert block[0] is free
    reads_z = _assign("c", N.ReadVar(z.var))             # the last statement assigns what it reads: the end
    emit_early(L, lambda: (L.emit(reads_z), [])[1])
    assert block[-1] is reads_z and block[-2] is z


def test_emit_early_sees_assignments_inside_nested_statements():
    x = _assign("x", N.Const(1, I32))
    inner = _assign("w", N.Const(5, I32))
    loop = N.ForRange(N.Var("i", I32), N.Const(0, I32), N.Const(4, I32), N.Const(1, I32), [inner])
    block = [x, loop, _assign("tail", N.Const(0, I32))]
    L = _Lowerer(block)
    reads_w = _assign("a", N.ReadVar(inner.var))
    emit_early(L, lambda: (L.emit(reads_w), [])[1])
    assert block.index(reads_w) == 2                    # after the loop that assigns w
    reads_i = _assign("b", N.ReadVar(loop.var))
    emit_early(L, lambda: (L.emit(reads_i), [])[1])
    assert block.index(reads_i) == 2                    # the loop variable counts as assigned by the loop


def test_emit_early_refuses_to_move_statements_that_leave_a_relayouts_readers_unordered():
    """Moved up, a relayout's loads would no longer sit where lazy_barriers counted its barriers."""
    from dsl.tile.lower.errors import LoweringError
    L = _Lowerer([])
    with pytest.raises(LoweringError, match="internal: an early element load went through a relayout's scratch"):
        emit_early(L, lambda: (L.war_pending.add("f32"), [])[1])
