"""Tile kernels on the GPU (bridge arrays) against NumPy float64 references, bad launches refused
before anything runs, and a tile → SIMT → CUDA C++ pipeline on one stream over the same buffers."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tile_kernels_lib as K

import bridge
from dsl import simt, tile
from dsl.types import f32

pytestmark = pytest.mark.gpu


def dev(a: np.ndarray) -> bridge.Array:
    return bridge.from_host(np.ascontiguousarray(a))


def poisoned(rng, shape, dtype=np.float32):
    host = (rng.standard_normal(shape) * 1e6 + 12345.0).astype(dtype)
    return dev(host), host


@pytest.mark.parametrize("n", [1, 1000, 1_000_003])
def test_add(rng, n):
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out, _ = poisoned(rng, n)
    K.add(dev(a), dev(b), tile.partition(out, (1024,)))
    np.testing.assert_array_equal(out.to_host(), a + b)


def test_saxpy(rng):
    n = 777_777
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out, _ = poisoned(rng, n)
    K.saxpy(np.float32(-2.5), dev(x), dev(y), tile.partition(out, (2048,)))
    np.testing.assert_allclose(out.to_host(), -2.5 * x.astype(np.float64) + y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rows,cols,tshape", [(4096, 1000, (1, 1024)), (300, 16384, (1, 16384)),
                                              (1001, 200, (4, 256))])
def test_row_softmax(rng, rows, cols, tshape):
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    out, _ = poisoned(rng, (rows, cols))
    K.softmax(dev(x), tile.partition(out, tshape))
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(1, keepdims=True))
    np.testing.assert_allclose(out.to_host(), ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_layernorm(rng):
    x = (rng.standard_normal((999, 700)) * 2 + 1).astype(np.float32)
    w, b = (rng.standard_normal(700).astype(np.float32) for _ in range(2))
    out, _ = poisoned(rng, x.shape)
    K.layernorm(dev(x), dev(w), dev(b), np.float32(1e-5), tile.partition(out, (1, 1024)))
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(out.to_host(), ref, rtol=1e-4, atol=1e-4)


def test_full_array_sum_two_stage(rng):
    n = (1 << 22) + 3
    x = rng.uniform(-1, 2, n).astype(np.float32)
    partial = bridge.zeros((-(-n // 8192),), "float32")
    K.block_sum(dev(x), tile.partition(partial, (1,)), 8192)
    total = bridge.zeros((1,), "float32")
    K.block_sum(partial, tile.partition(total, (1,)), 1024)
    ref = x.astype(np.float64).sum()
    assert abs(total.to_host()[0] - ref) <= 1e-5 * np.abs(x).astype(np.float64).sum()


def test_transpose(rng):
    x = rng.standard_normal((1000, 777)).astype(np.float32)
    out, _ = poisoned(rng, (777, 1000))
    K.transpose(dev(x), tile.partition(out, (32, 32)))
    np.testing.assert_array_equal(out.to_host(), x.T)


def test_f32_nn_through_a_transposing_pass(rng):
    """benchmarks/gemm.py's "transpose + NT" candidate: B copied to N x K (64 x 64 tiles), then the NT
    GEMM; tf32 products (wgmma drops the low mantissa bits on sm_90, mma.sync rounds on sm_80)."""
    m, k, n = 1000, 777, 520
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bt, _ = poisoned(rng, (n, k))
    K.transpose(dev(b), tile.partition(bt, (64, 64)))
    c, _ = poisoned(rng, (m, n))
    K.gemm_nt(dev(a), bt, tile.partition(c, (128, 128)), 32)
    np.testing.assert_array_equal(bt.to_host(), b.T)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.to_host(), want, rtol=0, atol=2e-3 * np.sqrt(k) * 4)


def _tf32(x):
    bits = x.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=["f16", "bf16", "tf32"])
def test_gemm(rng, dtype):
    m, k, n = 300, 200, 170
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c, _ = poisoned(rng, (m, n))
    K.gemm(dev(a), dev(b), tile.partition(c, (64, 64)), 32)
    if dtype is np.float32:
        ref, tol = _tf32(a) @ _tf32(b), 5e-3
    else:
        ref, tol = a.astype(np.float64) @ b.astype(np.float64), 1e-3
    np.testing.assert_allclose(c.to_host(), ref, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("tshape", [(128, 128), (64, 64), (128, 256)])
@pytest.mark.parametrize("bk", [32, 64])
@pytest.mark.parametrize("mkn", [(300, 200, 176), (136, 24, 72)], ids=["7-k-tiles", "1-k-tile"])
def test_tensor_core_gemm_and_bias_relu_epilogue(rng, dtype, tshape, bk, mkn):
    """Rows of multiples of 8 elements: the tensor-core paths (mma.sync + ldmatrix + cp.async, and
    wgmma on sm_90 for 128-row tiles, whose pipeline runs stages - 2 copies ahead) with ragged M and
    K, and with fewer k tiles than pipeline stages."""
    m, k, n = mkn
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    c, _ = poisoned(rng, (m, n))
    args = (dev(a), dev(b), tile.partition(c, tshape), bk)
    ptx = K.gemm.compile(args, bridge.current_device().arch).ptx
    assert "mma.sync" in ptx or "wgmma.mma_async" in ptx
    K.gemm(*args)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-3, atol=1e-2)
    K.gemm_bias_relu(dev(a), dev(b), dev(bias), tile.partition(c, tshape), bk)
    np.testing.assert_allclose(c.to_host(), np.maximum(ref + bias, 0), rtol=1e-3, atol=1e-2)


def test_tma_gemm_rebuilds_tensor_maps_when_the_views_change(rng):
    """The sm_90 GEMM takes A and B through TMA tensor maps the launcher caches per view: launches
    that alternate between inputs, and a view with the same pointer but fewer rows, each compute
    their own product (a stale descriptor would reuse the other input's address or extent)."""
    if bridge.current_device().cc < (9, 0):
        pytest.skip("TMA tensor maps: sm_90 or newer")
    m, k, n = 300, 200, 176
    pairs = [(rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16),
              rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)) for _ in range(2)]
    devs = [(dev(a), dev(b)) for a, b in pairs]
    assert "tensor_maps" in K.gemm.compile((*devs[0], tile.partition(bridge.empty((m, n), "float32"), (128, 128)),
                                            64), bridge.current_device().arch).contract_json
    for rnd in range(2):
        for (a, b), (ad, bd) in zip(pairs, devs):
            c, _ = poisoned(rng, (m, n))
            K.gemm(ad, bd, tile.partition(c, (128, 128)), 64)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            np.testing.assert_allclose(c.to_host(), ref, rtol=1e-3, atol=1e-2, err_msg=f"round {rnd}")
    a, b = pairs[0]
    ad = devs[0][0]
    c, _ = poisoned(rng, (136, n))
    K.gemm(ad[:136], devs[0][1], tile.partition(c, (128, 128)), 64)    # same pointer, fewer rows
    np.testing.assert_allclose(c.to_host(), a[:136].astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2)


NT_CASES = [(dt, ts, 32, (300, 200, 176)) for dt in (np.float16, ml_dtypes.bfloat16, np.float32)
            for ts in ((128, 128), (128, 256), (64, 64))] + \
    [(np.float32, (128, 128), 16, (136, 24, 72)), (ml_dtypes.bfloat16, (128, 128), 32, (136, 24, 72))]


@pytest.mark.parametrize("dtype,tshape,bk,mkn", NT_CASES,
                         ids=[f"{np.dtype(c[0]).name}-{c[1][0]}x{c[1][1]}x{c[2]}-{c[3][1]}k" for c in NT_CASES])
def test_gemm_with_b_stored_n_by_k_matches_numpy(rng, dtype, tshape, bk, mkn):
    """c = a @ bt.T with bt N x K (K-major): TMA boxes [BN, BK] into wgmma (tf32 wgmma for f32) on
    sm_90 for 128-row tiles, the cp.async + ldmatrix mma.sync loop otherwise; ragged M, N and K."""
    m, k, n = mkn
    a = rng.standard_normal((m, k)).astype(dtype)
    bt = rng.standard_normal((n, k)).astype(dtype)
    c, _ = poisoned(rng, (m, n))
    args = (dev(a), dev(bt), tile.partition(c, tshape), bk)
    ptx = K.gemm_nt.compile(args, bridge.current_device().arch).ptx
    assert "mma.sync" in ptx or "wgmma.mma_async" in ptx
    K.gemm_nt(*args)
    ref = a.astype(np.float64) @ bt.T.astype(np.float64)
    # f32 runs as tf32: wgmma ignores the low mantissa bits, mma.sync rounds them (cvt.rna)
    tol = {"rtol": 5e-3, "atol": 5e-3 * np.sqrt(k)} if dtype is np.float32 else {"rtol": 1e-3, "atol": 1e-2}
    np.testing.assert_allclose(c.to_host(), ref, **tol)


E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def f8_wgmma_bound(a: np.ndarray, bt: np.ndarray, scale: float) -> np.ndarray:
    """Hopper's f8 wgmma accumulates with fewer mantissa bits than f32 (torch._scaled_mm calls it
    use_fast_accum=True): its error scales with sum_k |a||b|, not with the result. Measured on the H200
    (2026-12-01, K=8192): 4.53e-4 of sum_k |a||b| for our kernel and for _scaled_mm's fast mode alike;
    the bound is 2^-10. A layout or staging bug is off by about |c| (~1e-2 of sum |a||b| at these K)."""
    return 2.0 ** -10 * abs(scale) * (np.abs(a.astype(np.float64)) @ np.abs(bt.astype(np.float64)).T)
F8_CASES = [(E4, E4, ts, bk, ml_dtypes.bfloat16, (300, 208, 176)) for ts, bk in (((128, 128), 64), ((128, 256), 128),
                                                                                 ((64, 64), 64))] + \
    [(E4, E5, (128, 128), 64, np.float32, (300, 208, 176)), (E4, E5, (64, 64), 64, np.float32, (136, 48, 72))]


@pytest.mark.parametrize("ta,tb,tshape,bk,out_dtype,mkn", F8_CASES,
                         ids=[f"{np.dtype(c[0]).name[7:]}-{np.dtype(c[1]).name[7:]}-{c[2][0]}x{c[2][1]}x{c[3]}-"
                              f"{np.dtype(c[4]).name}-{c[5][1]}k" for c in F8_CASES])
def test_gpu_f8_gemm_with_a_scale_matches_numpy(rng, ta, tb, tshape, bk, out_dtype, mkn):
    """f8 GEMM: wgmma k32 fed by TMA boxes on sm_90 for 128-row tiles, mma.sync m16n8k32 otherwise;
    ragged M and N, a per-tensor scale in the epilogue, f32 or bf16 output."""
    m, k, n = mkn
    a = rng.standard_normal((m, k)).astype(ta)
    bt = rng.standard_normal((n, k)).astype(tb)
    host = (rng.standard_normal((m, n)) * 1e3).astype(out_dtype)
    c = dev(host)
    args = (dev(a), dev(bt), np.float32(0.25), tile.partition(c, tshape), bk)
    ptx = K.gemm_f8.compile(args, bridge.current_device().arch).ptx
    assert ".f32.e4m3." in ptx and ("wgmma" in ptx or "m16n8k32" in ptx)
    K.gemm_f8(*args)
    ref = 0.25 * (a.astype(np.float64) @ bt.astype(np.float64).T)
    got = c.to_host().astype(np.float64)
    if out_dtype is np.float32 and "wgmma" in ptx:
        err = np.abs(got - ref)
        assert np.all(err <= f8_wgmma_bound(a, bt, 0.25) + 1e-6), float(err.max())
    else:               # mma.sync accumulates in f32; a bf16 output rounds to 8 bits
        tol = 1e-5 if out_dtype is np.float32 else 8e-3
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


def test_gpu_f8_gemm_takes_torch_float8_tensors_zero_copy(rng):
    """torch.float8_e4m3fn CUDA tensors arrive through DLPack as f8e4m3fn views (no copy) and feed the
    f8 GEMM; the result matches float64 and torch._scaled_mm (its fast accumulation, which is what
    wgmma does) on the same tensors."""
    torch = pytest.importorskip("torch")
    m, k, n = 256, 208, 192
    a = torch.from_numpy(rng.standard_normal((m, k)).astype(np.float32)).cuda().to(torch.float8_e4m3fn)
    bt = torch.from_numpy(rng.standard_normal((n, k)).astype(np.float32)).cuda().to(torch.float8_e4m3fn)
    c = torch.full((m, n), float("nan"), dtype=torch.float32, device="cuda")
    av = bridge.asarray(a)
    assert av.dtype_tag == "f8e4m3fn" and av.ptr == a.data_ptr()
    K.gemm_f8(a, bt, np.float32(0.5), tile.partition(c, (128, 128)), 64)
    one = torch.ones((), dtype=torch.float32, device="cuda")
    # into initialised memory: cuBLAS stores its result with TMA, which initcheck does not track
    peer = torch.zeros((m, n), dtype=torch.float32, device="cuda")
    torch._scaled_mm(a, bt.t(), scale_a=one, scale_b=one, out_dtype=torch.float32, use_fast_accum=True, out=peer)
    a64, b64 = a.float().cpu().numpy().astype(np.float64), bt.float().cpu().numpy().astype(np.float64)
    ref, bound = 0.5 * (a64 @ b64.T), f8_wgmma_bound(a64, b64, 0.5)
    got = c.cpu().numpy().astype(np.float64)
    assert np.all(np.abs(got - ref) <= bound + 1e-6), float(np.abs(got - ref).max())
    assert np.all(np.abs(got - 0.5 * peer.cpu().numpy()) <= 2 * bound + 1e-6)


def test_gpu_f8_conversions_match_ml_dtypes_on_every_pattern_and_around_every_binade(rng):
    """The software conversions (integer code, every arch) against ml_dtypes with saturation."""
    x = np.concatenate([rng.standard_normal(20000) * s for s in (1e-6, 1e-3, 0.1, 1, 40, 1e3, 1e5)])
    x = np.concatenate([x, np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0]]).astype(np.float32)
    cols = 256
    rows = -(-len(x) // cols)
    xs = np.zeros(rows * cols, np.float32)
    xs[:len(x)] = x
    xs = xs.reshape(rows, cols)
    for dt, top in ((ml_dtypes.float8_e4m3fn, 448.0), (ml_dtypes.float8_e5m2, 57344.0)):
        q = dev(np.zeros((rows, cols), dt))
        K.quantize_f8(dev(xs), np.float32(1.0), tile.partition(q, (8, 256)))
        ref = np.clip(xs, -top, top).astype(dt)
        assert np.array_equal(q.to_host().astype(np.float64), ref.astype(np.float64), equal_nan=True), dt


@pytest.mark.parametrize("pipeline", ["sync", "ws"])
@pytest.mark.parametrize("tshape,bk", [((128, 128), 64), ((128, 256), 32)])
def test_gpu_every_tma_gemm_pipeline_matches_numpy(monkeypatch, rng, pipeline, tshape, bk):
    """KB_TILE_GEMM_PIPELINE: sync (default, a barrier per k tile) and ws (a producer warpgroup issues
    the copies through empty mbarriers): the same results, with a fused epilogue, ragged M, N, K."""
    if bridge.current_device().cc < (9, 0):
        pytest.skip("the TMA GEMM loop: sm_90 or newer")
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", pipeline)
    m, k, n = 300, 456, 264
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(n).astype(np.float32)
    c, _ = poisoned(rng, (m, n))
    args = (dev(a), dev(b), dev(bias), tile.partition(c, tshape), bk)
    kernel = tile.kernel(K.gemm_bias_relu.pyfunc)    # its own dispatcher: launchers are cached per kernel
    ck = kernel.compile(args, bridge.current_device().arch)
    assert "cp.async.bulk.tensor" in ck.ptx and ck.threads == (384 if pipeline == "ws" else 256)
    kernel(*args)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-3, atol=1e-2)


def test_gpu_b_operand_shorter_than_a_reads_zeros_past_its_end(rng):
    """The cp.async loop bounds B's copies by B's own rows (it once used a's k extent)."""
    a = rng.standard_normal((64, 64)).astype(np.float16)
    b = rng.standard_normal((40, 64)).astype(np.float16)
    c, _ = poisoned(rng, (64, 64))
    K.gemm(dev(a), dev(b), tile.partition(c, (64, 64)), 32)
    np.testing.assert_allclose(c.to_host(), a[:, :40].astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("tshape", [(128, 128), (64, 64)])
def test_f32_gemm_runs_on_tf32_tensor_cores(rng, tshape):
    """f32 operands whose rows are multiples of 8: mma.sync m16n8k8 on tf32-rounded inputs (ragged M, K)."""
    m, k, n = 300, 200, 176
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    c, _ = poisoned(rng, (m, n))
    args = (dev(a), dev(b), tile.partition(c, tshape), 32)
    assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in \
        K.gemm.compile(args, bridge.current_device().arch).ptx
    K.gemm(*args)
    ref = _tf32(a) @ _tf32(b)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-3, atol=1e-2)
    K.gemm_bias_relu(dev(a), dev(b), dev(bias), tile.partition(c, tshape), 32)
    np.testing.assert_allclose(c.to_host(), np.maximum(ref + bias, 0), rtol=1e-3, atol=1e-2)


def test_gemm_bias_relu(rng):
    m, k, n = 257, 129, 65
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(n).astype(np.float32)
    c, _ = poisoned(rng, (m, n))
    K.gemm_bias_relu(dev(a), dev(b), dev(bias), tile.partition(c, (64, 64)), 32)
    ref = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-3, atol=1e-2)


def test_bad_dtype_is_refused_and_output_untouched(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    out, host = poisoned(rng, 1000)
    with pytest.raises(bridge.DTypeError, match="argument 'b'"):
        K.add(dev(a), dev(a.astype(np.float64)), tile.partition(out, (1024,)))
    np.testing.assert_array_equal(out.to_host(), host)


def test_host_memory_is_refused_and_output_untouched(rng):
    a = rng.standard_normal(1000).astype(np.float32)
    out, host = poisoned(rng, 1000)
    with pytest.raises(bridge.DeviceMismatchError) as info:
        K.add(a, dev(a), tile.partition(out, (1024,)))
    assert "'a'" in str(info.value)
    np.testing.assert_array_equal(out.to_host(), host)


@simt.kernel(block=256)
def scale2(a: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] * 2.0


def test_tile_simt_and_cpp_kernels_back_to_back_on_one_stream(rng):
    n = 100_003
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    da, db = dev(a), dev(b)
    c = bridge.zeros((n,), "float32")
    d = bridge.zeros((n,), "float32")
    stream = bridge.Stream()
    saxpy_cpp = bridge.cpp_kernels.load("saxpy").saxpy
    K.add(da, db, tile.partition(c, (1024,)), stream=stream)     # c = a + b        (tile)
    scale2(c, d, stream=stream)                                  # d = 2c           (SIMT)
    saxpy_cpp(0.5, c, d, n, stream=stream)                       # d = 0.5c + d     (CUDA C++)
    K.add(d, c, tile.partition(db, (1024,)), stream=stream)      # b = d + c        (tile again)
    stream.synchronize()
    cc = a.astype(np.float64) + b
    dd = 0.5 * cc + 2 * cc
    np.testing.assert_allclose(d.to_host(), dd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(db.to_host(), dd + cc, rtol=1e-6, atol=1e-6)


def test_persistent_kernels_cover_every_tile(rng):
    softmax_p = tile.kernel(K.softmax.pyfunc, persistent=True)
    x = (rng.standard_normal((20_000, 300)) * 3).astype(np.float32)  # more tiles than 2 x SMs
    out, _ = poisoned(rng, x.shape)
    softmax_p(dev(x), tile.partition(out, (1, 512)))
    xd = x.astype(np.float64)
    ref = np.exp(xd - xd.max(1, keepdims=True))
    np.testing.assert_allclose(out.to_host(), ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    gemm_p = tile.kernel(K.gemm.pyfunc, persistent=True)
    a = rng.standard_normal((2000, 256)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((256, 1000)).astype(ml_dtypes.bfloat16)
    c, _ = poisoned(rng, (2000, 1000))
    gemm_p(dev(a), dev(b), tile.partition(c, (128, 128)), 32)
    np.testing.assert_allclose(c.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("tshape,splits", [((128, 256), 3), ((128, 128), 4), ((64, 64), 2)])
def test_gpu_split_k_gemm_matches_numpy(rng, tshape, splits):
    """Parallel split-K (gemm_split_k + sum_splits): TMA + wgmma on sm_90 for 128-row tiles, the
    mma.sync loop otherwise; ragged M, N, K with an uneven last split; the output starts poisoned."""
    m, k, n = 300, 2000, 264
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c, _ = poisoned(rng, (m, n))
    partial, _ = poisoned(rng, (K.split_k_rows(m, tshape[0], splits), n))
    K.gemm_split_k_run(dev(a), dev(b), c, tshape, 64, splits, partial)
    np.testing.assert_allclose(c.to_host(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("which,tshape", [("gemm", (128, 256)), ("gemm", (128, 128)), ("gemm_bias_relu", (128, 128))])
def test_gpu_persistent_warp_specialised_tma_gemm_matches_numpy(monkeypatch, rng, which, tshape):
    """@tile.kernel(persistent=True) with KB_TILE_GEMM_PIPELINE=ws: one block per SM, each walking
    several tiles (more tiles than SMs), the producer warpgroup running ahead into the next tile while
    the consumers store this one; ragged M, N, K; the output starts poisoned."""
    if bridge.current_device().cc < (9, 0):
        pytest.skip("the TMA GEMM loop: sm_90 or newer")
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws")
    # 153 tiles, 3 k tiles, all ragged; N a multiple of 8 (16-byte rows: TMA can read B)
    m, k, n = 2100, 136, 1096 if tshape == (128, 128) else 2104
    a = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    c, _ = poisoned(rng, (m, n))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    kernel = tile.kernel(getattr(K, which).pyfunc, persistent=True)
    if which == "gemm_bias_relu":
        bias = rng.standard_normal(n).astype(np.float32)
        args, ref = (dev(a), dev(b), dev(bias), tile.partition(c, tshape), 64), np.maximum(ref + bias, 0)
    else:
        args = (dev(a), dev(b), tile.partition(c, tshape), 64)
    ck = kernel.compile(args, bridge.current_device().arch)
    assert ck.threads == 384 and "cp.async.bulk.tensor" in ck.ptx
    assert args[-2].num_tiles > bridge.current_device().sm_count      # blocks walk more than one tile
    kernel(*args)
    np.testing.assert_allclose(c.to_host(), ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("pipeline", ["sync", "pws"])
def test_gpu_gemm_into_a_16_bit_c_matches_numpy(monkeypatch, rng, dtype, pipeline):
    """gemm_cast: f32 accumulators rounded once into a bf16 / f16 C, interior tiles stored 8 bytes a
    lane after the pair swap (one shfl.xor), edge tiles element by element; on the default loop and
    the persistent warp-specialised one; ragged M, N, K; the output starts poisoned."""
    if bridge.current_device().cc < (9, 0):
        pytest.skip("the TMA GEMM loop: sm_90 or newer")
    monkeypatch.setenv("KB_TILE_GEMM_PIPELINE", "ws" if pipeline == "pws" else "sync")
    np_dtype = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[dtype]
    m, k, n = 2100, 200, 1096
    a = rng.standard_normal((m, k)).astype(np_dtype)
    b = rng.standard_normal((k, n)).astype(np_dtype)
    c, _ = poisoned(rng, (m, n), np_dtype)
    kernel = tile.kernel(K.gemm_cast.pyfunc, persistent=pipeline == "pws")
    args = (dev(a), dev(b), tile.partition(c, (128, 256)), 64)
    ck = kernel.compile(args, bridge.current_device().arch)
    assert ck.threads == (384 if pipeline == "pws" else 256) and "st.global.v2.b32" in ck.ptx
    kernel(*args)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.to_host().astype(np.float64), ref, rtol=2 ** -7, atol=2e-2)
