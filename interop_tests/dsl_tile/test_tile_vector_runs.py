"""Distributed tiles held in runs of consecutive elements a thread, loaded and stored 16 bytes at a time
(issue 28; dsl/tile/lower/layout.py Geometry, dsl/tile/lower/runs.py). The tile simulator runs tile
semantics only, so every kernel here runs its GPU lowering on the SIMT CPU simulator
(`simulate_lowered`), whose vector-access semantics refuse a misaligned address as the GPU does, and
is checked against float64 NumPy: f16/f32 mixed through astype, reductions along both axes (sum, max,
argmax, argmin) for run/thread/warp bit patterns of many tile shapes, row and column broadcasts,
`where` with arange masks, chunked stores, tiles smaller than the block or than T*V, and arrays that
are not multiples of the tile, unaligned or of a length that splits a run. The PTX checks show the
v4 accesses of tutorials 01, 02 and 05."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.ir import nodes as N
from dsl.sim.faults import SimulationError
from dsl.tile.lower.layout import Geometry, c32
from dsl.types import TypeVar, f32

ROOT = Path(__file__).resolve().parents[2]
E = TypeVar("E")
C = tile.Constant[int]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(f"tilevec_{name}", ROOT / "examples" / "triton_tutorials" / name)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _warps(kernel, num_warps: int):
    return tile.kernel(kernel.pyfunc, num_warps=num_warps)


def _unaligned(a: np.ndarray, by: int = 2) -> np.ndarray:
    """A C-contiguous copy of `a` whose data pointer is `by` bytes past a 16-byte boundary."""
    raw = np.zeros(a.nbytes + 64, np.uint8)
    at = (-raw.ctypes.data) % 16 + by
    out = raw[at:at + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _padded(x: np.ndarray, bm: int, bn: int) -> np.ndarray:
    """x in float64, zero-padded to whole (bm, bn) tiles, as (tile rows, bm, tile cols, bn)."""
    gm, gn = -(-x.shape[0] // bm), -(-x.shape[1] // bn)
    xp = np.zeros((gm * bm, gn * bn))
    xp[:x.shape[0], :x.shape[1]] = x
    return xp.reshape(gm, bm, gn, bn)


# ------------------------------------------------------------------------------ the mapping itself
@pytest.mark.parametrize("threads,vec,size", [(64, 8, 1024), (64, 8, 256), (128, 4, 512), (128, 8, 4096),
                                              (64, 8, 64), (32, 2, 4096)])
def test_every_element_is_held_once_in_runs_of_consecutive_flat_indices(threads, vec, size):
    geos = [Geometry(threads, t, vec) for t in range(threads)]
    run = geos[0].run(size)
    assert size >= threads * run and (run == vec or size < threads * 2 * run)
    held = [[g.flat(size, r) for r in range(g.per_thread(size))] for g in geos]
    assert sorted(f for h in held for f in h) == list(range(size))
    for t, h in enumerate(held):
        for r0 in range(0, len(h), run):
            assert h[r0:r0 + run] == list(range(h[r0], h[r0] + run))
            assert h[r0] % run == 0
        assert h[0] == t * run                           # a warp's first runs are consecutive in memory


@pytest.mark.parametrize("shape", [(1, 1024), (4, 256), (64, 16), (256, 4), (8, 8, 16), (1024,)])
def test_coordinates_agree_with_the_flat_index(shape):
    size = int(np.prod(shape))
    for t in (0, 1, 5, 63):
        g = Geometry(64, t, 8)
        for r in range(g.per_thread(size)):
            assert tuple(g.coords(shape, r)) == np.unravel_index(g.flat(size, r), shape)


def test_a_tile_smaller_than_the_block_keeps_one_element_a_thread():
    g = Geometry(64, 70 % 64, 8)
    assert g.run(32) == 1 and g.per_thread(32) == 1 and g.flat(32, 0) == 6
    assert isinstance(Geometry(64, c32(3), 8).owner(32), N.Compare)


# ------------------------------------------------------------------------------ kernels
@tile.kernel
def mixed(x: tile.Array[E, 2], y: tile.Array[f32, 2], out: tile.Partition[E, 2]):
    """Elementwise over an f16/bf16 tile and an f32 one, stored back in x's dtype."""
    i, j = tile.bid(0), tile.bid(1)
    a = tile.load(x, (i, j), out.tile_shape).astype(f32)
    b = tile.load(y, (i, j), out.tile_shape)
    out.store(a * 2.0 - b)


@tile.kernel
def stats(x: tile.Array[E, 2], out: tile.Partition[f32, 2]):
    """Row and column sums, maxima, argmax (rows) and argmin (columns) of each tile, broadcast back."""
    i, j = tile.bid(0), tile.bid(1)
    v = tile.load(x, (i, j), out.tile_shape).astype(f32)
    rs = tile.sum(v, axis=1, keepdims=True)
    cm = tile.max(v, axis=0, keepdims=True)
    ra = tile.argmax(v, axis=1, keepdims=True).astype(f32)
    ca = tile.argmin(v, axis=0, keepdims=True).astype(f32)
    out.store(v + rs + 2.0 * cm + 3.0 * ra + 5.0 * ca + 0.5 * tile.max(v) - 0.25 * tile.sum(v))


@tile.kernel
def bias_mask(x: tile.Array[E, 2], row: tile.Array[f32, 1], col: tile.Array[f32, 1], out: tile.Partition[E, 2]):
    """A per-column vector, a per-row vector and two arange masks."""
    i, j = tile.bid(0), tile.bid(1)
    bm, bn = out.tile_shape
    v = tile.load(x, (i, j), (bm, bn)).astype(f32)
    cols = j * bn + tile.arange(bn)[None, :]
    rows = i * bm + tile.arange(bm)[:, None]
    y = v * tile.load(row, j, (bn,))[None, :] + tile.load(col, i, (bm,))[:, None]
    out.store(tile.where(cols % 3 == 0, -1.0, tile.where(rows < 5, y, 2.0 * y)))


@tile.kernel
def add1d(x: tile.Array[E, 1], y: tile.Array[E, 1], out: tile.Partition[E, 1]):
    t = tile.bid(0)
    out.store(tile.load(x, t, out.tile_shape) + tile.load(y, t, out.tile_shape))


@tile.kernel
def row_chunks(x: tile.Array[E, 2], out: tile.Partition[E, 2], BLOCK: C):
    """Each row chunk scaled by the row's maximum, stored chunk by chunk."""
    r = tile.bid(0)
    m = -tile.inf
    for k in range(tile.cdiv(x.shape[1], BLOCK)):
        m = tile.maximum(m, tile.max(tile.load(x, (r, k), (1, BLOCK), padding=-tile.inf).astype(f32)))
    for k in range(tile.cdiv(x.shape[1], BLOCK)):
        out.store(tile.load(x, (r, k), (1, BLOCK)).astype(f32) - m, chunk=(0, k))


def _stats_ref(x: np.ndarray, bm: int, bn: int) -> np.ndarray:
    t = _padded(x.astype(np.float64), bm, bn)
    rs, cm = t.sum(3, keepdims=True), t.max(1, keepdims=True)
    ra, ca = t.argmax(3)[..., None], t.argmin(1)[:, None]
    whole = (0.5 * t.max((1, 3), keepdims=True) - 0.25 * t.sum((1, 3), keepdims=True))
    out = t + rs + 2.0 * cm + 3.0 * ra + 5.0 * ca + whole
    return out.reshape(t.shape[0] * bm, t.shape[2] * bn)[:x.shape[0], :x.shape[1]]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("tile_shape,warps", [((64, 64), 4), ((4, 256), 4), ((256, 4), 4), ((2, 512), 4),
                                              ((16, 32), 4), ((1, 1024), 2), ((8, 8), 2), ((32, 8), 2),
                                              ((8, 128), 8)])
def test_reductions_along_both_axes_match_numpy(dtype, tile_shape, warps, rng):
    bm, bn = tile_shape
    x = rng.standard_normal((bm * 2 + 3, bn * 2 + 8)).astype(dtype)      # rows a multiple of 8: runs
    out = np.full(x.shape, np.nan, np.float32)
    _warps(stats, warps).simulate_lowered(x, tile.partition(out, tile_shape))
    np.testing.assert_allclose(out, _stats_ref(x, bm, bn), rtol=2e-5, atol=2e-3)


@pytest.mark.parametrize("dtype,tol", [(np.float16, 2e-3), (np.float32, 1e-6)])
@pytest.mark.parametrize("shape,tile_shape,warps", [((37, 296), (4, 128), 4), ((37, 300), (4, 128), 4),
                                                    ((9, 100), (2, 64), 2), ((5, 40), (1, 32), 2)])
def test_f16_and_f32_mixed_through_astype_match_numpy(dtype, tol, shape, tile_shape, warps, rng):
    x = rng.standard_normal(shape).astype(dtype)
    y = rng.standard_normal(shape).astype(np.float32)
    out = np.full(shape, np.nan, dtype)
    _warps(mixed, warps).simulate_lowered(x, y, tile.partition(out, tile_shape))
    ref = (2.0 * x.astype(np.float64) - y).astype(dtype)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_row_and_column_broadcasts_and_arange_masks_match_numpy(dtype, rng):
    x = rng.standard_normal((45, 200)).astype(dtype)
    row, col = rng.standard_normal(200).astype(np.float32), rng.standard_normal(45).astype(np.float32)
    out = np.full(x.shape, np.nan, dtype)
    _warps(bias_mask, 4).simulate_lowered(x, row, col, tile.partition(out, (8, 64)))
    y = x.astype(np.float64) * row[None, :] + col[:, None]
    ref = np.where(np.arange(200)[None, :] % 3 == 0, -1.0, np.where(np.arange(45)[:, None] < 5, y, 2 * y))
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(dtype).astype(np.float64), rtol=2e-3, atol=2e-3)


ELEMENT_TYPES = [np.float16, ml_dtypes.bfloat16, np.int16, np.float32, np.int32, np.float64, np.int64, np.int8]


@pytest.mark.parametrize("n", [5000, 5003, 4093, 24])
@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
def test_one_d_arrays_of_any_length_match_numpy(n, dtype, rng):
    """5000: runs wholly in or out; 5003 and 4093: one run straddles the end (whole-run test); 24:
    a tile smaller than T*V. Every element size: 2, 4 and 8 bytes in runs, 1 byte element by element."""
    x, y = ((rng.standard_normal(n) * 20).astype(dtype) for _ in range(2))
    out = np.full(n, np.iinfo(dtype).min if np.dtype(dtype).kind == "i" else np.nan, dtype)
    _warps(add1d, 2).simulate_lowered(x, y, tile.partition(out, (1024 if n > 24 else 32,)))
    np.testing.assert_array_equal(out, x + y)


@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("dtype", ELEMENT_TYPES)
@pytest.mark.parametrize("n", [5000, 5003])
def test_the_vector_accesses_assemble_for_every_element_size(dtype, n):
    x = np.zeros(n, dtype)
    args = (x, x, tile.partition(x.copy(), (1024,)))
    for arch in ("sm_80", "sm_90"):
        ptx = _warps(add1d, 2).ptx(*args, arch=arch)
        assert ("ld.global.nc.v" in ptx) == (np.dtype(dtype).itemsize > 1)
        assemble(ptx, arch)


def test_an_unaligned_array_is_read_element_by_element_and_says_so(rng):
    x = _unaligned(rng.standard_normal((9, 256)).astype(np.float16))
    y = rng.standard_normal((9, 256)).astype(np.float32)
    out = np.full(x.shape, np.nan, np.float16)
    args = (x, y, tile.partition(out, (2, 256)))
    k = _warps(mixed, 2)
    k.simulate_lowered(*args)
    np.testing.assert_allclose(out.astype(np.float64), (2.0 * x.astype(np.float64) - y).astype(np.float16),
                               rtol=2e-3, atol=2e-3)
    from dsl.perf import from_metadata
    paths = from_metadata(k.compile(args, "sm_90").metadata)
    assert [(p.kind, "x's data pointer is not known to be 16-byte aligned" in p.reason) for p in paths] \
        == [("tile-scalar", True)]
    ptx = k.ptx(*args, arch="sm_90")
    assert "ld.global.nc.v4.f32" in ptx and "st.global.v4.b32" in ptx     # y and out still in vectors


def test_the_simulator_refuses_a_vector_access_the_facts_do_not_allow(rng):
    """Lowered as if x were 16-byte aligned, then run on an x that is not: a misaligned vector load."""
    from dsl.sim.launch import run
    from dsl.tile.lower import lower
    x = _unaligned(rng.standard_normal((2, 256)).astype(np.float16))
    y = np.zeros((2, 256), np.float32)
    out = np.zeros((2, 256), np.float16)
    k = _warps(mixed, 2)
    args = (x, y, tile.partition(out, (2, 256)))
    sig, facts = k.specialisation(args)
    facts = dict(facts, x=dict(facts["x"], aligned16=True))
    fn = lower(k.tile_ir(*args), 64, "mixed", facts, {})
    with pytest.raises(SimulationError, match="not aligned to 16 bytes"):
        run(fn, [x, y, out], (1, 1, 1), (64, 1, 1), 0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n,block", [(1000, 256), (300, 128), (40, 32)])
def test_chunked_stores_in_runs_match_numpy(dtype, n, block, rng):
    x = rng.standard_normal((3, n)).astype(dtype)
    out = np.full_like(x, np.nan)
    width = 1 << (n - 1).bit_length()
    _warps(row_chunks, 2).simulate_lowered(x, tile.partition(out, (1, width)), block)
    ref = (x.astype(np.float64) - x.max(1, keepdims=True)).astype(dtype)
    np.testing.assert_allclose(out.astype(np.float64), ref.astype(np.float64), rtol=2e-3, atol=2e-3)


# ------------------------------------------------------------------------------ tutorials: values and PTX
LN = _example("05_layer_norm.py")


def _layer_norm_args(rows: int, n: int, dtype):
    x, w, b = LN.inputs(rows, n, dtype, 0)
    y = np.full_like(x, np.nan)
    mean, rstd = np.full(rows, np.nan, np.float32), np.full(rows, np.nan, np.float32)
    width = LN.next_power_of_2(n)
    return (x, w, b, y, mean, rstd), (x, tile.partition(y, (1, width)), w, b, tile.partition(mean, (1,)),
                                      tile.partition(rstd, (1,)), np.float32(1e-5))


@pytest.mark.parametrize("n", [1024, 1000, 777])
def test_layer_norm_row_f16_matches_numpy(n):
    (x, w, b, y, mean, rstd), args = _layer_norm_args(4, n, np.float16)
    LN.row_kernel(2).simulate_lowered(*args)
    for got, want in zip((y, mean, rstd), LN.reference(x, w, b)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=4e-3, atol=4e-3)


def test_layer_norm_row_f16_loads_and_stores_16_bytes_a_thread():
    _, args = _layer_norm_args(4, 1024, np.float16)
    ptx = LN.row_kernel(2).ptx(*args, arch="sm_90")
    assert ptx.count("@p ld.global.nc.v4.b32") == 6             # x, w and b: two runs of 8 halves each
    assert ptx.count("@p st.global.v4.b32") == 2                # y
    assert "ld.global.nc.b16" not in ptx and "st.global.b16" not in ptx


def test_vector_add_and_fused_softmax_f32_use_v4_accesses():
    add = _example("01_vector_add.py")
    x = np.zeros(98432, np.float32)
    ptx = add.add_kernel.ptx(*add.launch_args(x, x, x.copy()), arch="sm_90")
    assert ptx.count("@p ld.global.nc.v4.f32") == 4 and ptx.count("@p st.global.v4.f32") == 2
    sm = _example("02_fused_softmax.py")
    x = np.zeros((64, 1000), np.float32)
    kernel, args = sm.launch_args(x, x.copy())
    ptx = kernel.ptx(*args, arch="sm_90")
    assert "@p ld.global.nc.v4.f32" in ptx and "@p st.global.v4.f32" in ptx
    assert "ld.global.nc.f32" not in ptx


def test_fused_softmax_f32_matches_numpy(rng):
    sm = _example("02_fused_softmax.py")
    x = (rng.standard_normal((6, 1000)) * 3).astype(np.float32)
    y = np.full_like(x, np.nan)
    kernel, args = sm.launch_args(x, y, rows_per_block=2, num_warps=4)
    kernel.simulate_lowered(*args)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_f16_in_f32_out_kernel_keeps_f16_runs_of_16_bytes():
    """The narrowest loaded type (f16) picks the run: f32 runs are then 32 bytes, two v4 accesses."""
    x = np.zeros((4, 1024), np.float16)
    out = np.zeros((4, 1024), np.float32)
    ptx = _warps(stats, 2).ptx(x, tile.partition(out, (1, 1024)), arch="sm_90")
    assert ptx.count("@p ld.global.nc.v4.b32") == 2 and ptx.count("@p st.global.v4.f32") == 4



# ---- tensor-core fragments loaded in pairs (runs.load_pairs) ------------------------------------------------
def _attention_args(n_ctx=128, d=64, unaligned=False, rng=None):
    rng = rng or np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2 * n_ctx, d)).astype(np.float16) for _ in range(3))
    if unaligned:
        q = _unaligned(q)
    out = np.full((2 * n_ctx, d), np.nan, np.float16)
    return _example("06_fused_attention.py"), (q, k, v, out, n_ctx)


@tile.kernel
def gemm_from_c(a: tile.Array[E, 2], b: tile.Array[E, 2], c: tile.Array[f32, 2], out: tile.Partition[f32, 2], bk: C):
    """out = c + a @ b: the accumulators start as a load of c, in the mma fragment layout."""
    bm, bn = out.tile_shape
    i, j = tile.bid(0), tile.bid(1)
    acc = tile.load(c, (i, j), (bm, bn))
    for k in range(tile.cdiv(a.shape[1], bk)):
        acc = tile.mma(tile.load(a, (i, k), (bm, bk)), tile.load(b, (k, j), (bk, bn)), acc)
    out.store(acc)


def _gemm_args(rng, c_unaligned=False):
    a = rng.standard_normal((128, 96)).astype(np.float16)
    b = rng.standard_normal((96, 72)).astype(np.float16)
    c = rng.standard_normal((128, 72)).astype(np.float32)
    out = np.full((128, 72), np.nan, np.float32)
    return (a, b, _unaligned(c, 4) if c_unaligned else c, tile.partition(out, (64, 64)), 32), out


def test_queries_kept_as_a_fragments_load_two_elements_an_access():
    """Tutorial 06 keeps its query tile in the A-fragment registers the products read: each thread's
    elements come in column pairs, so it loads a pair (4 bytes of f16) an access, not one element (two
    2-byte loads, with a contract that asked q for 2-byte alignment only)."""
    import json
    import re
    T, (q, k, v, out, n) = _attention_args()
    ck = T.attn_fwd.compile(T.launch_args(q, k, v, out, n, True), "sm_90")
    assert not re.search(r"ld\.global(\.nc)?\.b16", ck.ptx)
    assert len(re.findall(r"ld\.global\.nc\.b32", ck.ptx)) == 64 * 64 // 128 // 2   # 64x64 queries, 128 threads
    assert {a["name"]: a.get("align") for a in json.loads(ck.contract_json)["args"]}["q"] == 16


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_accumulators_loaded_from_an_array_take_eight_bytes_an_access(arch):
    import re
    args, _ = _gemm_args(np.random.default_rng(0))
    ck = gemm_from_c.compile(args, arch)
    assert re.search(r"ld\.global\.nc\.v2\.f32", ck.ptx) and not re.search(r"ld\.global\.nc\.f32", ck.ptx)


def test_unaligned_fragment_sources_are_loaded_element_by_element_and_say_so():
    T, (q, k, v, out, n) = _attention_args(unaligned=True)
    ck = T.attn_fwd.compile(T.launch_args(q, k, v, out, n, False), "sm_90")
    scalar = [p for p in ck.metadata["slow_paths"] if p["kind"] == "tile-scalar"]
    assert any("q into tensor-core fragments" in p["reason"] and "16-byte aligned" in p["reason"] for p in scalar), scalar


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("unaligned", [False, True])
def test_fragment_pair_loads_match_numpy_in_the_lowered_simulator(arch, unaligned):
    T, (q, k, v, out, n) = _attention_args(unaligned=unaligned, rng=np.random.default_rng(7))
    T.attn_fwd.simulate_lowered(*T.launch_args(q, k, v, out, n, True), tensor_cores=True, arch=arch)
    assert np.abs(out.astype(np.float64) - T.reference(q, k, v, n, True)).max() < 2e-2
    args, got = _gemm_args(np.random.default_rng(8), c_unaligned=unaligned)
    gemm_from_c.simulate_lowered(*args, tensor_cores=True, arch=arch)
    a, b, c = (x.astype(np.float64) for x in args[:3])
    np.testing.assert_allclose(got, c + a @ b, rtol=0, atol=1e-3)
