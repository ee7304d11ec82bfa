"""The memory-ordering log's bookkeeping (no driver): hazards follow bytes, not Python objects."""
from __future__ import annotations

from bridge import _native

A, B, C = 0x1000, 0x2000, 0x3000     # made-up stream handles


def test_a_read_on_another_stream_waits_for_the_writer():
    log = _native.MemoryLog()
    log.record(100, 200, A, True)
    assert log.hazards(100, 200, B, False) == [(A, None)]
    assert log.hazards(100, 200, A, False) == []            # same stream: stream order suffices


def test_a_sub_range_or_a_super_range_of_the_written_bytes_waits_too():
    log = _native.MemoryLog()
    log.record(100, 200, A, True)                           # written through a view
    assert log.hazards(0, 1000, B, False) == [(A, None)]    # the parent
    assert log.hazards(150, 160, B, False) == [(A, None)]   # a fresh view inside it
    assert log.hazards(200, 300, B, False) == []            # adjacent bytes are not touched
    assert log.hazards(0, 100, B, False) == []


def test_a_stream_that_waited_once_does_not_wait_again():
    log = _native.MemoryLog()
    log.record(100, 200, A, True)
    log.record(100, 200, B, False)                          # B read it (after waiting for A)
    assert log.hazards(100, 200, B, False) == []
    assert log.hazards(100, 200, C, False) == [(A, None)]


def test_a_write_waits_for_readers_on_other_streams_and_supersedes_them():
    log = _native.MemoryLog()
    log.record(100, 200, A, True)
    log.record(100, 200, B, False, event=77)                # foreign reader: an event was recorded
    assert sorted(log.hazards(100, 200, C, True), key=str) == sorted([(A, None), (B, 77)], key=str)
    log.record(100, 200, C, True)
    assert log.spans() == [(100, 200, C, [])]
    assert log.hazards(100, 200, A, True) == [(C, None)]


def test_a_partial_write_splits_the_history():
    log = _native.MemoryLog()
    log.record(0, 100, A, True)
    log.record(40, 60, B, True)
    assert log.spans() == [(0, 40, A, []), (40, 60, B, []), (60, 100, A, [])]
    assert sorted(log.hazards(0, 100, C, False)) == [(A, None), (B, None)]   # each stream once
    assert log.hazards(45, 55, C, False) == [(B, None)]


def test_legacy_default_stream_handles_0_and_1_are_one_stream():
    log = _native.MemoryLog()
    log.record(0, 10, 0, True)
    assert log.hazards(0, 10, 1, False) == []
    assert log.hazards(0, 10, 2, False) == [(0, None)]      # the per-thread default stream is another


def test_freed_bytes_have_no_history():
    log = _native.MemoryLog()
    log.record(0, 100, A, True)
    log.forget(20, 30)
    assert log.spans() == [(0, 20, A, []), (30, 100, A, [])]
    assert log.hazards(20, 30, B, True) == []


def test_prune_drops_completed_uses_only():
    log = _native.MemoryLog()
    log.record(0, 10, A, True)
    log.record(10, 20, B, True)
    log.record(10, 20, C, False)
    log.prune({A, B})
    assert log.spans() == [(10, 20, B, [C])]                # C's read is still pending
    log.prune({B, C})
    assert len(log) == 0


def test_runtime_log_is_reachable_and_empty_without_gpu_work():
    assert isinstance(_native.memory_log_size(), int)
    assert _native.stream_alive(0, 0) and _native.stream_alive(0xDEAD, 0)   # default / foreign: never "dead"
