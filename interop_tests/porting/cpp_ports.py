"""DSL ports of the package's four CUDA C++ kernels (cpp/kernels/*.cu), each with a NumPy reference.

They are what a user writes after `python -m dsl port`: the same job, the same argument names (the
size scalars dropped: DSL arrays carry their shape), relations that say the same as the C++ ones.
The CPU tests compare each port with its NumPy reference on the simulator; the GPU tests compare it
with the C++ kernel itself (bridge.testing.assert_equivalent).
"""
from __future__ import annotations

import numpy as np

from dsl import f32, i32, simt

WARPS = 8            # 256 threads per block, as the C++ kernels
NEG_INF = float("-inf")


@simt.kernel(launch_bounds=1024, min_cc=80, requires=["len(x) == len(y)"])
def saxpy(a: f32, x: simt.Array[f32], y: simt.DisjointSlice[f32]):
    i = simt.thread.index_1d()
    y[i] = simt.fma(a, x[i], y[i])          # fmaf in the C++ kernel: one rounding


def saxpy_ref(a, x, y):
    y[...] = (np.float64(a) * x.astype(np.float64) + y).astype(np.float32)   # exact fma for f32


@simt.kernel(domain=2, block=(32, 8), min_cc=80,
             requires=["out.shape[0] == in_.shape[1]", "out.shape[1] == in_.shape[0]"])
def transpose(in_: simt.Array[f32, 2], out: simt.DisjointSlice[f32, 2]):
    r, c = simt.thread.index_2d()
    out[r, c] = in_[c, r]


def transpose_ref(in_, out):
    out[...] = in_.T


@simt.kernel(block=256, min_cc=80, requires=["len(out) == 1"])
def block_reduce_sum(x: simt.Array[f32], out: simt.DisjointSlice[f32]):
    with simt.unsafe():
        warp_sums = simt.shared.array((WARPS,), f32)
        acc = f32(0)
        i = simt.blockIdx.x * 256 + simt.threadIdx.x
        while i < len(x):                    # grid-stride: any grid >= 1 is correct
            acc += x[i]
            i += simt.gridDim.x * 256
        acc = simt.warp.sum(acc)
        lane = simt.lane_id()
        warp = simt.threadIdx.x // 32
        if lane == 0:
            warp_sums[warp] = acc
        simt.sync_threads()
        if warp == 0:
            s = warp_sums[lane] if lane < WARPS else f32(0)
            s = simt.warp.sum(s)
            if lane == 0:
                simt.atomic.add(out, 0, s)


def block_reduce_sum_ref(x, out):
    out[...] = out + np.float32(x.astype(np.float64).sum())


@simt.kernel(block=256, min_cc=80, requires=["x.shape == y.shape", "x.shape[1] > 0"])
def legacy_softmax(x: simt.Array[f32, 2], y: simt.DisjointSlice[f32, 2]):
    with simt.unsafe():
        scratch = simt.shared.array((WARPS,), f32)
        t = simt.threadIdx.x
        lane = simt.lane_id()
        cols = x.shape[1]
        row = simt.blockIdx.x
        while row < x.shape[0]:              # blocks stride over rows: any grid >= 1 is correct
            m = f32(NEG_INF)
            c = t
            while c < cols:
                m = max(m, x[row, c])
                c += 256
            off = i32(16)
            while off > 0:
                m = max(m, simt.warp.shfl_xor(m, off))
                off = off // i32(2)
            if lane == 0:
                scratch[t // 32] = m
            simt.sync_threads()
            m = scratch[0]
            for w in range(1, WARPS):
                m = max(m, scratch[w])
            simt.sync_threads()
            s = f32(0)
            c = t
            while c < cols:
                s += simt.exp(x[row, c] - m)
                c += 256
            off = i32(16)
            while off > 0:
                s += simt.warp.shfl_xor(s, off)
                off = off // i32(2)
            if lane == 0:
                scratch[t // 32] = s
            simt.sync_threads()
            s = scratch[0]
            for w in range(1, WARPS):
                s += scratch[w]
            simt.sync_threads()
            inv = f32(1) / s
            c = t
            while c < cols:
                y[row, c] = simt.exp(x[row, c] - m) * inv
                c += 256
            row += simt.gridDim.x


def legacy_softmax_ref(x, y):
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    y[...] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


PORTS = {"saxpy": (saxpy, saxpy_ref), "transpose": (transpose, transpose_ref),
         "block_reduce_sum": (block_reduce_sum, block_reduce_sum_ref),
         "legacy_softmax": (legacy_softmax, legacy_softmax_ref)}
