"""bridge.Stream wraps every stream spelling without a GPU: protocol objects, raw handles, bridge streams."""
from __future__ import annotations

import pytest

import bridge


class ProtocolStream:
    def __init__(self, result):
        self.result = result

    def __cuda_stream__(self):
        return self.result


def test_wraps_cuda_stream_protocol_handle():
    s = bridge.Stream(ProtocolStream((0, 0xABC0)))
    assert s.handle == 0xABC0
    assert s.__cuda_stream__() == (0, 0xABC0)


def test_rejects_unknown_protocol_version():
    with pytest.raises(ValueError, match=r"ProtocolStream.__cuda_stream__\(\) reports protocol version 1"):
        bridge.Stream(ProtocolStream((1, 0xABC0)))


@pytest.mark.parametrize("bad", [(0,), "0xabc", (0, -5), (0, "x"), None])
def test_rejects_malformed_protocol_results(bad):
    with pytest.raises(TypeError, match="ProtocolStream"):
        bridge.Stream(ProtocolStream(bad))


@pytest.mark.parametrize("handle", [0, 1, 2, 0x7F00DEAD0000])
def test_wraps_raw_integer_handles(handle):
    s = bridge.Stream(handle)
    assert s.handle == handle
    assert s.is_default == (handle == 0)
    assert s.__cuda_stream__() == (0, handle)


def test_negative_handle_is_refused():
    with pytest.raises(ValueError, match="stream handle must be >= 0, got -3"):
        bridge.Stream(-3)


@pytest.mark.parametrize("nonsense", [3.5, "stream", object(), [0], True])
def test_nonsense_is_a_type_error_naming_the_argument(nonsense):
    with pytest.raises(TypeError, match=r"Stream\(obj\): expected .* got " + type(nonsense).__name__):
        bridge.Stream(nonsense)


def test_wrapping_a_bridge_stream_shares_its_handle_and_device():
    inner = bridge.Stream(0x5000, device=0)
    outer = bridge.Stream(inner)
    assert outer.handle == inner.handle and outer.device == inner.device
    assert outer == inner and hash(outer) == hash(inner)


def test_wrapped_streams_are_never_destroyed():
    s = bridge.Stream(0x6000)
    s.close()          # must not call the driver: the stream is not ours
    assert s.handle == 0x6000


def test_native_stream_resolution_agrees_with_python():
    from bridge import _native
    assert _native.resolve_stream(0x1234) == 0x1234
    assert _native.resolve_stream(bridge.Stream(0x4321)) == 0x4321
    assert _native.resolve_stream(ProtocolStream((0, 0x99))) == 0x99
    with pytest.raises(TypeError, match=r"must return \(0, handle\)"):
        _native.resolve_stream(ProtocolStream((2, 0x99)))
    with pytest.raises(TypeError, match="stream must be"):
        _native.resolve_stream(2.5)
