"""`@tile.func` helpers (dsl/tile/funcs.py): a tile kernel calls plain Python helpers, inlined at compile
time in their own scope — tiles, scalars, compile-time values and array parameters go in, a value or a
tuple comes out, helpers call helpers — with the NumPy float64 answer in the simulator and on the GPU.
Misuse is a compile error pointing into the helper (recursion, a `return` before the end, a wrong
call), a helper called from plain Python is a TypeError, and the kernel's cache key covers the helper's
source."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest

import bridge
from dsl import f32, tile
from dsl.cache import source_fingerprint
from dsl.tile import TileCompileError

BLOCK = 64


@tile.func
def chunk_of(x, row, k, block):
    return tile.load(x, (row, k), (1, block)).astype(f32)


@tile.func
def online_step(m, s, chunk):
    """One step of an online softmax: the new running max and the rescaled running sum."""
    m_new = tile.maximum(m, tile.max(chunk))
    return m_new, s * tile.exp(m - m_new) + tile.sum(tile.exp(chunk - m_new))


@tile.kernel
def softmax_rows(x: tile.Array[f32, 2], y: tile.Partition[f32, 2], B: tile.Constant[int]):
    row = tile.bid(0)
    n = x.shape[1]
    m = tile.full((), -1.0e30, f32)
    s = tile.zeros((), f32)
    for k in range(tile.cdiv(n, B)):
        cols = k * B + tile.arange(B)[None, :]
        c = tile.where(cols < n, chunk_of(x, row, k, B), -1.0e30)
        m, s = online_step(m, s, c)
    for k in range(tile.cdiv(n, B)):
        y.store(tile.exp(chunk_of(x, row, k, B) - m) / s, chunk=(0, k))


def _softmax64(x):
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _run(x, simulate=True):
    n = x.shape[1]
    width = 1 << max(0, n - 1).bit_length()
    y = np.full((x.shape[0], max(width, BLOCK)), np.nan, np.float32)[:, :n].copy()
    args = (x, tile.partition(y, (1, max(width, BLOCK))), BLOCK)
    if simulate:
        softmax_rows.simulate(*args)
        return y
    import cupy as cp
    xd, yd = cp.asarray(x), cp.asarray(y)
    softmax_rows(xd, tile.partition(yd, (1, max(width, BLOCK))), BLOCK)
    bridge.synchronize()
    return yd.get()


@pytest.mark.parametrize("rows, n", [(5, 300), (3, 64), (2, 1)])
def test_helpers_returning_values_and_tuples_give_the_float64_softmax(rng, rows, n):
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    np.testing.assert_allclose(_run(x), _softmax64(x), rtol=2e-5, atol=1e-7)


def test_a_helper_that_calls_itself_is_a_compile_error_in_the_helper():
    @tile.func
    def again(v):
        return again(v)                      # m-recursion

    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(again(tile.load(a, tile.bid(0), (BLOCK,))))

    a = np.ones(10, np.float32)
    with pytest.raises(TileCompileError, match="calls itself") as info:
        k.simulate(a, tile.partition(np.zeros(10, np.float32), (BLOCK,)))
    assert "m-recursion" in str(info.value)


def test_a_return_before_the_end_is_a_compile_error():
    @tile.func
    def early(v):
        if True:
            return v                          # m-early
        return v * 2.0

    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(early(tile.load(a, tile.bid(0), (BLOCK,))))

    a = np.ones(10, np.float32)
    with pytest.raises(TileCompileError, match="returns once, at its end") as info:
        k.simulate(a, tile.partition(np.zeros(10, np.float32), (BLOCK,)))
    assert "m-early" in str(info.value)


def test_a_call_with_the_wrong_arguments_is_a_compile_error_at_the_call():
    @tile.kernel
    def k(a: tile.Array[f32], out: tile.Partition[f32]):
        out.store(online_step(tile.load(a, tile.bid(0), (BLOCK,))))      # m-arity

    a = np.ones(10, np.float32)
    out = np.full(10, 7.0, np.float32)
    with pytest.raises(TileCompileError, match="online_step.*missing") as info:
        k.simulate(a, tile.partition(out, (BLOCK,)))
    assert "m-arity" in str(info.value)
    assert (out == 7.0).all()


def test_a_helper_called_from_python_says_where_it_belongs():
    with pytest.raises(TypeError, match="only be called inside a @tile.kernel"):
        online_step(1.0, 2.0, 3.0)
    with pytest.raises(TypeError, match="decorates a Python function"):
        tile.func(3)


def _module(tmp_path, name, helper_body):
    path = tmp_path / f"{name}.py"
    path.write_text("from dsl import f32, tile\n\n"
                    "@tile.func\ndef helper(v):\n    return " + helper_body + "\n\n"
                    "@tile.kernel\ndef kern(a: tile.Array[f32], out: tile.Partition[f32]):\n"
                    "    out.store(helper(tile.load(a, tile.bid(0), (64,))))\n")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_kernels_cache_key_covers_the_helpers_source(tmp_path):
    one = _module(tmp_path, "kb_tile_func_one", "v * 2.0")
    two = _module(tmp_path, "kb_tile_func_two", "v * 3.0")
    assert source_fingerprint(one.kern.pyfunc) != source_fingerprint(two.kern.pyfunc)
    a = np.arange(70, dtype=np.float32)
    for mod, k in ((one, 2.0), (two, 3.0)):
        out = np.zeros(70, np.float32)
        mod.kern.simulate(a, tile.partition(out, (64,)))
        np.testing.assert_array_equal(out, a * k)


@tile.kernel
def swap_update(x: tile.Array[f32, 2], y: tile.Partition[f32, 2]):
    row = tile.bid(0)
    m = tile.full((), -1.0e30, f32)
    s = tile.zeros((), f32)
    for j in range(3):
        c = tile.load(x, (row, j), (1, 4))
        m_new = tile.maximum(m, tile.max(c))
        m, s = m_new, s * tile.exp(m - m_new) + tile.sum(tile.exp(c - m_new))   # reads the old m
    y.store(tile.zeros((1, 4), f32) + s)


def test_tuple_assignment_evaluates_the_whole_right_side_first(rng):
    """A helper returning (m_new, s_new) is assigned as `m, s = ...`: the second value must have been
    computed from the old m, as Python does (it used to read the new one)."""
    x = rng.standard_normal((2, 12)).astype(np.float32)
    y = np.zeros((2, 4), np.float32)
    swap_update.simulate(x, tile.partition(y, (1, 4)))
    want = np.exp(x.astype(np.float64) - x.max(1, keepdims=True)).sum(1)
    np.testing.assert_allclose(y[:, 0], want, rtol=1e-5)


@pytest.mark.gpu
def test_helpers_on_the_gpu_give_the_float64_softmax(rng):
    x = (rng.standard_normal((257, 5003)) * 3).astype(np.float32)
    np.testing.assert_allclose(_run(x, simulate=False), _softmax64(x), rtol=2e-5, atol=1e-7)


@tile.func
def accumulate(total, a, blocks):
    for j in range(blocks):
        total = total + tile.load(a, j, (BLOCK,))    # rebinds the parameter in a loop
    return total


@tile.func
def bump(x):
    x = x + 1.0
    return x


@tile.kernel
def param_semantics(a: tile.Array[f32], out: tile.Partition[f32]):
    base = tile.zeros((BLOCK,), f32) + 10.0
    bumped = bump(base)                  # must not change `base`
    out.store(accumulate(tile.zeros((BLOCK,), f32), a, 3) + base * 100.0 + bumped)


def test_a_parameter_rebound_in_a_loop_carries_across_iterations_and_leaves_the_callers_value(rng):
    """Helper parameters are the helper's own locals, as in Python: `total = total + ...` in a loop sums
    every block (it used to restart from the argument each iteration), and `x = x + 1` inside a helper
    leaves the caller's variable as it was."""
    a = rng.standard_normal(3 * BLOCK).astype(np.float32)
    out = np.zeros(BLOCK, np.float32)
    param_semantics.simulate(a, tile.partition(out, (BLOCK,)))
    want = a.reshape(3, BLOCK).astype(np.float64).sum(0) + 1000.0 + 11.0
    np.testing.assert_allclose(out, want, rtol=1e-5)
