// block_reduce_sum: *out += sum(x). Grid-stride loads, warp shuffles, one shared slot per warp, and
// one atomicAdd per block; out is accumulated into (zero it first for a plain sum). Exact block 256;
// KB_GRID_FROM(x, 4) gives each thread about 4 elements, but any grid >= 1 is correct.
// The grid is derived from x, the array the threads range over (the grid-stride loop starts at the
// global thread id), never from out: one element would give one block (docs/cpp.md, KB_GRID_FROM).
#include "kernelbridge/kernel_contract.cuh"

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(kFull, v, offset);
  return v;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
block_reduce_sum(const float* __restrict__ x, float* __restrict__ out, int n) {
  __shared__ float warp_sums[kWarps];
  float acc = 0.0f;
  const long long stride = static_cast<long long>(gridDim.x) * kThreads;
  for (long long i = static_cast<long long>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) acc += x[i];
  acc = warp_sum(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = warp_sum(lane < kWarps ? warp_sums[lane] : 0.0f);
    if (lane == 0) atomicAdd(out, acc);
  }
}

KB_CONTRACT(block_reduce_sum,
            KB_DOMAIN(1),
            KB_BLOCK(256),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(x, f32, 1, read),
                    KB_ARRAY(out, f32, 1, readwrite),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(out) == 1"),
            KB_GRID_FROM(x, 4));
