"""Generated PTX run on the GPU without the bridge: loaded with CuPy's RawModule and launched with the
parameters packed by hand per the view ABI. Proves the ABI (ptr, extents, strides in elements, fault
record last), the fault record layout and values, chunk tails, `.reqntid` enforcement and the defined
integer corner cases, independently of the launcher."""
from __future__ import annotations

import numpy as np
import pytest

from dsl.ir import nodes as N
from dsl.ir.types import F32, I32, INDEX, ChunkType
from interop_tests.dsl_codegen.codegen_kit import (C, P, R, arr, guarded_store_1d, kernel, load,
                                                   params, ptx_of, sites, store)

pytestmark = pytest.mark.gpu


def _module(fn, tmp_path, **options):
    import cupy as cp
    cc = cp.cuda.Device().compute_capability
    ptx = ptx_of(fn, f"sm_{cc}", **options)
    path = tmp_path / f"{fn.name}.ptx"
    path.write_text(ptx)
    return cp.RawModule(path=str(path)).get_function(fn.name)


def _view(x, strides=None):
    """ABI args for a 1-D CuPy array: pointer, extent, stride (elements)."""
    st = x.strides[0] // x.itemsize if strides is None else strides
    return [np.uint64(x.data.ptr), np.int64(x.shape[0]), np.int64(st)]


def _record():
    import cupy as cp
    return cp.zeros(3, dtype=cp.int64)          # {u32 flag; u32 site; i64 index; i64 extent}


def _decode(rec):
    raw = rec.get()
    flag_site = raw[:1].view(np.uint32)
    return int(flag_site[0]), int(flag_site[1]), int(raw[1]), int(raw[2])


def gather_kernel():
    a, idx, out = params(("a", arr(F32)), ("idx", arr(I32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    j = N.Cast(load(idx, [R(i)], I32), INDEX)
    return kernel("gather", [a, idx, out], guarded_store_1d(out, i, load(a, [j], check="fault", site=3)),
                  fault_sites=sites((3, "a")))


def test_view_abi_and_guarded_store_with_strided_input(rng, tmp_path):
    import cupy as cp
    n = 1000 + 13
    fn = _module(gather_kernel(), tmp_path)
    a_full = cp.asarray(rng.normal(size=2 * n).astype(np.float32))
    a = a_full[::2]                                              # stride 2 elements
    idx = cp.asarray(rng.integers(0, n, n).astype(np.int32))
    out = cp.full(n + 5, cp.nan, dtype=cp.float32)
    rec = _record()
    fn(((n + 255) // 256,), (256,), (*_view(a), *_view(idx), *_view(out[:n]), np.uint64(rec.data.ptr)))
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(out[:n].get(), a.get()[idx.get()])
    assert np.isnan(out[n:].get()).all()                         # guarded: nothing past the end
    assert _decode(rec) == (0, 0, 0, 0)


def test_fault_record_layout_and_values(rng, tmp_path):
    import cupy as cp
    n = 700
    fn = _module(gather_kernel(), tmp_path)
    a = cp.asarray(rng.normal(size=n).astype(np.float32))
    idx_h = rng.integers(0, n, n).astype(np.int32)
    idx_h[321] = n + 99
    idx = cp.asarray(idx_h)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    rec = _record()
    fn(((n + 127) // 128,), (128,), (*_view(a), *_view(idx), *_view(out), np.uint64(rec.data.ptr)))
    cp.cuda.Device().synchronize()                               # exit, not trap: context survives
    assert _decode(rec) == (1, 3, n + 99, n)
    got = out.get()
    ok = np.arange(n) != 321
    np.testing.assert_array_equal(got[ok], a.get()[idx_h[ok]])   # other threads completed
    assert np.isnan(got[321])


def test_chunked_vector_kernel_tails(rng, tmp_path):
    import cupy as cp
    a, out = params(("a", arr(F32, layout="C", aligned16=True)),
                    ("out", arr(F32, writable=True, layout="C", aligned16=True)))
    ch, k = N.Var("ch", ChunkType(4)), N.Var("k", INDEX)
    fn_ir = kernel("chunk4", [a, out], [N.Assign(ch, N.ChunkValue(4)), N.ChunkLoop(k, R(ch), P(out), [
        store(out, [R(k)], N.BinOp("mul", load(a, [R(k)]), C(3.0, F32), F32), mode="guarded")])])
    fn = _module(fn_ir, tmp_path)
    for n in (1, 5, 1024, 1024 + 3):
        x = cp.asarray(rng.normal(size=n).astype(np.float32))
        y = cp.full(n + 16, cp.nan, dtype=cp.float32)
        threads = (n + 3) // 4
        fn(((threads + 63) // 64,), (64,), (*_view(x), *_view(y[:n])))
        cp.cuda.Device().synchronize()
        np.testing.assert_array_equal(y[:n].get(), x.get() * np.float32(3))
        assert np.isnan(y[n:].get()).all()


def test_reqntid_is_enforced_by_the_driver(tmp_path):
    import cupy as cp
    a, out = params(("a", arr(F32)), ("out", arr(F32, writable=True)))
    i = N.Var("i", INDEX)
    fn = _module(kernel("exact", [a, out], guarded_store_1d(out, i, load(a, [R(i)])),
                        exact_block=(128, 1, 1)), tmp_path)
    x = cp.ones(300, dtype=cp.float32)
    y = cp.zeros(300, dtype=cp.float32)
    fn((3,), (128,), (*_view(x), *_view(y)))
    cp.cuda.Device().synchronize()
    assert float(y.sum().get()) == 300.0
    with pytest.raises(cp.cuda.driver.CUDADriverError):
        fn((2,), (256,), (*_view(x), *_view(y)))
        cp.cuda.Device().synchronize()


def test_integer_division_corners_on_device(tmp_path):
    import cupy as cp
    a, b, q, r = params(("a", arr(I32)), ("b", arr(I32)), ("q", arr(I32, writable=True)),
                        ("r", arr(I32, writable=True)))
    i = N.Var("i", INDEX)
    x, y = load(a, [R(i)], I32), load(b, [R(i)], I32)
    body = guarded_store_1d(q, i, N.BinOp("floordiv", x, y, I32))
    body.append(N.GuardedRegion(P(r), [R(i)], [store(r, [R(i)], N.BinOp("mod", x, y, I32))]))
    fn = _module(kernel("divmod", [a, b, q, r], body), tmp_path)
    ah = np.array([7, -7, 7, -7, -2**31, -2**31, 5, 0, 123456789], np.int32)
    bh = np.array([2, 2, -2, -2, -1, 1, 0, 0, -1000], np.int32)
    dev = [cp.asarray(ah), cp.asarray(bh), cp.full(9, 99, cp.int32), cp.full(9, 99, cp.int32)]
    fn((1,), (32,), tuple(v for d in dev for v in _view(d)))
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(dev[2].get(), [3, -3, -3, 3, -2**31, -2**31, 0, 0, -123456])
    np.testing.assert_array_equal(dev[3].get(), [1, -1, 1, -1, 0, 0, 0, 0, 789])
