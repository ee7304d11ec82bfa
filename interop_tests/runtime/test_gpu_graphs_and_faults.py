"""Graph capture/replay keeps its buffers; device-side fault records become KernelFault at sync."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import bridge
from bridge.errors import KernelFault

from runtime_helpers import SPIN_CYCLES, all_contracts, rt_ptx

pytestmark = pytest.mark.gpu
N = 2048 + 37


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels")


def test_capture_and_replay_follow_in_place_input_changes(mod, rng):
    cp = pytest.importorskip("cupy")
    a_np, b_np = (rng.standard_normal(N) * 10).astype(np.float32), (rng.standard_normal(N) * 10).astype(np.float32)
    a, b, out = cp.asarray(a_np), cp.asarray(b_np), cp.full(N, -7.0, cp.float32)
    tmp = bridge.empty((N,), "float32")
    s = bridge.Stream()
    with bridge.capture(s) as g:
        mod.vecadd(a, b, tmp, N)
        mod.vecadd(tmp, b, out, N)
    assert g.graph_exec != 0 and len(g.objects) >= 6
    np.testing.assert_array_equal(cp.asnumpy(out), np.full(N, -7.0, np.float32))   # captured, not run
    for k in range(3):
        new = (rng.standard_normal(N) * 10).astype(np.float32)
        a.set(new)
        cp.cuda.Device().synchronize()
        g.replay(s)
        s.synchronize()
        np.testing.assert_allclose(cp.asnumpy(out), new + 2 * b_np, rtol=1e-5)


def test_graph_keeps_temporaries_alive(mod, rng):
    a_np = (rng.standard_normal(N) * 10).astype(np.float32)
    v = float(rng.uniform(1, 5))
    a = bridge.from_host(a_np)
    out = bridge.full((N,), -7.0, "float32")
    with bridge.capture() as g:
        mod.vecadd(a, bridge.full((N,), v, "float32"), out, N)     # the filled array: only the graph holds it
    gc.collect()
    junk = [bridge.full((N,), 1e30, "float32") for _ in range(8)]
    for _ in range(2):                     # a graph allocation is freed again before each relaunch
        g.replay()
        g.stream.synchronize()
        np.testing.assert_allclose(out.to_host(), a_np + np.float32(v), rtol=1e-6)
        mod.spin_fill(out, N, np.float32(-7.0), 0, stream=g.stream)     # poison: the next replay rewrites
    del junk


def test_a_replay_on_another_stream_is_ordered_after_producers_and_before_readers(mod, rng):
    a, out = bridge.empty((N,), "float32"), bridge.full((N,), -7.0, "float32")
    s_cap, s_in, s_run = bridge.Stream(), bridge.Stream(), bridge.Stream()
    with bridge.capture(s_cap) as g:
        mod.vecadd(a, a, out, N)
    v = np.float32(rng.uniform(1, 3))
    mod.spin_fill(a, N, v, SPIN_CYCLES * 20, stream=s_in)   # the input is still being written
    g.replay(s_run)                                         # must wait for s_in
    got = out.to_host()                                     # must wait for s_run (not the capture stream)
    np.testing.assert_allclose(got, 2 * v * np.arange(1, N + 1, dtype=np.float32), rtol=1e-6)


def test_host_copies_inside_a_capture_are_refused(rng):
    a_np = rng.standard_normal(N).astype(np.float32)
    dev = bridge.full((N,), 3.0, "float32")
    with pytest.raises(RuntimeError, match="from_host: the stream is being captured"):
        with bridge.capture():
            bridge.from_host(a_np)
    with pytest.raises(RuntimeError, match="to_host: the stream is being captured"):
        with bridge.capture() as g:
            dev.to_host(stream=g.stream)
    np.testing.assert_array_equal(dev.to_host(), np.full(N, 3.0, np.float32))   # nothing was written


def _checked(mod, data, out, idx, stream=None):
    mod.checked_get(data, out, idx, grid=1, block=1, stream=stream)


def test_fault_record_raises_kernel_fault_then_next_launch_works(mod, rng):
    data_np = (rng.standard_normal(100) * 10).astype(np.float32)
    data, out = bridge.from_host(data_np), bridge.full((1,), -7.0, "float32")
    s = bridge.Stream()
    _checked(mod, data, out, 42, s)
    s.synchronize()
    assert out.to_host()[0] == data_np[42]
    _checked(mod, data, out, 1234, s)
    with pytest.raises(KernelFault) as info:
        s.synchronize()
    e = info.value
    assert (e.kernel, e.array, e.index, e.extent, e.file, e.line) == ("checked_get", "data", 1234, 100, "k.py", 12)
    msg = str(e)
    for part in ("checked_get", "'data'", "1234", "100", "k.py:12", "x = data[idx]"):
        assert part in msg
    s.synchronize()                          # cleared: no second report
    _checked(mod, data, out, 7, s)           # the context survived: the next launch works
    s.synchronize()
    assert out.to_host()[0] == data_np[7]


def test_fault_reported_by_device_and_event_synchronize(mod, rng):
    data, out = bridge.from_host(np.arange(10, dtype=np.float32) + 1), bridge.full((1,), -7.0, "float32")
    _checked(mod, data, out, -3)
    with pytest.raises(KernelFault, match="index -3 out of bounds for array 'data' with extent 10"):
        bridge.synchronize()
    s = bridge.Stream()
    _checked(mod, data, out, 10, s)
    ev = s.record()
    with pytest.raises(KernelFault, match="index 10"):
        ev.synchronize()
    _checked(mod, data, out, 9, s)
    s.synchronize()
    assert out.to_host()[0] == 10.0


def test_fault_inside_a_replayed_graph(mod):
    data, out = bridge.from_host(np.arange(16, dtype=np.float32) + 1), bridge.full((1,), -7.0, "float32")
    s = bridge.Stream()
    with bridge.capture(s) as g:
        _checked(mod, data, out, 99, s)
    s.synchronize()                                   # capturing ran nothing: no fault yet
    g.replay(s)
    with pytest.raises(KernelFault, match=r"checked_get: index 99 out of bounds for array 'data' with extent 16"):
        s.synchronize()
    g.replay(s)
    with pytest.raises(KernelFault, match="index 99"):
        bridge.synchronize()                           # device-wide sync reports it too
    assert out.to_host()[0] == -7.0


def test_a_modules_first_launch_may_be_inside_a_capture(rng):
    """A fresh module's first launch may be inside bridge.capture() (load_module resolves its
    contracted kernels where it loads it, so no kernel loading happens in the capture)."""
    fresh = bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels_fresh")
    a = bridge.from_host((rng.standard_normal(N) * 10).astype(np.float32))
    out = bridge.full((N,), -7.0, "float32")
    with bridge.capture() as g:
        fresh.vecadd(a, a, out, N)
    g.replay()
    g.stream.synchronize()
    np.testing.assert_allclose(out.to_host(), 2 * a.to_host(), rtol=1e-6)


def test_a_cupy_arrays_first_intake_may_be_inside_a_capture(tmp_path):
    """In a fresh process, the first CuPy array the bridge takes in was inside bridge.capture(): the
    intake's one-time look at CuPy allocates probe arrays, which invalidated the capture. The capture
    now resolves the intake of imported frameworks before it begins."""
    import subprocess
    import sys
    from pathlib import Path
    script = tmp_path / "first_cupy_capture.py"
    script.write_text(
        "import numpy as np, bridge, cupy as cp\n"
        "from runtime_helpers import rt_ptx, all_contracts\n"
        "N = 2085\n"
        "mod = bridge.load_module(rt_ptx(), contracts=all_contracts(), name='rt')\n"
        "a = cp.arange(N, dtype=cp.float32); out = cp.full(N, -7.0, cp.float32)\n"
        "with bridge.capture() as g:\n"
        "    mod.vecadd(a, a, out, N)\n"
        "g.replay(); g.stream.synchronize()\n"
        "assert np.allclose(cp.asnumpy(out), 2 * np.arange(N)), cp.asnumpy(out)[:4]\n"
        "print('CAPTURED')\n")
    env = dict(__import__("os").environ, PYTHONPATH=str(Path(__file__).parent))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "CAPTURED" in proc.stdout, proc.stderr[-2000:]
