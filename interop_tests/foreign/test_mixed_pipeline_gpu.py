"""Issue 32's "done when": one pipeline of six kernels from six sources on one bridge stream, vs NumPy
float64, run directly, then captured in a CUDA graph (`bridge.capture`) and replayed:

    t1  = x + y                      Triton (@triton.jit, compiled by Triton, launched by us)
    t2  = t1 * x - 0.75              CuPy ElementwiseKernel (source generated from its definition)
    t2 += 1.5 * y                    numba-cuda (@cuda.jit saxpy, numba's per-array fields filled)
    t2 += 2 * x                      CUDA C++ (bridge.cpp_kernels' saxpy, contract embedded by KB_CONTRACT)
    t3  = t2 + y                     DSL SIMT kernel
    out = t3 + x                     DSL tile kernel

and each of the six given a wrong dtype, a wrong shape and an aliased output: refused before launch by
the one validator with its typed error naming the kernel and an argument, the poisoned output unchanged.
Each foreign part skips with its reason when its library is absent (the GPU machine has them all).

Run: python3 -m pytest -m gpu interop_tests/foreign/test_mixed_pipeline_gpu.py -q -n 0
"""
from __future__ import annotations

import importlib
import re

import numpy as np
import pytest

import bridge
from bridge.errors import AliasingError, DTypeError, LaunchContractError, ShapeRelationError
from dsl import f32, simt, tile

pytestmark = pytest.mark.gpu
N = 100_000 + 37                       # a multiple of no block or tile size used


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def simt_add(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@tile.kernel(requires=["len(a) == len(out)", "len(b) == len(out)"])
def tile_add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


def _triton():
    pytest.importorskip("triton", reason="Triton is not installed (pip install 'kernelbridge[foreign]')")
    tk = importlib.import_module("foreign_triton_kernels")
    return bridge.foreign.triton(tk.add, "*fp32, *fp32, *fp32, i32", constexprs={"BLOCK": 1024},
                                 access={"x": "read", "y": "read"},
                                 requires=["len(x) == n", "len(y) == n", "len(out) == n"], grid=("out", "BLOCK"))


def _cupy_elementwise():
    cp = pytest.importorskip("cupy", reason="CuPy is not installed (pip install cupy-cuda12x / cupy-cuda13x)")
    ek = cp.ElementwiseKernel("T u, T v, float32 c", "T out", "out = u * v - c", "mul_sub_ek")
    example = np.zeros(4, np.float32)
    return bridge.foreign.cupy(ek, examples=(example, example, np.float32(0), example))


def _numba():
    pytest.importorskip("numba.cuda", reason="numba-cuda is not installed (pip install 'kernelbridge[foreign]')")
    nk = importlib.import_module("foreign_numba_kernels")
    if (why := nk.compile_problem()) is not None:
        pytest.skip(why)
    return bridge.foreign.numba(nk.saxpy, "void(float32, float32[::1], float32[::1], int64)", access={"x": "read"},
                                requires=["len(x) == n", "len(y) == n"], grid_from="y", block=256)


def _cpp():
    from bridge import cpp_kernels
    if "saxpy" not in cpp_kernels.available():
        pytest.skip(f"the package's C++ kernels are not built: {cpp_kernels.status()}")
    return cpp_kernels.load("saxpy").saxpy


@pytest.fixture(scope="module")
def stages():
    """name -> kernel, every source (a missing library skips the pipeline, saying which)."""
    return {"triton": _triton(), "cupy": _cupy_elementwise(), "numba": _numba(), "cpp": _cpp(),
            "simt": simt_add, "tile": tile_add}


def _run(k, x, y, t1, t2, t3, out):
    k["triton"](x, y, t1, N)
    k["cupy"](t1, x, np.float32(0.75), t2)
    k["numba"](np.float32(1.5), y, t2, N)
    k["cpp"](np.float32(2.0), x, t2, N)
    k["simt"](t2, y, t3)
    k["tile"](t3, x, tile.partition(out, (1024,)))


def _host(rng):
    return (rng.standard_normal(N) * 4).astype(np.float32)


def test_six_sources_on_one_stream_and_as_a_replayed_graph(stages, rng):
    x_np, y_np = _host(rng), _host(rng)
    x64, y64 = x_np.astype(np.float64), y_np.astype(np.float64)
    want = ((x64 + y64) * x64 - 0.75) + 1.5 * y64 + 2.0 * x64 + y64 + x64
    x, y = bridge.from_host(x_np), bridge.from_host(y_np)
    t1, t2, t3 = (bridge.empty((N,), "float32") for _ in range(3))
    out = bridge.full((N,), -7.0, "float32")
    s = bridge.Stream()
    with bridge.use_stream(s):
        _run(stages, x, y, t1, t2, t3, out)
    s.synchronize()
    np.testing.assert_allclose(out.to_host(), want, rtol=1e-5, atol=1e-4)
    out2 = bridge.full((N,), -7.0, "float32")
    bridge.synchronize()
    with bridge.capture(s) as g:
        _run(stages, x, y, t1, t2, t3, out2)
    np.testing.assert_array_equal(out2.to_host(), np.full(N, -7.0, np.float32))     # captured, not run
    for _ in range(2):
        g.replay(s)
        s.synchronize()
        np.testing.assert_allclose(out2.to_host(), want, rtol=1e-5, atol=1e-4)


SECOND = {"triton": "y", "cupy": "v", "numba": "x", "cpp": "x", "simt": "b", "tile": "b"}   # what `other` is
NAMES = {"triton": "add", "cupy": "mul_sub_ek", "numba": "saxpy", "cpp": "saxpy", "simt": "simt_add",
         "tile": "tile_add"}


def _call(stage, k, x, other, out):
    """The stage's call reading `x` and `other`, writing `out`."""
    one = np.float32(1)
    return {"triton": lambda: k(x, other, out, N),
            "cupy": lambda: k(x, other, one, out),
            "numba": lambda: k(one, other, out, N),
            "cpp": lambda: k(one, other, out, N),
            "simt": lambda: k(x, other, out),
            "tile": lambda: k(x, other, tile.partition(out, (1024,)))}[stage]


@pytest.mark.parametrize("stage", ["triton", "cupy", "numba", "cpp", "simt", "tile"])
def test_each_stage_refuses_a_wrong_dtype_shape_or_alias_before_launch(stages, stage, rng):
    k, name = stages[stage], NAMES[stage]
    x, other = bridge.from_host(_host(rng)), bridge.from_host(_host(rng))
    out = bridge.full((N,), -7.0, "float32")
    _call(stage, k, x, other, out)()                  # the same call done right runs
    bridge.synchronize()
    assert not np.any(out.to_host() == -7.0)
    wide = bridge.from_host(_host(rng).astype(np.float64))
    short = bridge.from_host(_host(rng)[:-1])
    for bad, error, arg in ((wide, DTypeError, SECOND[stage]), (short, ShapeRelationError, None),
                            ("out", AliasingError, None)):
        poisoned = bridge.full((N,), -7.0, "float32")
        bridge.synchronize()
        with pytest.raises(error) as info:
            _call(stage, k, x, poisoned if bad == "out" else bad, poisoned)()
        assert isinstance(info.value, LaunchContractError)
        pattern = rf"{re.escape(name)}: argument '{arg if arg else r'[A-Za-z_]+'}' \(#\d+\)"
        assert re.match(pattern, str(info.value)), str(info.value)
        bridge.synchronize()
        np.testing.assert_array_equal(poisoned.to_host(), np.full(N, -7.0, np.float32))
