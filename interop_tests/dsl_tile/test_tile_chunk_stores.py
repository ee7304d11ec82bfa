"""Chunked stores (issue 28, item 2): a tile block writes its own partition tile chunk by chunk,
`out.store(v, chunk=(0, k))`, inside a loop over `tile.cdiv(n, BLOCK)` chunks with reductions carried
across chunks, as Triton's layer norm (examples/triton_tutorials/05_layer_norm.py) and an online
softmax do. No chunk reaches past the block's own tile: a constant index outside it, a chunk that
does not divide the tile, or an index made from tile.bid is a compile error; a run-time index outside
it writes nothing. Sizes are never multiples of the chunk; references are float64 NumPy."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import bridge
from dsl import tile
from dsl.backend.ptxas import assemble, find_ptxas
from dsl.errors import DslCompileError
from dsl.types import f32, i32

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "triton_tutorials" / "05_layer_norm.py"
RUNNERS = ["simulate", "simulate_lowered"]


def _load_example():
    spec = importlib.util.spec_from_file_location("triton_tutorial_05_layer_norm", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LN = _load_example()


def layer_norm_case(rows, n, dtype=np.float32, poison=np.nan, seed=0):
    x, w, b = LN.inputs(rows, n, dtype, seed)
    y = np.full_like(x, poison)
    mean, rstd = np.full(rows, poison, np.float32), np.full(rows, poison, np.float32)
    return (x, w, b), (y, mean, rstd)


def check_layer_norm(inputs, outputs, tol):
    for got, want in zip(outputs, LN.reference(*inputs)):
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


# ------------------------------------------------------------------------------ layer norm (tutorial 05)
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,n,block", [(7, 300, 64), (5, 1000, 256), (3, 129, 128), (4, 33, 32)])
def test_chunked_layer_norm_matches_numpy_with_n_not_a_multiple_of_the_chunk(runner, rows, n, block):
    inputs, outputs = layer_norm_case(rows, n)
    getattr(LN.layer_norm_fwd, runner)(*LN.launch_args(*inputs[:1], outputs[0], *inputs[1:], *outputs[1:],
                                                       block=block))
    check_layer_norm(inputs, outputs, 1e-4)


@pytest.mark.parametrize("blocks", [1, 3])
def test_persistent_blocks_store_the_chunks_of_each_row_they_visit(blocks):
    ln = tile.kernel(LN.layer_norm_fwd.pyfunc, persistent=True)
    inputs, outputs = layer_norm_case(5, 150)
    ln.simulate_lowered(*LN.launch_args(inputs[0], outputs[0], *inputs[1:], *outputs[1:], block=32),
                        blocks=blocks)
    check_layer_norm(inputs, outputs, 1e-4)


def test_chunked_layer_norm_reads_and_writes_f16_rows_with_f32_statistics():
    inputs, outputs = layer_norm_case(6, 200, np.float16)
    LN.layer_norm_fwd.simulate(*LN.launch_args(inputs[0], outputs[0], *inputs[1:], *outputs[1:], block=64))
    assert outputs[0].dtype == np.float16
    check_layer_norm(inputs, outputs, 1e-2)


# ------------------------------------------------------------------------------ online softmax
@tile.kernel
def online_softmax(x: tile.Array[f32, 2], y: tile.Partition[f32, 2], BLOCK: tile.Constant[int]):
    """One pass for the running maximum and normaliser (rescaled when the maximum grows), one to store."""
    row = tile.bid(0)
    n = x.shape[1]
    m = -tile.inf
    l = 0.0
    for k in range(tile.cdiv(n, BLOCK)):
        v = tile.load(x, (row, k), (1, BLOCK), padding=-tile.inf)
        m_new = tile.maximum(m, tile.max(v))
        l = l * tile.exp(m - m_new) + tile.sum(tile.exp(v - m_new))
        m = m_new
    for k in range(tile.cdiv(n, BLOCK)):
        v = tile.load(x, (row, k), (1, BLOCK), padding=-tile.inf)
        y.store(tile.exp(v - m) / l, chunk=(0, k))


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("rows,n,block", [(6, 300, 64), (3, 77, 16)])
def test_online_softmax_over_chunks_matches_numpy(runner, rows, n, block, rng):
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    getattr(online_softmax, runner)(x, tile.partition(y, (1, LN.next_power_of_2(n))), block)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------ where chunks go
@tile.kernel
def place_chunks(x: tile.Array[f32, 2], out: tile.Partition[f32, 2], ci: tile.Constant[int],
                 cj: tile.Constant[int]):
    """2-D chunks of a 2-D tile, last chunk first, each marked with its chunk index."""
    ti, tj = out.tile_shape
    ni, nj = ti // ci, tj // cj
    for a in range(ni):
        for b in range(nj):
            i, j = ni - 1 - a, nj - 1 - b
            v = tile.load(x, (tile.bid(0) * ni + i, tile.bid(1) * nj + j), (ci, cj))
            out.store(v + (i * 10 + j) * 1000.0, chunk=(i, j))


@pytest.mark.parametrize("runner", RUNNERS)
def test_chunk_i_j_lands_at_its_place_in_the_blocks_tile_and_the_array_edge_is_masked(runner, rng):
    x = rng.integers(0, 100, (21, 45)).astype(np.float32)       # 3 x 3 tiles of 8 x 16, edges cut
    out = np.full_like(x, np.nan)
    getattr(place_chunks, runner)(x, tile.partition(out, (8, 16)), 4, 8)
    r, c = np.meshgrid(np.arange(21), np.arange(45), indexing="ij")
    i, j = (r % 8) // 4, (c % 16) // 8
    np.testing.assert_array_equal(out, x + (i * 10 + j) * 1000.0)


@tile.kernel
def stray_chunks(out: tile.Partition[f32, 1], lo: i32, hi: i32, block: tile.Constant[int]):
    """Chunks at run-time indices lo .. hi - 1: those outside the block's tile must write nothing."""
    for k in range(lo, hi):
        out.store(tile.full((block,), 1.0, f32) * (k + 100), chunk=(k,))


@pytest.mark.parametrize("runner", RUNNERS)
def test_run_time_chunk_indices_outside_the_own_tile_write_nothing(runner):
    out = np.full(100, -1.0, np.float32)                         # 4 tiles of 32, chunks of 8
    getattr(stray_chunks, runner)(tile.partition(out, (32,)), np.int32(-3), np.int32(0), 8)
    getattr(stray_chunks, runner)(tile.partition(out, (32,)), np.int32(4), np.int32(9), 8)
    assert (out == -1.0).all()
    getattr(stray_chunks, runner)(tile.partition(out, (32,)), np.int32(-2), np.int32(6), 8)
    np.testing.assert_array_equal(out, 100.0 + (np.arange(100) % 32) // 8)


# ------------------------------------------------------------------------------ compile-time refusals
row = np.zeros((4, 100), np.float32)


def refusal(kernel, *args) -> DslCompileError:
    with pytest.raises(DslCompileError) as info:
        kernel.tile_ir(*args)
    return info.value


def assert_caret_at(err: DslCompileError, source_text: str) -> None:
    text = str(err)
    assert err.line > 0 and source_text in text and "^" in text.split(source_text, 1)[1], text


def test_a_constant_chunk_outside_the_own_tile_is_a_compile_error_with_a_caret():
    @tile.kernel
    def k(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        out.store(tile.load(x, (tile.bid(0), 2), (1, 64)), chunk=(0, 2))
    err = refusal(k, row, tile.partition(row.copy(), (1, 128)))
    assert "chunk index 2 along axis 1 is outside this block's tile of `out` (a block writes only its own " \
           "tile): the tile (1, 128) holds 2 chunks of 64 along axis 1 (index 0 to 1)" in str(err)
    assert_caret_at(err, "out.store(tile.load(x, (tile.bid(0), 2), (1, 64)), chunk=(0, 2))")


def test_a_chunk_larger_than_the_tile_is_a_compile_error():
    @tile.kernel
    def k(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        for c in range(2):
            out.store(tile.load(x, (tile.bid(0), c), (1, 256)), chunk=(0, c))
    err = refusal(k, row, tile.partition(row.copy(), (1, 128)))
    assert "a chunk of shape (1, 256) does not divide `out`'s tile (1, 128) along axis 1" in str(err)
    assert "tile that spans the row" in err.hint
    assert_caret_at(err, "out.store(tile.load(x, (tile.bid(0), c), (1, 256)), chunk=(0, c))")


def test_a_chunk_index_from_tile_bid_is_refused_naming_the_own_tile():
    @tile.kernel
    def k(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
        r = tile.bid(0)
        for c in range(2):
            out.store(tile.load(x, (r, c), (1, 64)), chunk=(r, c))
    err = refusal(k, row, tile.partition(row.copy(), (1, 128)))
    assert "chunk index component 0 comes from tile.bid" in str(err) and "chunk=(0, k)" in err.hint
    assert_caret_at(err, "out.store(tile.load(x, (r, c), (1, 64)), chunk=(r, c))")


@pytest.mark.parametrize("store,needle", [
    ("out.store(tile.load(x, (0, 0), (1, 64)).reshape(64), chunk=(0, 0))", "needs `out`'s 2 axes; got a tile of shape (64,)"),
    ("out.store(tile.load(x, (0, 0), (1, 64)), chunk=(0,))", "chunk has 1 components, `out` has 2 axes"),
    ("out.store(tile.load(x, (0, 0), (1, 64)), chunk=(0, 0.5 * tile.bid(0)))", "must be integer scalars"),
    ("out.store(1.0, chunk=(0, 0))", "the value must be a tile of 2 axes (the chunk), got 1.0"),
], ids=["value-ndim", "index-length", "float-index", "number-value"])
def test_malformed_chunk_stores_are_compile_errors_naming_what_is_wrong(store, needle, tmp_path):
    src = tmp_path / "chunk_kernels.py"
    src.write_text("from dsl import tile\nfrom dsl.types import f32\n\n\n@tile.kernel\n"
                   "def k(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):\n"
                   f"    {store}\n")
    spec = importlib.util.spec_from_file_location("chunk_kernels", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    err = refusal(mod.k, row, tile.partition(row.copy(), (1, 128)))
    assert needle in str(err), str(err)
    assert_caret_at(err, store)


def test_cdiv_folds_constants_and_refuses_a_zero_divisor():
    @tile.kernel
    def k(out: tile.Partition[i32, 1]):
        out.store(tile.full((4,), tile.cdiv(10, 4), i32) + tile.cdiv(out.shape[0], 3))
    out = np.zeros(4, np.int32)
    k.simulate(tile.partition(out, (4,)))
    np.testing.assert_array_equal(out, [3 + 2] * 4)

    @tile.kernel
    def bad(out: tile.Partition[i32, 1]):
        out.store(tile.full((4,), tile.cdiv(10, 0), i32))
    assert "tile.cdiv(a, b) needs b > 0, got 0" in str(refusal(bad, tile.partition(out, (4,))))


# ------------------------------------------------------------------------------ launch refusals
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("bad,error,needle", [
    ("mean-rows", bridge.ShapeRelationError, "argument 'mean' (#4)"),
    ("y-dtype", bridge.DTypeError, "argument 'y' (#1)"),
    ("y-ndim", bridge.NdimError, "argument 'y' (#1): expected a 2-d array"),
])
def test_bad_launches_are_typed_errors_and_the_poisoned_outputs_stay_unchanged(runner, bad, error, needle):
    (x, w, b), (y, mean, rstd) = layer_norm_case(6, 100, poison=7.0)
    if bad == "mean-rows":
        mean = np.full(5, 7.0, np.float32)
    elif bad == "y-dtype":
        y = np.full(y.shape, 7.0, np.float64)
    else:
        y = np.full(600, 7.0, np.float32)
    args = (x, tile.partition(y, (1, 128) if y.ndim == 2 else (128,)), w, b, tile.partition(mean, (1,)),
            tile.partition(rstd, (1,)), np.float32(1e-5), 64)
    with pytest.raises(error) as info:
        getattr(LN.layer_norm_fwd, runner)(*args)
    assert "layer_norm_fwd: " + needle in str(info.value), str(info.value)
    assert (y == 7.0).all() and (mean == 7.0).all() and (rstd == 7.0).all()


# ------------------------------------------------------------------------------ PTX
def assemble_cases():
    z = np.zeros
    ln = LN.launch_args(z((4, 300), np.float32), z((4, 300), np.float32), z(300, np.float32),
                        z(300, np.float32), z(4, np.float32), z(4, np.float32), block=128)
    ln16 = LN.launch_args(z((4, 5000), np.float16), z((4, 5000), np.float16), z(5000, np.float16),
                          z(5000, np.float16), z(4, np.float32), z(4, np.float32))
    sm = (z((4, 300), np.float32), tile.partition(z((4, 300), np.float32), (1, 512)), 256)
    return {"layer_norm_f32": (LN.layer_norm_fwd, ln), "layer_norm_f16": (LN.layer_norm_fwd, ln16),
            "online_softmax": (online_softmax, sm)}


@pytest.mark.slow
@pytest.mark.skipif(find_ptxas() is None, reason="ptxas not installed")
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("name", sorted(assemble_cases()))
def test_chunked_kernels_assemble_without_spills(name, arch):
    kernel, args = assemble_cases()[name]
    ck = kernel.compile(args, arch)
    assert f".reqntid {ck.threads}, 1, 1" in ck.ptx
    usage, _ = assemble(ck.ptx, arch)
    assert usage and usage[0].spill_stores == 0, usage


# ------------------------------------------------------------------------------ GPU twins
@pytest.mark.gpu
@pytest.mark.parametrize("rows,n,dtype,tol", [(1151, 1000, np.float32, 1e-4), (300, 5003, np.float32, 1e-4),
                                              (513, 8199, np.float16, 2e-2)])
def test_gpu_chunked_layer_norm_matches_numpy(rows, n, dtype, tol):
    (x, w, b), (y, mean, rstd) = layer_norm_case(rows, n, dtype)
    dev = [bridge.from_host(a) for a in (x, y, w, b, mean, rstd)]
    LN.layer_norm_fwd(*LN.launch_args(*dev))
    check_layer_norm((x, w, b), tuple(d.to_host() for d in (dev[1], dev[4], dev[5])), tol)


@pytest.mark.gpu
def test_gpu_online_softmax_over_chunks_matches_numpy(rng):
    x = (rng.standard_normal((777, 3001)) * 4).astype(np.float32)
    y = bridge.from_host(np.full_like(x, np.nan))
    online_softmax(bridge.from_host(x), tile.partition(y, (1, 4096)), 1024)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(y.to_host(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.nosanitize     # scripts/gpu_check.py runs every example under memcheck itself
def test_gpu_layer_norm_example_prints_pass_last():
    p = subprocess.run([sys.executable, str(EXAMPLE)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == "PASS", (p.stdout + p.stderr)[-4000:]
