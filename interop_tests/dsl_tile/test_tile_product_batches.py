"""Independent products issued together and waited for together (lowering switch `product_batches`,
dsl/tile/lower/matmul/batches.py): which statements form a batch, the waits in the PTX (wait_group 1
for the first of two, 0 for the second, nothing between their issues), a kernel without such a run
left byte for byte as it was, and a product of the batch whose ring stage a later one reads freed only
after that one's wait (the lowered simulator reads a product's operands at its wait, so a stage freed
early is refilled under it: wrong results or a deadlock there, as on the GPU). The fused attention
backward's batched forms against float64: test_flash_attention_bwd_fused.py."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import f32, tile, TypeVar
from dsl.tile import ir as T
from dsl.tile.lower.matmul import batches
from dsl.tile.switches import switches_key

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bwd_fused_pb", ROOT / "examples" / "flash_attention_bwd_fused.py")
FUSED = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(FUSED)
E = TypeVar("E")


@tile.kernel(num_warps=4)
def two_products(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Array[E, 2], x: tile.Partition[f32, 2],
                 y: tile.Partition[f32, 2], n: tile.Constant):
    """x = A B^T summed over n key blocks, y = A C^T likewise: two independent products an iteration."""
    bm, d = x.tile_shape
    i = tile.bid(0)
    ai = tile.load(a, (i, 0), (bm, d))
    sx = tile.zeros((bm, d), f32)
    sy = tile.zeros((bm, d), f32)
    for j in range(n):
        sx = tile.matmul(ai, tile.transpose(tile.load(b, (j, 0), (d, d))), sx)
        sy = tile.matmul(ai, tile.transpose(tile.load(c, (j, 0), (d, d))), sy)
    x.store(sx)
    y.store(sy)


def args(rng, rows=128, d=64, n=3):
    a = rng.standard_normal((rows, d)).astype(ml_dtypes.bfloat16)
    b, c = (rng.standard_normal((n * d, d)).astype(ml_dtypes.bfloat16) for _ in range(2))
    x, y = (np.full((rows, d), np.nan, np.float32) for _ in range(2))
    return (a, b, c, tile.partition(x, (64, d)), tile.partition(y, (64, d)), n), x, y


def kernel(**lowering):
    return tile.kernel(two_products.pyfunc, num_warps=4, lowering=lowering or None)


def waits(ptx: str) -> list[str]:
    return re.findall(r"wgmma\.(commit_group|wait_group\.sync\.aligned \d)", ptx)


@pytest.mark.parametrize("pipeline", ["tma", "cp.async"])
def test_two_independent_products_are_waited_for_after_both_issues(rng, pipeline):
    a, _, _ = args(rng)
    ring = {"loop_pipeline": pipeline}
    ptx = kernel(**ring, product_batches=True).compile(a, "sm_90").ptx
    got, plain = waits(ptx), waits(kernel(**ring).compile(a, "sm_90").ptx)
    assert plain and plain == ["commit_group", "wait_group.sync.aligned 0"] * (len(plain) // 2)
    if pipeline == "tma":   # ring stages: both wait later (the loop of 3 may be unrolled: each iteration so)
        assert got == ["commit_group", "commit_group", "wait_group.sync.aligned 1",
                       "wait_group.sync.aligned 0"] * (len(plain) // 4), got
    else:                   # B staged by cp.async: each product waits for its own group, as without the switch
        assert ptx == kernel(**ring).compile(a, "sm_90").ptx


@pytest.mark.parametrize("landing", ["issue", "wait"])
def test_the_batched_products_match_float64_in_the_lowered_simulator(monkeypatch, rng, landing):
    """Both products read their own ring stage; the copies land at issue or, later, at their wait."""
    if landing == "wait":
        monkeypatch.setenv("KB_SIM_TMA_LANDING", "wait")
    a, x, y = args(rng)
    kernel(loop_pipeline="tma", product_batches=True).simulate_lowered(*a, tensor_cores=True, arch="sm_90")
    A, B, C = (np.asarray(v, np.float64) for v in a[:3])
    n, d = a[5], A.shape[1]
    want_x = sum(A @ B[j * d:(j + 1) * d].T for j in range(n))
    want_y = sum(A @ C[j * d:(j + 1) * d].T for j in range(n))
    np.testing.assert_allclose(x, want_x, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(y, want_y, rtol=1e-3, atol=1e-3)


@tile.kernel(num_warps=4)
def chained_products(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Array[E, 2], x: tile.Partition[f32, 2],
                     n: tile.Constant):
    """The second product reads the first's result: they cannot be in flight together."""
    bm, d = x.tile_shape
    i = tile.bid(0)
    ai = tile.load(a, (i, 0), (bm, d))
    acc = tile.zeros((bm, d), f32)
    for j in range(n):
        s = tile.matmul(ai, tile.transpose(tile.load(b, (j, 0), (d, d))))
        acc = tile.matmul(s.astype(a.dtype), tile.load(c, (j, 0), (d, d)), acc)
    x.store(acc)


class _Planner:
    """What batches.plan reads of a Lowerer."""
    def __init__(self, on: bool = True, hints: dict | None = None) -> None:
        self.product_batches, self.cc, self.layout_hints = on, 90, hints or {}


def _loop_body(kern, a) -> list:
    fn = kern.tile_ir(*a)
    return next(s for s in fn.body if isinstance(s, T.For)).body


def test_a_batch_is_a_run_of_independent_products_and_nothing_else():
    a = args(np.random.default_rng(0))[0]
    body = _loop_body(two_products, a)
    products = [s for s in body if isinstance(s, T.Assign) and isinstance(s.value, T.Matmul)]
    assert len(products) == 2
    got = batches.plan(_Planner(), body)
    assert [got.get(id(s)) for s in products] == [False, True]        # one batch, the second ends it
    assert batches.plan(_Planner(on=False), body) == {}
    assert batches.plan(_Planner(hints={id(products[1].var): ("S",)}), body) == {}   # kept in shared memory
    rows, d, n = 128, 64, 2
    z = np.zeros((n * d, d), ml_dtypes.bfloat16)
    chained = (np.zeros((rows, d), ml_dtypes.bfloat16), z, z, tile.partition(np.zeros((rows, d), np.float32), (64, d)), n)
    assert batches.plan(_Planner(), _loop_body(chained_products, chained)) == {}       # s read by the next product


def test_the_switch_is_part_of_the_compile_keys():
    assert "product_batches" in switches_key((("product_batches", True),))
    assert "product_batches" not in switches_key((("product_batches", False),))


def test_a_kernel_without_independent_products_keeps_its_ptx():
    """The flash-attention forward: its products are a softmax apart, so nothing is batched."""
    spec = importlib.util.spec_from_file_location("fa_pb", ROOT / "examples" / "flash_attention.py")
    fa = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fa)
    q = np.zeros((512, 128), ml_dtypes.bfloat16)
    o = np.zeros((512, 128), np.float32)
    a = fa.launch_args(q, q, q, o, 256, True, tensor_cores=True, wgmma=True)
    low = {"loop_pipeline": "tma"}
    with_switch = tile.kernel(fa.flash_fwd.pyfunc, lowering={**low, "product_batches": True})
    assert with_switch.compile(a, "sm_90").ptx == tile.kernel(fa.flash_fwd.pyfunc, lowering=low).compile(a, "sm_90").ptx


def test_the_fused_backward_batches_dv_and_dpt_and_frees_the_shared_stage_after_both():
    """dV += P^T dO and dP^T = V dO^T read the same dO stage: one wait_group 1, one 0, in that order."""
    seq, rows, d = 256, 512, 64
    bf = [np.zeros((rows, d), ml_dtypes.bfloat16) for _ in range(4)]
    nan = lambda *s: np.full(s, np.nan, np.float32)       # noqa: E731
    form = "TMA ring + TMA reduce dQ, K V swizzled, batched products"
    steps = FUSED.launch_args(*bf[:3], nan(rows, d), bf[3], nan(rows), nan(rows), nan(rows, d), nan(rows, d),
                              nan(rows, d), seq, True, tensor_cores=True, wgmma=True, **FUSED.form_options(form))
    kern, a = steps[1]
    w = [x for x in waits(kern.compile(a, "sm_90").ptx) if x.startswith("wait")]
    assert w.count("wait_group.sync.aligned 1") == 1 and len(w) == 5 - 1 + 1, w
