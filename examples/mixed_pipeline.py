"""One GPU pipeline through four worlds, zero-copy, on one stream:

    CuPy arrays -> CUDA C++ kernel (saxpy, built by CMake at install) -> DSL SIMT kernel
                -> DSL tile kernel (row softmax) -> torch tensor -> torch op

Every launch is validated against its contract before it runs; every hand-over is a view of the same
device memory (asserted by pointer equality); nothing waits for the GPU until the final result is
copied to the host and checked against NumPy float64.

    python examples/mixed_pipeline.py [--rows 1000] [--cols 777]
"""
from __future__ import annotations

import argparse
import math
import sys

import numpy as np

import bridge
from dsl import f32, simt, tile


# --- the two DSL kernels ---------------------------------------------------------------------------
@simt.kernel(block=256, requires=["len(y) == len(h)"])
def half_square(y: simt.Array[f32], h: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()          # threads past len(h) skip the store (and its loads)
    h[i] = 0.5 * y[i] * y[i]


@tile.kernel
def row_softmax(x: tile.Array[f32, 2], out: tile.Partition[f32, 2]):
    v = tile.load(x, (tile.bid(0), 0), out.tile_shape, padding=-math.inf)   # one row per tile block
    e = tile.exp(v - tile.max(v, axis=1, keepdims=True))
    out.store(e / tile.sum(e, axis=1, keepdims=True))


def reference(x: np.ndarray, y: np.ndarray, w: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The same pipeline in NumPy float64."""
    y1 = 2.0 * x.astype(np.float64) + y
    h = (0.5 * y1 * y1).reshape(rows, cols)
    e = np.exp(h - h.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True) * w).sum(axis=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--cols", type=int, default=777)
    args = ap.parse_args(argv)
    if not bridge.gpu_available():
        print(f"mixed_pipeline needs a CUDA GPU: {bridge.gpu_unavailable_reason()}")
        return 1
    import cupy as cp      # imported before use_stream, so the stream applies to them too
    import torch

    rows, cols = args.rows, args.cols
    n = rows * cols
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n).astype(np.float32)
    y_host = rng.standard_normal(n).astype(np.float32)
    w_host = rng.random(cols).astype(np.float32)
    w = torch.as_tensor(w_host, device="cuda")             # torch weights, uploaded before we start
    saxpy = bridge.cpp_kernels.load("saxpy").saxpy          # contract read from the fatbin itself
    stream = bridge.Stream()

    with bridge.use_stream(stream):                         # bridge, CuPy and torch all queue on `stream`
        # 1. CuPy owns the inputs
        x, y = cp.asarray(x_host), cp.asarray(y_host)
        print(f"1. CuPy      x, y: {n} float32 each")

        # 2. CUDA C++ kernel on the CuPy arrays, in place: y = 2 x + y
        saxpy(2.0, x, y, n)
        assert bridge.asarray(y).ptr == y.data.ptr
        print("2. CUDA C++  saxpy(2, x, y) in place on CuPy's y (same pointer)")

        # 3. DSL SIMT kernel reads CuPy's y, writes a bridge array h = y^2 / 2
        h = bridge.empty((n,), "float32")
        half_square(y, h)
        print("3. DSL SIMT  h = y * y / 2 into a bridge.Array")

        # 4. DSL tile kernel: softmax of each row of h viewed as (rows, cols)
        h2 = h.reshape(rows, cols)
        assert h2.ptr == h.ptr
        p = bridge.empty((rows, cols), "float32")
        row_softmax(h2, tile.partition(p, (1, 1 << (cols - 1).bit_length())))
        print(f"4. DSL tile  p = row_softmax(h.reshape({rows}, {cols})), one tile block per row")

        # 5. torch takes p over DLPack and finishes: a weighted sum per row
        t = torch.from_dlpack(p)
        assert t.data_ptr() == p.ptr
        result = (t * w).sum(dim=1)
        print("5. torch     result = (p * w).sum(dim=1) on a zero-copy view of p")

        got = result.cpu().numpy()                          # the only wait for the GPU
    stream.synchronize()                                    # would raise a recorded bridge.KernelFault

    ref = reference(x_host, y_host, w_host, rows, cols)
    err = float(np.max(np.abs(got - ref)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)
    print(f"checked {rows} row results against NumPy float64: max abs error {err:.2e}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
