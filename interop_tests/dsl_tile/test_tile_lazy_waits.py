"""Products issued as early as their operands allow and waited for where their results are read
(lowering switch `lazy_waits`: dsl/tile/lower/matmul/hoist.py moves the statements, batches.py defers
the waits): which statements move, the waits in the PTX (the first product's wait_group 1 leaves the
second on the tensor cores through the math between them), results against float64 in the lowered
simulator with TMA copies landing early and late (it reads a product's operands and writes its
accumulators at the wait, so a result read before its wait, or a wait that completes too little, is
wrong there as on the GPU), and the fused attention backward's step. Its LADDER forms against float64:
test_flash_attention_bwd_fused.py."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from dsl import TypeVar, f32, tile
from dsl.tile import ir as T
from dsl.tile.lower.matmul.hoist import hoist_products
from dsl.tile.switches import check_lowering, switches_key
from interop_tests.dsl_tile.test_flash_attention_bwd_fused import FUSED
from interop_tests.dsl_tile.test_tile_product_batches import args

E = TypeVar("E")


@tile.kernel(num_warps=4)
def product_math_product(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Array[E, 2], x: tile.Partition[f32, 2],
                         y: tile.Partition[f32, 2], n: tile.Constant):
    """Per key block: s = A B^T, then math on s, then u = A C^T, which does not need s (the arguments of
    test_tile_product_batches.two_products)."""
    bm, d = x.tile_shape
    rows = tile.load(a, (tile.bid(0), 0), (bm, d))
    exps, sums = tile.zeros((bm, d), f32), tile.zeros((bm, d), f32)
    for j in range(n):
        s = tile.matmul(rows, tile.transpose(tile.load(b, (j, 0), (d, d))))
        t = tile.exp2(s * 0.125)
        u = tile.matmul(rows, tile.transpose(tile.load(c, (j, 0), (d, d))))
        exps = exps + t
        sums = sums + u
    x.store(exps)
    y.store(sums)


def kernel(**lowering):
    return tile.kernel(product_math_product.pyfunc, num_warps=4, lowering=lowering or None)


def _names(body) -> list[str]:
    return [s.var.name.split(".")[0] for s in body if isinstance(s, T.Assign)]


def test_a_product_moves_up_behind_the_last_statement_it_depends_on_and_no_further():
    a = args(np.random.default_rng(0))[0]
    fn = product_math_product.tile_ir(*a)
    loop = next(s for s in fn.body if isinstance(s, T.For))
    assert _names(loop.body) == ["s", "t", "u", "exps", "sums"]
    moved = next(s for s in hoist_products(fn).body if isinstance(s, T.For))
    assert _names(moved.body) == ["s", "u", "t", "exps", "sums"]        # u passes t, not the product s
    assert _names(loop.body) == ["s", "t", "u", "exps", "sums"]         # the cached IR is left as it was


def test_a_product_stays_behind_a_product_inside_an_expression_and_behind_what_it_reads():
    q = np.zeros((512, 128), ml_dtypes.bfloat16)
    kern, kargs = _fused_step_kernel(q)
    loop = next(s for s in kern.tile_ir(*kargs).body if isinstance(s, T.For))
    before = _order(loop.body)
    after = _order(next(s for s in hoist_products(kern.tile_ir(*kargs)).body if isinstance(s, T.For)).body)
    # dP^T goes up to S^T (a product scaled in its expression: it keeps its place); dV waits for P^T
    assert before[:7] == ["st", "c", "r", "st", "pt", "dv_acc product", "dpt product"], before
    assert after[:7] == ["st", "dpt product", "c", "r", "st", "pt", "dv_acc product"], after
    assert after[7:] == before[7:] and after[7:9] == ["dst", "dk_acc product"]


def _order(body) -> list[str]:
    """The loop body's assignments after the copies of the carried accumulators, products marked."""
    names = [s.var.name.split(".")[0] + (" product" if isinstance(s.value, T.Matmul) else "")
             for s in body if isinstance(s, T.Assign)]
    return names[names.index("st"):]


def waits(ptx: str) -> list[str]:
    return re.findall(r"wgmma\.(commit_group|wait_group\.sync\.aligned \d)", ptx)


def test_the_first_product_waits_with_the_second_in_flight_and_the_math_between():
    a, _, _ = args(np.random.default_rng(1))
    ptx = kernel(loop_pipeline="tma", lazy_waits=True).compile(a, "sm_90").ptx
    plain = waits(kernel(loop_pipeline="tma").compile(a, "sm_90").ptx)
    got = waits(ptx)
    assert plain == ["commit_group", "wait_group.sync.aligned 0"] * (len(plain) // 2)
    assert got == ["commit_group", "commit_group", "wait_group.sync.aligned 1",
                   "wait_group.sync.aligned 0"] * (len(plain) // 4), got
    body = ptx[ptx.index("wait_group.sync.aligned 1"):]
    assert "ex2.approx" in body[:body.index("wait_group.sync.aligned 0")]     # exp2 while u runs


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_lazy_products_match_float64_in_the_lowered_simulator(monkeypatch, rng, landing):
    monkeypatch.setenv("KB_SIM_TMA_LANDING", landing)          # copies land at issue or at their wait
    a, x, y = args(rng)
    kernel(loop_pipeline="tma", lazy_waits=True).simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    rows, keys, values = (np.asarray(v, np.float64) for v in a[:3])
    blocks = a[5]
    per_block = [m.reshape(blocks, -1, rows.shape[1]) for m in (keys, values)]
    want_x = np.exp2(np.einsum("rd,jcd->jrc", rows, per_block[0]) * 0.125).sum(axis=0)
    want_y = np.einsum("rd,jcd->rc", rows, per_block[1])
    np.testing.assert_allclose(x, want_x, rtol=2e-3, atol=1e-3)
    np.testing.assert_allclose(y, want_y, rtol=1e-3, atol=1e-3)


def test_the_switch_is_part_of_the_compile_keys_and_wants_a_bool():
    from dsl.options import OptionError
    assert "lazy_waits" in switches_key((("lazy_waits", True),))
    assert "lazy_waits" not in switches_key((("lazy_waits", False),))
    with pytest.raises(OptionError, match="lazy_waits must be True or False"):
        check_lowering({"lazy_waits": 1})


def _fused_step_kernel(q, form="128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads, lazy waits"):
    rows, d = q.shape
    nan = lambda *shape: np.full(shape, np.nan, np.float32)   # noqa: E731
    steps = FUSED.launch_args(q, q, q, nan(rows, d), q, nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), 256, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    return steps[1]


@pytest.mark.parametrize("d", [64, 128])
def test_the_fused_backwards_step_waits_for_each_product_where_its_result_is_read(d):
    """S^T at once (it is scaled in its statement); dP^T with dV in flight behind it (wait_group 1, after
    the softmax); dV with dK behind it and dK before dQ, which waits at once."""
    q = np.zeros((512, d), ml_dtypes.bfloat16)
    kern, kargs = _fused_step_kernel(q)
    lazy = re.findall(r"wgmma.wait_group.sync.aligned (\d)", kern.compile(kargs, "sm_90").ptx)
    kern, kargs = _fused_step_kernel(q, "128x64 w8, TMA ring + TMA reduce dQ, K V swizzled, early loads")
    plain = re.findall(r"wgmma.wait_group.sync.aligned (\d)", kern.compile(kargs, "sm_90").ptx)
    assert plain == ["0"] * 5 and lazy == ["0", "1", "1", "0", "0"]
