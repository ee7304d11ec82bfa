"""DSL kernels' `k(*args)` is one C call (the dispatcher's fastcall): it keeps temporaries alive until
the launch completes and nothing else, orders on the current stream, and gives the same results and
refusals as the keyword path."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import bridge
from bridge import _native
from dsl import f32, i32, simt, tile

pytestmark = pytest.mark.gpu
N = 100_003


@simt.kernel(block=256, requires=["len(a) == len(out)", "len(b) == len(out)"])
def add(a: simt.Array[f32], b: simt.Array[f32], out: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    out[i] = a[i] + b[i]


@tile.kernel
def tile_add(a: tile.Array[f32], b: tile.Array[f32], out: tile.Partition[f32]):
    t = tile.bid(0)
    out.store(tile.load(a, t, out.tile_shape) + tile.load(b, t, out.tile_shape))


@simt.kernel(block=256)
def spin(out: simt.DisjointSlice[f32], rounds: i32):
    i = simt.thread.index_1d()
    v = f32(0.0)
    for k in range(rounds):
        v = v * f32(0.999) + f32(1.0)
    out[i] = v


def host(rng):
    return rng.standard_normal(N).astype(np.float32)


@pytest.mark.nosanitize     # reads stream idleness as "kernel not done"
@pytest.mark.parametrize("model", ["simt", "tile"])
def test_fastcall_keeps_only_temporaries_alive(model, rng):
    s = bridge.Stream()
    a = bridge.from_host(host(rng))
    out = bridge.full((N,), -7.0, "float32")
    gate = bridge.empty((N,), "float32")
    refs: list = []

    def temp(v):
        t = bridge.from_host(v, stream=s)
        refs.append(weakref.ref(t))
        return t
    b_np = host(rng)
    s.synchronize()
    with bridge.use_stream(s):
        spin(gate, 200000)                        # keeps the next launch pending
        if model == "simt":
            add(a, a, out)
            assert _native.pending_keepalive_count() == 0   # named arrays: nothing kept
            add(a, temp(b_np), out)
        else:
            part = tile.partition(out, (1024,))
            tile_add(a, a, part)
            assert _native.pending_keepalive_count() == 0
            tile_add(a, temp(b_np), part)
    gc.collect()
    if not s.query():
        assert refs[0]() is not None
    s.synchronize()
    np.testing.assert_allclose(out.to_host(), a.to_host() + b_np, rtol=1e-6)
    gc.collect()
    assert refs[0]() is None and _native.pending_keepalive_count() == 0


def test_fastcall_and_keyword_paths_give_the_same_refusals(rng):
    a = bridge.from_host(host(rng))
    out = bridge.full((N,), -7.0, "float32")
    bad = bridge.empty((N,), "float64")
    with pytest.raises(bridge.DTypeError) as fast:
        add(a, a, bad)
    with pytest.raises(bridge.DTypeError) as kw:
        add(a, a, bad, stream=bridge.current_stream())
    assert str(fast.value) == str(kw.value)
    bridge.synchronize()
    np.testing.assert_array_equal(out.to_host(), -7.0)     # nothing was launched


def test_nvtx_ranges_are_pushed_when_opted_in(rng):
    st = bridge.nvtx_status()
    if not st["compiled"]:
        pytest.fail("the extension was built without NVTX3 headers on the GPU machine")
    a = bridge.from_host(host(rng))
    out = bridge.empty((N,), "float32")
    before = st["ranges"]
    bridge.set_nvtx(True)
    try:
        add(a, a, out)
        tile_add(a, a, tile.partition(out, (1024,)))
    finally:
        bridge.set_nvtx(False)
    assert bridge.nvtx_status()["ranges"] == before + 2
    add(a, a, out)
    assert bridge.nvtx_status()["ranges"] == before + 2       # off again
    bridge.synchronize()
