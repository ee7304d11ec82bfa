// Layer normalisation of a GPT-2 training step, a warp per row of a C-contiguous (N, C) f32 matrix
// (N = B*T tokens, C channels), eps 1e-5:
//   layernorm_forward:  out = (inp - mean) * rstd * weight + bias, and the row statistics mean, rstd
//                       (rstd = 1 / sqrt(var + eps)) that the backward pass reuses;
//   layernorm_backward: dinp += d(out)/d(inp) . dout, dweight += sum over rows of xhat * dout,
//                       dbias += sum over rows of dout (gradients accumulate, as in a training step).
// Block 256 = 8 warps, each warp owning one row at a time; the lanes stride over the row's columns and
// combine through butterfly shuffles (__shfl_xor_sync), so every lane holds the row's sums. Warps stride
// over the rows, so ANY grid >= 1 is correct; one block per 8 rows, grid = ceil(N / 8), is the fast
// one for the forward pass, and a few blocks per SM for the backward pass (fewer global atomics).
// The grid is the caller's (no KB_GRID_FROM: a derived grid follows an array's LAST axis, here C).
#include "llm_common.cuh"

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kb_llm::kWarpSize;
constexpr int kMaxChannels = 4096;  // the backward pass keeps 2 * C f32 partial sums in shared memory
constexpr float kEps = 1e-5f;
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
layernorm_forward(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                  const float* __restrict__ inp, const float* __restrict__ weight,
                  const float* __restrict__ bias, int N, int C) {
  const int lane = threadIdx.x % kb_llm::kWarpSize;
  const int warp = threadIdx.x / kb_llm::kWarpSize;
  for (long long row = static_cast<long long>(blockIdx.x) * kWarps + warp; row < N;
       row += static_cast<long long>(gridDim.x) * kWarps) {
    const float* x = inp + row * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += kb_llm::kWarpSize) sum += x[c];
    const float m = kb_llm::warp_sum(sum) / C;
    float sq = 0.0f;
    for (int c = lane; c < C; c += kb_llm::kWarpSize) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float s = rsqrtf(kb_llm::warp_sum(sq) / C + kEps);
    if (lane == 0) {
      mean[row] = m;
      rstd[row] = s;
    }
    float* o = out + row * C;
    for (int c = lane; c < C; c += kb_llm::kWarpSize) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  }
}

KB_CONTRACT(layernorm_forward,
            KB_DOMAIN(1),
            KB_BLOCK(256),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(out, f32, 2, write),
                    KB_ARRAY(mean, f32, 1, write),
                    KB_ARRAY(rstd, f32, 1, write),
                    KB_ARRAY(inp, f32, 2, read),
                    KB_ARRAY(weight, f32, 1, read),
                    KB_ARRAY(bias, f32, 1, read),
                    KB_SCALAR(N, i32),
                    KB_SCALAR(C, i32)),
            KB_REQUIRES("out.shape == inp.shape", "inp.shape[0] == N", "inp.shape[1] == C", "C > 0",
                        "len(mean) == N", "len(rstd) == N", "len(weight) == C", "len(bias) == C"));

// Per block: each warp adds its rows' dweight/dbias terms into shared partial sums (shared-memory
// atomics: the block's 8 warps touch the same columns), then the block adds them to the global
// dweight/dbias with one atomicAdd per column. dinp is written by the warp owning the row.
extern "C" __global__ void __launch_bounds__(kThreads)
layernorm_backward(float* __restrict__ dinp, float* __restrict__ dweight, float* __restrict__ dbias,
                   const float* __restrict__ dout, const float* __restrict__ inp,
                   const float* __restrict__ weight, const float* __restrict__ mean,
                   const float* __restrict__ rstd, int N, int C) {
  __shared__ float part_dweight[kMaxChannels];
  __shared__ float part_dbias[kMaxChannels];
  if (static_cast<long long>(blockIdx.x) * kWarps >= N) return;  // a block without rows adds nothing
  for (int c = threadIdx.x; c < C; c += kThreads) {
    part_dweight[c] = 0.0f;
    part_dbias[c] = 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x % kb_llm::kWarpSize;
  const int warp = threadIdx.x / kb_llm::kWarpSize;
  for (long long row = static_cast<long long>(blockIdx.x) * kWarps + warp; row < N;
       row += static_cast<long long>(gridDim.x) * kWarps) {
    const float* x = inp + row * C;
    const float* g = dout + row * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
    for (int c = lane; c < C; c += kb_llm::kWarpSize) {
      const float xhat = (x[c] - m) * s;
      const float dnorm = weight[c] * g[c];
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * xhat;
    }
    const float dnorm_mean = kb_llm::warp_sum(dnorm_sum) / C;
    const float dnorm_xhat_mean = kb_llm::warp_sum(dnorm_xhat_sum) / C;
    float* dx = dinp + row * C;
    for (int c = lane; c < C; c += kb_llm::kWarpSize) {
      const float xhat = (x[c] - m) * s;
      const float dnorm = weight[c] * g[c];
      atomicAdd(&part_dbias[c], g[c]);
      atomicAdd(&part_dweight[c], xhat * g[c]);
      dx[c] += (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s;
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += kThreads) {
    atomicAdd(&dweight[c], part_dweight[c]);
    atomicAdd(&dbias[c], part_dbias[c]);
  }
}

KB_CONTRACT(layernorm_backward,
            KB_DOMAIN(1),
            KB_BLOCK(256),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(dinp, f32, 2, readwrite),
                    KB_ARRAY(dweight, f32, 1, readwrite),
                    KB_ARRAY(dbias, f32, 1, readwrite),
                    KB_ARRAY(dout, f32, 2, read),
                    KB_ARRAY(inp, f32, 2, read),
                    KB_ARRAY(weight, f32, 1, read),
                    KB_ARRAY(mean, f32, 1, read),
                    KB_ARRAY(rstd, f32, 1, read),
                    KB_SCALAR(N, i32),
                    KB_SCALAR(C, i32)),
            KB_REQUIRES("dinp.shape == inp.shape", "dout.shape == inp.shape", "inp.shape[0] == N",
                        "inp.shape[1] == C", "C > 0", "C <= 4096", "len(weight) == C", "len(dweight) == C",
                        "len(dbias) == C", "len(mean) == N", "len(rstd) == N"));
