"""The memory log tells the default streams of different devices apart: handles 0, 1 (the legacy default
stream) and 2 (per-thread) exist once per device, so a write on cuda:0's default stream is a hazard for
cuda:1's default stream (a peer read or a copy there), while any other handle names one stream."""
from __future__ import annotations

from bridge import _native

LO, HI = 1 << 20, (1 << 20) + 4096


def test_a_write_on_device_0s_default_stream_is_a_hazard_for_device_1s():
    log = _native.MemoryLog()
    log.record(LO, HI, 0, True, device=0)
    assert log.hazards(LO, HI, 0, False, device=0) == []                 # the same stream
    assert log.hazards(LO, HI, 1, False, device=0) == []                 # 0 and 1 are one legacy stream
    assert log.hazards(LO, HI, 0, False, device=1, with_device=True) == [(0, None, 0)]
    assert log.hazards(LO, HI, 2, False, device=0, with_device=True) == [(0, None, 0)]   # per-thread != legacy


def test_a_read_on_another_devices_default_stream_is_waited_for_by_the_next_write():
    log = _native.MemoryLog()
    log.record(LO, HI, 0, True, device=0)
    log.record(LO, HI, 0, False, device=1)                               # cuda:1 read it (peer)
    assert log.hazards(LO, HI, 0, True, device=0, with_device=True) == [(0, None, 1)]
    assert log.hazards(LO, HI, 0, False, device=1) == []                 # cuda:1 already ordered after it


def test_other_handles_name_one_stream_whatever_device_is_stated():
    log = _native.MemoryLog()
    log.record(LO, HI, 0x5000, True, device=0)
    assert log.hazards(LO, HI, 0x5000, False, device=1) == []
    assert log.hazards(LO, HI, 0x6000, False, device=1, with_device=True) == [(0x5000, None, 0)]
