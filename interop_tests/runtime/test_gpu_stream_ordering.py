"""Cross-stream producers are ordered without host syncs; use_stream drives CuPy and torch too."""
from __future__ import annotations

import numpy as np
import pytest

import bridge

from runtime_helpers import SPIN_CYCLES, all_contracts, rt_ptx

pytestmark = pytest.mark.gpu
N = 4096 + 36     # rows of N float32 stay 16-byte aligned (the contract asks it); not a block multiple


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels")


def test_torch_side_stream_producer_1000_runs(mod, rng):
    torch = pytest.importorskip("torch")
    runs = 1000
    side = torch.cuda.Stream()
    consumer = bridge.Stream()
    src = torch.from_numpy((rng.standard_normal(N) * 10).astype(np.float32)).cuda()
    b_np = (rng.standard_normal(N) * 10).astype(np.float32)
    b = torch.from_numpy(b_np).cuda()
    xs = torch.full((runs, N), -1.0, device="cuda")
    outs = torch.full((runs, N), -7.0, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(side):          # torch's current stream = the producer's stream
        for i in range(runs):
            torch.cuda._sleep(SPIN_CYCLES // 4)              # deliberately slow producer
            torch.mul(src, float(i + 1), out=xs[i])
            mod.vecadd(xs[i], b, outs[i], N, stream=consumer)   # no host sync in between
    consumer.synchronize()
    got = outs.cpu().numpy()
    expect = src.cpu().numpy()[None, :] * np.arange(1, runs + 1, dtype=np.float32)[:, None] + b_np[None, :]
    bad = [i for i in range(runs) if not np.allclose(got[i], expect[i], rtol=1e-6)]
    assert not bad, f"{len(bad)}/{runs} runs read the producer's buffer too early (first: {bad[:5]})"


def test_cupy_producer_stream_300_runs(mod, rng):
    cp = pytest.importorskip("cupy")
    runs = 300
    side = cp.cuda.Stream(non_blocking=True)
    consumer = bridge.Stream()
    src_np = (rng.standard_normal(N) * 10).astype(np.float32)
    src, b = cp.asarray(src_np), cp.zeros(N, cp.float32)
    xs = cp.full((runs, N), -1.0, cp.float32)
    gates = [cp.empty(N, cp.float32) for _ in range(4)]
    outs = cp.full((runs, N), -7.0, cp.float32)
    cp.cuda.Device().synchronize()
    with side:
        for i in range(runs):
            mod.spin_fill(gates[i % 4], N, np.float32(0), SPIN_CYCLES // 4, stream=side)
            cp.multiply(src, np.float32(i + 1), out=xs[i])
            mod.vecadd(xs[i], b, outs[i], N, stream=consumer)
    consumer.synchronize()
    expect = src_np[None, :] * np.arange(1, runs + 1, dtype=np.float32)[:, None]
    np.testing.assert_allclose(cp.asnumpy(outs), expect, rtol=1e-6)


def test_bridge_array_written_on_one_stream_read_on_another(mod):
    runs = 200
    producer, consumer = bridge.Stream(), bridge.Stream()
    xs = [bridge.full((N,), -1.0, "float32") for _ in range(runs)]
    outs = [bridge.full((N,), -7.0, "float32") for _ in range(runs)]
    bridge.synchronize()
    for i in range(runs):
        mod.spin_fill(xs[i], N, np.float32(i + 1), SPIN_CYCLES // 4, stream=producer)
        mod.vecadd(xs[i], xs[i], outs[i], N, stream=consumer)   # ordered after `producer` by the launcher
    consumer.synchronize()
    ramp = np.arange(1, N + 1, dtype=np.float32)
    for i in range(runs):
        np.testing.assert_allclose(outs[i].to_host(), 2 * (i + 1) * ramp, rtol=1e-6)


def test_use_stream_orders_cupy_torch_and_bridge_ops(mod, rng):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    s = bridge.Stream()
    a_np = (rng.standard_normal(N) * 10).astype(np.float32)
    a = cp.asarray(a_np)
    gate = bridge.empty((N,), "float32")
    x = cp.full(N, -1.0, cp.float32)
    y = torch.full((N,), -7.0, device="cuda")
    cp.cuda.Device().synchronize()
    with bridge.use_stream(s):
        assert cp.cuda.get_current_stream().ptr == s.handle
        assert torch.cuda.current_stream().cuda_stream == s.handle
        mod.spin_fill(gate, N, np.float32(0), SPIN_CYCLES * 5)   # current stream: s
        cp.multiply(a, np.float32(3), out=x)                       # CuPy on s
        mod.vecadd(x, x, y, N)                                     # bridge on s
        z = y * 0.5 + 1.0                                          # torch on s
    assert cp.cuda.get_current_stream().ptr != s.handle or s.handle == 0
    s.synchronize()
    np.testing.assert_allclose(z.cpu().numpy(), a_np * 3 + 1.0, rtol=1e-5)


def test_wrapping_torch_and_cupy_streams_gives_their_handles():
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    ts, cs = torch.cuda.Stream(), cp.cuda.Stream()
    assert bridge.Stream(ts).handle == ts.cuda_stream
    assert bridge.Stream(cs).handle == cs.ptr
    with bridge.use_stream(ts):
        assert torch.cuda.current_stream() == ts
    s = bridge.Stream()
    assert torch.cuda.ExternalStream(s.handle).cuda_stream == s.handle   # consumers can wrap ours
