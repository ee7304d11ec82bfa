"""Ordering follows memory, not Python objects: fresh views, parents and foreign arrays over bytes a
bridge launch wrote on another stream are ordered after that write (events, no host block), also when
the producer stream was destroyed in between; frees, writes after reads and graph replays likewise."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import bridge

from runtime_helpers import SPIN_CYCLES, all_contracts, rt_ptx

pytestmark = pytest.mark.gpu
N = 4096 + 36          # not a block multiple; rows stay 16-byte aligned
ROWS = 40
SLOW = SPIN_CYCLES * 4  # ~0.4 ms per launch: a consumer that does not wait reads stale bytes


@pytest.fixture(scope="module")
def mod():
    return bridge.load_module(rt_ptx(), contracts=all_contracts(), name="rt_kernels")


def ramp(v: float) -> np.ndarray:
    return v * np.arange(1, N + 1, dtype=np.float32)


def test_fresh_views_exported_to_torch_on_another_stream_see_the_write(mod):
    torch = pytest.importorskip("torch")
    out = bridge.full((ROWS, N), -1.0, "float32")
    bridge.synchronize()
    producer, consumer = bridge.Stream(), torch.cuda.Stream()
    for r in range(ROWS):
        mod.spin_fill(out[r], N, np.float32(r + 1), SLOW, stream=producer)   # written through a view
    got = torch.empty((ROWS, N), device="cuda")
    with torch.cuda.stream(consumer):
        for r in range(ROWS):
            got[r].copy_(torch.from_dlpack(out[r:r + 1])[0])   # a fresh view of the same bytes
        whole = torch.from_dlpack(out).clone()                  # and the parent
    consumer.synchronize()
    expect = np.stack([ramp(r + 1) for r in range(ROWS)])
    stale = [r for r in range(ROWS) if not np.array_equal(got[r].cpu().numpy(), expect[r])]
    assert not stale, f"{len(stale)} of {ROWS} rows exported through fresh views were stale"
    np.testing.assert_array_equal(whole.cpu().numpy(), expect)


def test_a_foreign_array_over_the_same_allocation_is_ordered_after_the_write(mod):
    torch = pytest.importorskip("torch")
    x = bridge.full((N,), -1.0, "float32")
    alias = torch.from_dlpack(x)              # a torch tensor naming x's bytes, made BEFORE the write
    y = bridge.full((N,), -7.0, "float32")
    bridge.synchronize()
    producer, consumer = bridge.Stream(), bridge.Stream()
    mod.spin_fill(x, N, np.float32(3), SLOW, stream=producer)
    mod.vecadd(alias, alias, y, N, stream=consumer)          # reads through the torch object
    consumer.synchronize()
    np.testing.assert_array_equal(y.to_host(), 2 * ramp(3))


def test_a_destroyed_bridge_producer_stream_does_not_break_the_wait(mod):
    torch = pytest.importorskip("torch")
    out = bridge.full((N,), -1.0, "float32")
    bridge.synchronize()
    producer = bridge.Stream()
    mod.spin_fill(out, N, np.float32(5), SLOW, stream=producer)
    producer.close()                          # destroyed while the write is still running
    del producer
    consumer = torch.cuda.Stream()
    with torch.cuda.stream(consumer):
        got = torch.from_dlpack(out[7:]).clone()
    consumer.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy(), ramp(5)[7:])


def test_a_destroyed_foreign_producer_stream_does_not_break_the_wait(mod):
    cp = pytest.importorskip("cupy")
    out = bridge.full((N,), -1.0, "float32")
    y = bridge.full((N,), -7.0, "float32")
    bridge.synchronize()
    side = cp.cuda.Stream(non_blocking=True)
    mod.spin_fill(out, N, np.float32(2), SLOW, stream=side)
    del side
    gc.collect()                              # CuPy destroys its stream here
    consumer = bridge.Stream()
    mod.vecadd(out[:], out, y, N, stream=consumer)
    consumer.synchronize()
    np.testing.assert_array_equal(y.to_host(), 2 * ramp(2))


def test_to_host_of_a_view_waits_for_the_write_on_another_stream(mod):
    out = bridge.full((N,), -1.0, "float32")
    bridge.synchronize()
    producer = bridge.Stream()
    mod.spin_fill(out, N, np.float32(4), SLOW, stream=producer)
    np.testing.assert_array_equal(out[100:].to_host(), ramp(4)[100:])   # current (default) stream


def test_a_free_waits_for_a_write_on_another_stream(mod):
    home = bridge.Stream()
    x = bridge.empty((N,), "float32", stream=home)
    ptr = x.ptr
    writer = bridge.Stream()
    mod.spin_fill(x, N, np.float32(1), SLOW * 4, stream=writer)   # slow write on another stream
    del x                                                           # freed on `home`
    gc.collect()
    y = bridge.full((N,), 9.0, "float32", stream=home)             # the pool hands the bytes back
    assert y.ptr == ptr, "precondition: the stream-ordered pool reused the freed bytes"
    bridge.synchronize()
    np.testing.assert_array_equal(y.to_host(), np.full(N, 9.0, np.float32))


def test_a_write_waits_for_a_slow_reader_on_another_stream(mod, rng):
    vals = rng.standard_normal(N).astype(np.float32) + 2
    x = bridge.from_host(vals)
    copy = bridge.full((N,), -1.0, "float32")
    bridge.synchronize()
    reader, writer = bridge.Stream(), bridge.Stream()
    mod.spin_copy(x, copy, N, SLOW, stream=reader)                 # slow read of x
    mod.spin_fill(x, N, np.float32(8), 0, stream=writer)            # then an overwrite of x
    bridge.synchronize()
    np.testing.assert_array_equal(copy.to_host(), vals)            # the read saw the old bytes
    np.testing.assert_array_equal(x.to_host(), ramp(8))


def test_graph_replay_on_another_stream_is_ordered_after_a_write(mod):
    x = bridge.full((N,), -1.0, "float32")
    y = bridge.full((N,), -7.0, "float32")
    bridge.synchronize()
    with bridge.capture() as g:
        mod.vecadd(x, x, y, N)
    producer, replay = bridge.Stream(), bridge.Stream()
    mod.spin_fill(x[:], N, np.float32(6), SLOW, stream=producer)
    g.replay(replay)
    replay.synchronize()
    np.testing.assert_array_equal(y.to_host(), 2 * ramp(6))
