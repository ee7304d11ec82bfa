"""DSL port of cpp/kernels/llm/layernorm.cu: layer normalisation of a GPT-2 step, a warp per row.

Started with `python -m dsl port cpp/kernels/llm/layernorm.cu --kernel layernorm_forward` (and
`--kernel layernorm_backward`): same argument names and order, N and C dropped (they are
inp.shape), the C++ relations rewritten on shapes. The bodies follow the C++ kernels line by line,
with the warp's typed index in place of the `blockIdx.x * kWarps + warp` arithmetic:

- `row = simt.warp.index_1d()` owns row `row` of `out` / `dinp`, `for c in simt.warp.lanes(C)` are
  the `c = lane; c < C; c += 32` loops, `simt.warp.sum` is the butterfly `warp_sum`, and
  `mean[row] = m` is the C++ `if (lane == 0) mean[row] = m`. No output write needs `unsafe`.
- One warp per row (the derived grid, ceil(N / 8) blocks) instead of warps striding over rows: the
  owned row is the warp's own index, never `row + gridDim.x * 8`.
- The backward pass adds its dweight / dbias terms into shared partial sums and then into the global
  arrays through atomics, as the C++ kernel does: those two steps (shared memory, atomics) are the
  port's only `unsafe` blocks. Its block is 512 threads (16 rows a block) where the C++ kernel's is
  256: with one warp per row, the larger block halves the blocks and so the global atomics per column.
- The backward's second column loop carries `unroll=4`, and reads weight[c] before the shared atomics
  (as the C++ computes `dnorm` first): nvcc unrolls that loop by 4 with every load ahead of the
  atomics' compare-and-swap loops, while without the hint each iteration's loads waited for the
  previous iteration's atomics; the port ran 0.944-0.950x its C++ so (H100, 2026-12-06 18:35).
  `benchmarks/llm_kernels.py` times the port against its C++; docs/benchmarks.md has the last check's.
"""
from __future__ import annotations

from dsl import f32, simt

EPS = 1e-5
MAX_CHANNELS = 4096          # the backward pass keeps 2 * C partial sums in shared memory
BWD_THREADS = 512


@simt.kernel(block=256, min_cc=80,
             requires=["out.shape == inp.shape", "inp.shape[1] > 0", "len(mean) == inp.shape[0]",
                       "len(rstd) == inp.shape[0]", "len(weight) == inp.shape[1]", "len(bias) == inp.shape[1]"])
def layernorm_forward(out: simt.DisjointSlice[f32, 2], mean: simt.DisjointSlice[f32],
                      rstd: simt.DisjointSlice[f32], inp: simt.Array[f32, 2], weight: simt.Array[f32],
                      bias: simt.Array[f32]):
    row = simt.warp.index_1d()                  # this warp owns out[row, :], mean[row], rstd[row]
    if row < inp.shape[0]:
        C = inp.shape[1]
        s = f32(0.0)
        for c in simt.warp.lanes(C):
            s += inp[row, c]
        m = simt.warp.sum(s) / f32(C)
        sq = f32(0.0)
        for c in simt.warp.lanes(C):
            d = inp[row, c] - m
            sq += d * d
        r = simt.rsqrt(simt.warp.sum(sq) / f32(C) + f32(EPS))
        mean[row] = m                           # once, by lane 0
        rstd[row] = r
        for c in simt.warp.lanes(C):
            out[row, c] = (inp[row, c] - m) * r * weight[c] + bias[c]


@simt.kernel(block=BWD_THREADS, min_cc=80,
             requires=["dinp.shape == inp.shape", "dout.shape == inp.shape", "inp.shape[1] > 0",
                       "inp.shape[1] <= 4096", "len(weight) == inp.shape[1]", "len(dweight) == inp.shape[1]",
                       "len(dbias) == inp.shape[1]", "len(mean) == inp.shape[0]", "len(rstd) == inp.shape[0]"])
def layernorm_backward(dinp: simt.DisjointSlice[f32, 2], dweight: simt.DisjointSlice[f32],
                       dbias: simt.DisjointSlice[f32], dout: simt.Array[f32, 2], inp: simt.Array[f32, 2],
                       weight: simt.Array[f32], mean: simt.Array[f32], rstd: simt.Array[f32]):
    N = inp.shape[0]
    C = inp.shape[1]
    with simt.unsafe():                         # shared partial sums of the block's rows
        part_dweight = simt.shared.array((MAX_CHANNELS,), f32)
        part_dbias = simt.shared.array((MAX_CHANNELS,), f32)
        for c in simt.block.threads(C):
            part_dweight[c] = f32(0.0)
            part_dbias[c] = f32(0.0)
        simt.sync_threads()
    row = simt.warp.index_1d()                  # this warp owns dinp[row, :]
    if row < N:
        m = mean[row]
        s = rstd[row]
        dnorm_sum = f32(0.0)
        dnorm_xhat_sum = f32(0.0)
        for c in simt.warp.lanes(C):
            xhat = (inp[row, c] - m) * s
            dnorm = weight[c] * dout[row, c]
            dnorm_sum += dnorm
            dnorm_xhat_sum += dnorm * xhat
        dnorm_mean = simt.warp.sum(dnorm_sum) / f32(C)
        dnorm_xhat_mean = simt.warp.sum(dnorm_xhat_sum) / f32(C)
        for c in simt.warp.lanes(C, unroll=4):
            g = dout[row, c]
            xhat = (inp[row, c] - m) * s
            dnorm = weight[c] * g
            with simt.unsafe():                 # the block's 16 warps add into the same columns
                simt.atomic.add(part_dbias, c, g)
                simt.atomic.add(part_dweight, c, xhat * g)
            dinp[row, c] += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s
    with simt.unsafe():                         # one global atomic per column and block
        simt.sync_threads()
        for c in simt.block.threads(C):
            simt.atomic.add(dweight, c, part_dweight[c])
            simt.atomic.add(dbias, c, part_dbias[c])
