"""Split one batch over every GPU of the machine, in one process, with no host synchronisation:

    per GPU d, on a stream of d, for its block of rows:
        y = 2 x + y                  CUDA C++ saxpy (bridge.cpp_kernels: its module loads on d itself)
        h = y * y / 2                DSL SIMT kernel (specialised for d's arch on first use there)
        p = row_softmax(h)           DSL tile kernel (likewise)
        result[rows of d] = p        bridge.copy_peer: cuMemcpyPeerAsync into device 0's result

Each kernel runs on the device of its arrays; the copies into device 0 are ordered after each GPU's
kernels by the memory log (event waits between devices, never a host block), and the final
`result.to_host()` on device 0 waits for all of them. The result is checked against NumPy float64.

    python examples/multi_gpu_split.py [--rows 4096] [--cols 777]

With one GPU the batch has one block (it still runs and checks); with none it says so.
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import bridge
from dsl import f32, simt, tile


@simt.kernel(block=256, requires=["len(y) == len(h)"])
def half_square(y: simt.Array[f32], h: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    h[i] = 0.5 * y[i] * y[i]


@tile.kernel
def row_softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-math.inf)   # one row per tile block
    e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
    out.store(e / tile.sum(e, axis=1, keepdims=True))


def reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    y1 = 2.0 * x.astype(np.float64) + y
    h = 0.5 * y1 * y1
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def run_shard(d: int, stream: bridge.Stream, x: bridge.Array, y: bridge.Array, dst: bridge.Array,
              saxpy) -> None:
    """The pipeline of one block of rows on GPU d (x, y on d; dst: its rows of device 0's result)."""
    rows, cols = x.shape
    n = rows * cols
    saxpy(2.0, x.reshape(n), y.reshape(n), n, stream=stream)                 # CUDA C++, in place
    h = bridge.empty((n,), "float32", device=d, stream=stream)
    half_square(y.reshape(n), h, stream=stream)                               # DSL SIMT
    p = bridge.empty((rows, cols), "float32", device=d, stream=stream)
    row_softmax(h.reshape(rows, cols), tile.partition(p, (1, 1 << (cols - 1).bit_length())), stream=stream)
    bridge.copy_peer(dst, p, stream=stream)                                   # GPU d -> GPU 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=777)
    args = ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"multi_gpu_split needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    gpus = bridge.device_count()
    rows, cols = args.rows, args.cols
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((rows, cols)).astype(np.float32)
    y_host = rng.standard_normal((rows, cols)).astype(np.float32)
    saxpy = bridge.cpp_kernels.load("saxpy", device=0).saxpy
    blocks = np.array_split(np.arange(rows), gpus)
    print(f"{gpus} GPU(s): {rows} rows split into blocks of {', '.join(str(len(b)) for b in blocks)}")

    result = bridge.empty((rows, cols), "float32", device=0)
    streams = [bridge.Stream(device=d) for d in range(gpus)]
    inputs = []
    for d, block in enumerate(blocks):              # uploads first: the pipeline below never waits
        lo, hi = int(block[0]), int(block[-1]) + 1
        inputs.append((lo, hi, bridge.from_host(x_host[lo:hi], device=d, stream=streams[d]),
                       bridge.from_host(y_host[lo:hi], device=d, stream=streams[d])))
    for d, (lo, hi, x, y) in enumerate(inputs):
        run_shard(d, streams[d], x, y, result[lo:hi], saxpy)
        print(f"  GPU {d}: rows {lo}:{hi} queued (saxpy, half_square, row_softmax, copy_peer to GPU 0)")
    assert len(half_square.dispatcher) == gpus and len(row_softmax.dispatcher) == gpus, \
        "each GPU has its own specialisation"

    got = result.to_host()                          # the only wait: after every GPU's copy, by memory
    for s in streams:
        s.synchronize()                             # would raise a recorded bridge.KernelFault
    ref = reference(x_host, y_host)
    err = float(np.max(np.abs(got - ref)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    print(f"checked {rows} x {cols} against NumPy float64: max abs error {err:.2e}")
    print("PASS" + ("" if gpus > 1 else " (1 GPU: the batch had one block)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
