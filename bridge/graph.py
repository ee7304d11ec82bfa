"""CUDA graphs captured from a stream: `with bridge.capture() as g: ...; g.replay()`.

Why the keepalive list: a graph replays on buffers it only knows by address. Every argument of every
bridge launch captured (and what keeps its memory alive) is recorded by the native launcher into the
capture's registry and held by the Graph for as long as the graph exists.
"""
from __future__ import annotations

from typing import Any

from bridge import _driver, _native, memory
from bridge.errors import DeviceMismatchError
from bridge.stream import Stream, current_stream, use_stream


class Graph:
    """An instantiated CUDA graph; `replay(stream=None)` launches it (current stream by default) on a
    stream of the device it was captured on (`device`)."""

    def __init__(self) -> None:
        self.graph: int = 0
        self.graph_exec: int = 0
        self.objects: list[Any] = []    # every buffer (and owner) the captured launches use
        self._foreign: list[Any] = []   # bridge arrays among them with a foreign producer stream
        self._uses: list[tuple[int, int, int, bool]] = []   # (lo, hi, device, write) of every launch
        self.stream: Stream | None = None
        self.device: int = 0            # the capture stream's device: replays run there only

    def replay(self, stream: Stream | Any = None) -> None:
        if not self.graph_exec:
            raise RuntimeError("this graph has no executable yet: replay it after the capture block ends")
        s = current_stream() if stream is None else (stream if isinstance(stream, Stream) else Stream(stream))
        if s.handle <= 2 and stream is None:
            s = Stream(s.handle, device=self.device)     # the default stream of the graph's device
        if int(s.device) != self.device:
            raise DeviceMismatchError(
                f"Graph.replay: argument 'stream' (#0): expected a stream of cuda:{self.device} (where the "
                f"graph was captured), got a stream of cuda:{s.device}; capture the work again on a stream "
                f"of cuda:{s.device}", kernel="Graph.replay", arg=0, arg_name="stream")
        handle = int(s.handle)
        # The replay may run on another stream than the capture: order it, like each captured launch,
        # after the streams that wrote (for its writes: also read) the same bytes, and record its uses.
        # (every call names the graph's device: a default-stream handle means that device's stream)
        for producer, gen, pdev in {(int(a._stream), int(a._stream_generation), int(a.device_id))
                                    for a in self._foreign}:
            if producer != handle:
                memory.wait(producer, handle, pdev, gen, consumer_device=self.device)
        for lo, hi, _device, write in self._uses:
            memory.order_use(lo, hi, handle, self.device, write)
        _native.graph_launch(self.graph_exec, handle, self.device)
        for lo, hi, _device, write in self._uses:
            memory.note_use(lo, hi, handle, self.device, write)

    def keep_alive(self, *objects: Any) -> None:
        """Also hold `objects` for as long as the graph exists: what the captured work uses that no
        bridge launch names, e.g. the torch memory pool the capture's temporaries came from (freed with
        the pool, their memory would be handed to others while replays still write it)."""
        self.objects = self.objects + list(objects)

    def _keep(self, objects: list[Any], uses: list[Any] = ()) -> None:
        self.objects = objects
        arrays = {id(o): o for o in objects if isinstance(o, _native.ArrayBase)}.values()
        self._foreign = [a for a in arrays if a._stream is not None]
        # one entry per (range, device), a write winning over a read of the same range
        merged: dict[tuple[int, int, int], bool] = {}
        for lo, hi, device, write in uses:
            merged[(int(lo), int(hi), int(device))] = merged.get((int(lo), int(hi), int(device)), False) or bool(write)
        self._uses = [(lo, hi, d, w) for (lo, hi, d), w in merged.items()]

    def close(self) -> None:
        """Free the graph and release the buffers it kept alive."""
        if self.graph or self.graph_exec:
            g, e = self.graph, self.graph_exec
            self.graph = self.graph_exec = 0
            _native.graph_destroy(g, e)
        self._keep([])

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"<bridge.Graph exec={hex(self.graph_exec)} keeping {len(self.objects)} object(s)>"


class capture:
    """`with bridge.capture(stream=None) as g:` capture work on `stream` into Graph `g`.

    With stream=None the current stream is used, or a new stream when the current one is the legacy
    default stream (which cannot be captured); inside the block it is the current stream for bridge,
    CuPy and PyTorch. Capture mode is thread-local.
    """

    def __init__(self, stream: Stream | Any = None) -> None:
        if stream is None:
            cur = current_stream()
            stream = cur if cur.handle != 0 else Stream()
        self.stream = stream if isinstance(stream, Stream) else Stream(stream)
        if self.stream.handle == 0:
            raise ValueError("capture(stream): the legacy default stream (handle 0) cannot be captured; "
                             "use a bridge.Stream()")
        self.graph = Graph()
        self._use = use_stream(self.stream)

    def __enter__(self) -> Graph:
        # The capture stream's device is current inside the block (allocations and foreign ops there
        # land on it); the caller's context comes back at the end.
        self._saved_ctx = _driver.current_context()
        _driver.ensure_current(self.stream.device)
        # the intake's first look at CuPy / torch probes them with arrays they allocate, which the
        # capture would forbid (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED): resolve it before beginning
        _native.resolve_fast_intake()
        try:
            _native.capture_begin(self.stream.handle, self.stream.device)
        except BaseException:
            _driver.restore_context(self._saved_ctx)
            raise
        try:
            self._use.__enter__()
        except BaseException:
            _native.capture_end(self.stream.handle, False)
            _driver.restore_context(self._saved_ctx)
            raise
        self.graph.stream = self.stream
        self.graph.device = int(self.stream.device)
        return self.graph

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            self._use.__exit__(exc_type, *exc)
            graph, exec_, objects, uses = _native.capture_end(self.stream.handle, exc_type is None)
            self.graph.graph, self.graph.graph_exec = int(graph), int(exec_)
            self.graph._keep(list(objects), list(uses))
        finally:
            _driver.restore_context(self._saved_ctx)
