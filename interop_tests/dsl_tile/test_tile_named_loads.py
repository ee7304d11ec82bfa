"""A small change of style keeps the fast path (issue 28, "no silent performance cliff"): a GEMM or an
attention step written as a Triton user writes it, with its loads named first (`a = tile.load(...)`,
then `tile.matmul(a, b, acc)`), compiles to exactly the PTX of the same kernel with the loads written
inside the product (the TMA + wgmma / cp.async + mma.sync loops); a load named once and read by two
products (Q and dO of an attention backward step) compiles as if each product loaded its own. Load
forwarding (dsl/tile/forward.py) must not change results where it does not apply: a load used twice
outside products, a load whose index variable changes before its use, a load used after its loop."""
from __future__ import annotations

import numpy as np
import pytest

from dsl import TypeVar, f16, f32, tile
from dsl.tile import ir as T

E = TypeVar("E")


@tile.kernel
def gemm_inline(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], BK: tile.Constant[int]):
    i, j = tile.bid(0), tile.bid(1)
    bm, bn = c.tile_shape
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(a.shape[1], BK)):
        acc = tile.matmul(tile.load(a, (i, k), (bm, BK)), tile.load(b, (k, j), (BK, bn)), acc)
    c.store(acc)


@tile.kernel
def gemm_named(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], BK: tile.Constant[int]):
    i, j = tile.bid(0), tile.bid(1)
    bm, bn = c.tile_shape
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(a.shape[1], BK)):
        at = tile.load(a, (i, k), (bm, BK))
        bt = tile.load(b, (k, j), (BK, bn))
        acc = tile.matmul(at, bt, acc)
    c.store(acc)


def _entry(ptx: str) -> str:
    """The kernel's body without its line table (the two kernels sit on different lines)."""
    body = ptx[ptx.index(".entry"):].replace("gemm_named", "K").replace("gemm_inline", "K")
    return "\n".join(ln for ln in body.splitlines() if not ln.strip().startswith((".loc", ".file")))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_gemm_with_named_loads_compiles_to_the_inline_gemms_ptx(arch):
    a = np.ones((256, 256), np.float16)
    b = np.ones((256, 256), np.float16)
    c = tile.partition(np.zeros((256, 256), np.float32), (128, 128))
    inline = gemm_inline.ptx(a, b, c, 64, arch=arch)
    named = gemm_named.ptx(a, b, c, 64, arch=arch)
    assert ("wgmma" in inline) == (arch == "sm_90") and "mma" in inline
    assert _entry(named) == _entry(inline)


@tile.kernel
def attn_named(q: tile.Array[E, 2], k: tile.Array[E, 2], v: tile.Array[E, 2], o: tile.Partition[f32, 2],
               seq: tile.Constant[int], bn: tile.Constant[int]):
    bm, d = o.tile_shape
    i = tile.bid(0)
    head = (i * bm) // seq
    qt = tile.load(q, (i, 0), (bm, d))
    m = tile.full((bm,), -tile.inf, f32)
    l = tile.zeros((bm,), f32)
    acc = tile.zeros((bm, d), f32)
    for j in range(seq // bn):
        kt = tile.load(k, (head * (seq // bn) + j, 0), (bn, d))
        vt = tile.load(v, (head * (seq // bn) + j, 0), (bn, d))
        s = tile.matmul(qt, tile.transpose(kt)) * 0.125
        m_new = tile.maximum(m, tile.max(s, axis=1))
        p = tile.exp(s - m_new[:, None])
        alpha = tile.exp(m - m_new)
        l = l * alpha + tile.sum(p, axis=1)
        acc = acc * alpha[:, None] + tile.matmul(p.astype(q.dtype), vt)
        m = m_new
    o.store(acc / l[:, None])


def test_attention_with_named_key_and_value_loads_keeps_them_in_the_products():
    x = np.ones((2 * 128, 64), np.float16)
    fn = attn_named.tile_ir(x, x, x, tile.partition(np.zeros((256, 64), np.float32), (64, 64)), 128, 64)
    products = [e for e in T.body_exprs(fn.body) if isinstance(e, T.Matmul)]
    assert len(products) == 2
    assert isinstance(products[0].b, T.Permute) and isinstance(products[0].b.operand, T.Load)
    assert isinstance(products[1].b, T.Load)
    assert not [s for s in T.walk_stmts(fn.body) if isinstance(s, T.Assign) and s.var.name in ("kt", "vt")]


def test_named_attention_matches_float64(rng):
    seq, d = 128, 64
    q, k, v = (rng.standard_normal((2 * seq, d)).astype(np.float16) for _ in range(3))
    o = np.zeros((2 * seq, d), np.float32)
    attn_named.simulate(q, k, v, tile.partition(o, (64, d)), seq, 64)
    q3, k3, v3 = (x.astype(np.float64).reshape(2, seq, d) for x in (q, k, v))
    s = q3 @ k3.transpose(0, 2, 1) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = ((p / p.sum(-1, keepdims=True)) @ v3).reshape(-1, d)
    np.testing.assert_allclose(o, ref, rtol=2e-2, atol=2e-3)


@tile.kernel
def not_forwarded(a: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    twice = tile.load(a, t, (64,))
    shift = t
    x = tile.load(a, shift, (64,))              # its index variable changes before the use
    shift = shift + 1
    y = tile.zeros((64,), f32)
    for r in range(2):
        y = tile.load(a, t, (64,))              # assigned in a loop, used after it
    out.store(twice + twice * 2.0 + x + y + tile.zeros((64,), f32) * shift)


def test_loads_that_do_not_qualify_stay_named_and_results_hold(rng):
    a = rng.standard_normal(200).astype(np.float32)
    out = np.zeros(200, np.float32)
    not_forwarded.simulate(a, tile.partition(out, (64,)))
    np.testing.assert_allclose(out, 3 * a + a + a, rtol=1e-6)
    fn = not_forwarded.tile_ir(a, tile.partition(out, (64,)))
    names = {s.var.name for s in T.walk_stmts(fn.body) if isinstance(s, T.Assign)}
    assert {"twice", "x", "y"} <= names


@tile.kernel
def step_inline(q: tile.Array[E, 2], k: tile.Array[E, 2], do: tile.Array[E, 2], dk: tile.Partition[f32, 2],
                dv: tile.Partition[f32, 2], bm: tile.Constant[int]):
    bn, d = dk.tile_shape
    kt = tile.load(k, (tile.bid(0), 0), (bn, d))
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    for i in range(q.shape[0] // bm):
        st = tile.matmul(kt, tile.transpose(tile.load(q, (i, 0), (bm, d))))
        dv_acc = dv_acc + tile.matmul(st.astype(q.dtype), tile.load(do, (i, 0), (bm, d)))
        dpt = tile.matmul(kt, tile.transpose(tile.load(do, (i, 0), (bm, d))))
        dk_acc = dk_acc + tile.matmul(dpt.astype(q.dtype), tile.load(q, (i, 0), (bm, d)))
    dk.store(dk_acc)
    dv.store(dv_acc)


@tile.kernel
def step_named(q: tile.Array[E, 2], k: tile.Array[E, 2], do: tile.Array[E, 2], dk: tile.Partition[f32, 2],
               dv: tile.Partition[f32, 2], bm: tile.Constant[int]):
    bn, d = dk.tile_shape
    kt = tile.load(k, (tile.bid(0), 0), (bn, d))
    dk_acc = tile.zeros((bn, d), f32)
    dv_acc = tile.zeros((bn, d), f32)
    for i in range(q.shape[0] // bm):
        qi = tile.load(q, (i, 0), (bm, d))              # each read by two products, as Triton's backward
        doi = tile.load(do, (i, 0), (bm, d))
        st = tile.matmul(kt, tile.transpose(qi))
        dv_acc = dv_acc + tile.matmul(st.astype(q.dtype), doi)
        dpt = tile.matmul(kt, tile.transpose(doi))
        dk_acc = dk_acc + tile.matmul(dpt.astype(q.dtype), qi)
    dk.store(dk_acc)
    dv.store(dv_acc)


def _step_args(rng, dtype=np.float16):
    q, k, do = (rng.standard_normal((128, 64)).astype(dtype) for _ in range(3))
    dk, dv = np.full((128, 64), np.nan, np.float32), np.full((128, 64), np.nan, np.float32)
    return (q, k, do, tile.partition(dk, (64, 64)), tile.partition(dv, (64, 64)), 32), (q, k, do, dk, dv)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_load_read_by_two_products_compiles_as_one_load_per_product(rng, arch):
    args, _ = _step_args(rng)
    inline = step_inline.ptx(*args, arch=arch).replace("step_inline", "K")
    named = step_named.ptx(*args, arch=arch).replace("step_named", "K")
    assert ("wgmma" in inline) == (arch == "sm_90")
    assert _entry(named) == _entry(inline)
    assert _slow(step_named, args, arch) == []


def test_a_load_read_by_two_products_gives_each_product_its_own_load_and_the_right_result(rng):
    args, (q, k, do, dk, dv) = _step_args(rng)
    fn = step_named.tile_ir(*args)
    assert not [s for s in T.walk_stmts(fn.body) if isinstance(s, T.Assign) and s.var.name in ("qi", "doi")]
    loads = [e for e in T.body_exprs(fn.body) if isinstance(e, T.Load) and e.param.name in ("q", "do")]
    assert len(loads) == 4 and len({id(x) for x in loads}) == 4        # four distinct nodes, one a product
    step_named.simulate(*args)
    q64, k64, do64 = (x.astype(np.float64) for x in (q, k, do))
    st = k64 @ q64.T                    # the kernel casts S^T and dP^T to f16 before the second products
    want_dv = st.astype(np.float16).astype(np.float64) @ do64
    want_dk = (k64 @ do64.T).astype(np.float16).astype(np.float64) @ q64
    np.testing.assert_allclose(dv, want_dv, rtol=0, atol=2e-3 * np.abs(want_dv).max())
    np.testing.assert_allclose(dk, want_dk, rtol=0, atol=2e-3 * np.abs(want_dk).max())


@tile.kernel
def product_and_elementwise(a: tile.Array[f16, 2], b: tile.Array[f16, 2], c: tile.Partition[f32, 2]):
    x = tile.load(a, (tile.bid(0), 0), (16, 16))        # a product and a sum read it: stays one load
    c.store(tile.matmul(x, tile.load(b, (0, 0), (16, 16))) + x.astype(f32))


def test_a_load_read_by_a_product_and_elementwise_math_stays_one_named_load(rng):
    a, b = (rng.integers(-3, 4, (32, 16)).astype(np.float16) for _ in range(2))
    out = np.zeros((32, 16), np.float32)
    fn = product_and_elementwise.tile_ir(a, b[:16], tile.partition(out, (16, 16)))
    assert [s.var.name for s in T.walk_stmts(fn.body) if isinstance(s, T.Assign)] == ["x"]
    product_and_elementwise.simulate(a, b[:16], tile.partition(out, (16, 16)))
    np.testing.assert_array_equal(out, a.astype(np.float64) @ b[:16].astype(np.float64) + a)


# ---------------------------------------------------------------------------------- slow-path records

def _slow(kernel, args, arch):
    from dsl.perf import from_metadata
    return from_metadata(kernel.compile(args, arch).metadata)


@tile.kernel
def f32_product(a: tile.Array[f32, 2], b: tile.Array[f32, 2], c: tile.Partition[f32, 2]):
    c.store(tile.matmul(tile.load(a, (tile.bid(0), 0), (32, 32)), tile.load(b, (0, tile.bid(1)), (32, 32))))  # m-fma


@tile.kernel
def gemm_scaled_operand(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Partition[f32, 2], BK: tile.Constant[int]):
    i, j = tile.bid(0), tile.bid(1)
    bm, bn = c.tile_shape
    acc = tile.zeros((bm, bn), f32)
    for k in range(tile.cdiv(a.shape[1], BK)):
        acc = tile.matmul(tile.load(a, (i, k), (bm, BK)), tile.load(b, (k, j), (BK, bn)) * 2.0, acc)
    c.store(acc)


def test_the_fast_paths_report_no_slow_path():
    a = np.ones((256, 256), np.float16)
    c = tile.partition(np.zeros((256, 256), np.float32), (128, 128))
    for arch in ("sm_80", "sm_90"):
        assert _slow(gemm_named, (a, a, c, 64), arch) == []


def test_a_product_off_the_tensor_cores_says_where_and_why():
    import linecache
    x = np.ones((64, 32), np.float32)
    y = np.ones((32, 64), np.float32)
    paths = _slow(f32_product, (x, y, tile.partition(np.zeros((64, 64), np.float32), (32, 32))), "sm_90")
    assert [p.kind for p in paths] == ["fma-product"]
    assert "m-fma" in linecache.getline(paths[0].file, paths[0].line)
    assert "f32 and f32" in paths[0].reason and ".astype(f16)" in paths[0].reason


def test_an_operand_staged_through_registers_is_reported():
    """B scaled in the product: it cannot be copied asynchronously, and the record says so."""
    a = np.ones((256, 256), np.float16)
    c = tile.partition(np.zeros((256, 256), np.float32), (128, 128))
    kinds = {p.kind for p in _slow(gemm_scaled_operand, (a, a, c, 64), "sm_80")}
    assert "sync-staging" in kinds
