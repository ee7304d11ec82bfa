// Squared global gradient norm of a GPT-2 training step: out[0] += sum(values^2) over a flat f32
// array (the host takes the square root for gradient clipping; zero out first, or call once per
// parameter tensor to sum their norms). Grid-stride loads, a block reduction (warp shuffles, one
// shared slot per warp) and one atomicAdd per block. Block 512; KB_GRID_FROM(values, 16) gives each
// thread about 16 values, but any grid >= 1 is correct. The grid is derived from the array the threads
// range over, never from the one-element out.
#include "llm_common.cuh"

namespace {
constexpr int kThreads = 512;
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
global_norm_squared(float* __restrict__ out, const float* __restrict__ values, long long n) {
  __shared__ float scratch[kThreads / kb_llm::kWarpSize];
  float acc = 0.0f;
  for (long long i = kb_llm::first_chunk(1); i < n; i += kb_llm::chunk_stride(1)) {
    const float x = values[i];
    acc = fmaf(x, x, acc);
  }
  acc = kb_llm::block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

KB_CONTRACT(global_norm_squared,
            KB_DOMAIN(1),
            KB_BLOCK(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(out, f32, 1, readwrite),
                    KB_ARRAY(values, f32, 1, read),
                    KB_SCALAR(n, i64)),
            KB_REQUIRES("len(out) == 1", "len(values) == n"),
            KB_GRID_FROM(values, 16));
