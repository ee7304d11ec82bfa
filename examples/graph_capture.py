"""Capture a mixed pipeline (DSL SIMT + CUDA C++ + DSL tile + CUDA C++ kernels) into a CUDA graph once
with `bridge.capture`, replay it, and compare its per-kernel cost with eager launches.

    python examples/graph_capture.py [--rows 64] [--cols 300] [--iters 300]

Pipeline (all bridge arrays, allocated before the capture; every launch validated when captured):
    h  = x * x / 2                 DSL SIMT kernel (half_square, from mixed_pipeline.py)
    h  = 2 y + h                   CUDA C++ saxpy, in place (bridge.cpp_kernels)
    p  = row_softmax(h as rows x cols)   DSL tile kernel
    pt = p.T                       CUDA C++ transpose (bridge.cpp_kernels)
A graph replays on the SAME buffers: to run it on new data, write the new inputs into x and y in place
(here with a DSL copy kernel) and replay. Results are checked against NumPy float64 after each step.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import bridge
from dsl import f32, simt, tile
from mixed_pipeline import half_square, row_softmax

KERNELS_PER_PIPELINE = 4


@simt.kernel(block=256, requires=["len(src) == len(dst)"])
def copy_into(src: simt.Array[f32], dst: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    dst[i] = src[i]


def reference(x: np.ndarray, y: np.ndarray, rows: int, cols: int) -> np.ndarray:
    h = (0.5 * x.astype(np.float64) ** 2 + 2.0 * y).reshape(rows, cols)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).T


def per_pipeline_us(run, iters: int, stream: bridge.Stream) -> tuple[float, float]:
    """(host us to submit one pipeline, stream us per pipeline when submitted back to back)."""
    stream.synchronize()
    e0 = stream.record()
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    host = (time.perf_counter() - t0) / iters * 1e6
    e1 = stream.record()
    e1.synchronize()
    return host, e0.elapsed_time(e1) / iters * 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=300)
    ap.add_argument("--iters", type=int, default=300)
    args = ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"graph_capture needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    rows, cols = args.rows, args.cols
    n = rows * cols
    rng = np.random.default_rng(0)
    xh, yh = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    saxpy = bridge.cpp_kernels.load("saxpy").saxpy
    transpose = bridge.cpp_kernels.load("transpose").transpose
    stream = bridge.Stream()

    with bridge.use_stream(stream):
        x, y = bridge.from_host(xh), bridge.from_host(yh)
        h = bridge.empty((n,), "float32")
        p = bridge.empty((rows, cols), "float32")
        pt = bridge.empty((cols, rows), "float32")
        h2 = h.reshape(rows, cols)
        p_tiles = tile.partition(p, (1, 1 << (cols - 1).bit_length()))

        def pipeline() -> None:
            half_square(x, h)
            saxpy(2.0, y, h, n)
            row_softmax(h2, p_tiles)
            transpose(p, pt, rows, cols)

        pipeline()                                     # eager: compiles, loads and checks once
        np.testing.assert_allclose(pt.to_host(), reference(xh, yh, rows, cols), rtol=1e-5, atol=1e-7)
        print(f"eager pipeline ({KERNELS_PER_PIPELINE} kernels, {rows}x{cols}): matches NumPy float64")

        with bridge.capture(stream) as graph:          # captured once; nothing runs yet
            pipeline()
        graph.replay()
        np.testing.assert_allclose(pt.to_host(), reference(xh, yh, rows, cols), rtol=1e-5, atol=1e-7)
        print(f"graph replay: matches ({len(graph.objects)} buffers kept alive by the graph)")

        xh2, yh2 = (rng.standard_normal(n).astype(np.float32) * 1.5 for _ in range(2))
        copy_into(bridge.from_host(xh2), x)           # new inputs, written in place into x and y
        copy_into(bridge.from_host(yh2), y)
        graph.replay()
        np.testing.assert_allclose(pt.to_host(), reference(xh2, yh2, rows, cols), rtol=1e-5, atol=1e-7)
        print("graph replay after changing x and y in place: matches the new reference")

        eager = per_pipeline_us(pipeline, args.iters, stream)
        replay = per_pipeline_us(graph.replay, args.iters, stream)
    stream.synchronize()

    k = KERNELS_PER_PIPELINE
    print(f"\n{'':16}{'host submit':>14}{'stream time':>14}   (per kernel; per pipeline of {k})")
    for name, (host, dev) in (("eager launches", eager), ("graph replay", replay)):
        print(f"{name:16}{host / k:>11.2f} us{dev / k:>11.2f} us   ({host:.1f} us, {dev:.1f} us)")
    print(f"replay speed-up of the stream time: {eager[1] / replay[1]:.2f}x")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
