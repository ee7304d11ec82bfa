// Fused softmax + cross-entropy of GPT-2's classifier, a block per row of the logits (N, Vp) f32,
// N = B*T tokens, V real vocabulary entries padded to Vp columns (50257 -> 50304; the padding columns
// are ignored), targets (N) i32:
//   crossentropy_forward:  losses[r] = logsumexp(logits[r, :V]) - logits[r, targets[r]]
//   crossentropy_backward: dlogits[r, c] = (softmax(logits[r, :V])[c] - (c == targets[r])) * dlosses[r]
//                          for c < V, and 0 for the padding columns V <= c < Vp.
// Each thread keeps an online (max, sum of exp) over its columns, the block combines them (warp
// shuffles, one shared slot per warp), so the forward pass reads each logit once; the backward pass
// recomputes the statistics and then writes the row. A target outside [0, V) gives a NaN loss and NaN
// in the row's V dlogits (the kernels never read outside the row). Block 1024; blocks stride over the rows,
// so any grid >= 1 is correct; grid = (N,) is the fast one. The grid is the caller's (a derived grid
// would follow the logits' last axis, Vp).
#include "llm_common.cuh"

namespace {
constexpr int kThreads = 1024;
constexpr float kNaN = __builtin_nanf("");

struct RowStats {
  float max;  // max over the row's V logits
  float sum;  // sum of exp(logit - max)
};

// The softmax statistics of one row; every thread of the block gets them. `scratch`: one float a warp.
__device__ RowStats row_stats(const float* __restrict__ x, int V, float* scratch) {
  float m = -INFINITY, s = 0.0f;
  for (int c = threadIdx.x; c < V; c += kThreads) {
    const float v = x[c];
    if (v > m) {
      s = s * expf(m - v) + 1.0f;
      m = v;
    } else {
      s += expf(v - m);
    }
  }
  const float row_max = kb_llm::block_max(m, scratch);
  const float row_sum = kb_llm::block_sum(s == 0.0f ? 0.0f : s * expf(m - row_max), scratch);
  return {row_max, row_sum};
}
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
crossentropy_forward(float* __restrict__ losses, const float* __restrict__ logits, const int* __restrict__ targets,
                     int N, int V, int Vp) {
  __shared__ float scratch[kThreads / kb_llm::kWarpSize];
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const float* x = logits + static_cast<long long>(row) * Vp;
    const RowStats st = row_stats(x, V, scratch);
    if (threadIdx.x == 0) {
      const int t = targets[row];
      losses[row] = (t >= 0 && t < V) ? logf(st.sum) + st.max - x[t] : kNaN;
    }
  }
}

KB_CONTRACT(crossentropy_forward,
            KB_DOMAIN(1),
            KB_BLOCK(1024),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(losses, f32, 1, write),
                    KB_ARRAY(logits, f32, 2, read),
                    KB_ARRAY(targets, i32, 1, read),
                    KB_SCALAR(N, i32),
                    KB_SCALAR(V, i32),
                    KB_SCALAR(Vp, i32)),
            KB_REQUIRES("logits.shape[0] == N", "logits.shape[1] == Vp", "len(losses) == N",
                        "len(targets) == N", "V > 0", "V <= Vp"));

extern "C" __global__ void __launch_bounds__(kThreads)
crossentropy_backward(float* __restrict__ dlogits, const float* __restrict__ logits,
                      const float* __restrict__ dlosses, const int* __restrict__ targets, int N, int V, int Vp) {
  __shared__ float scratch[kThreads / kb_llm::kWarpSize];
  for (int row = blockIdx.x; row < N; row += gridDim.x) {
    const long long base = static_cast<long long>(row) * Vp;
    const RowStats st = row_stats(logits + base, V, scratch);
    const int t = targets[row];
    const float scale = (t >= 0 && t < V) ? dlosses[row] / st.sum : kNaN;
    const float g = dlosses[row];
    for (int c = threadIdx.x; c < Vp; c += kThreads) {
      float d = 0.0f;
      if (c < V) d = expf(logits[base + c] - st.max) * scale - (c == t ? g : 0.0f);
      dlogits[base + c] = d;
    }
  }
}

KB_CONTRACT(crossentropy_backward,
            KB_DOMAIN(1),
            KB_BLOCK(1024),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(dlogits, f32, 2, write),
                    KB_ARRAY(logits, f32, 2, read),
                    KB_ARRAY(dlosses, f32, 1, read),
                    KB_ARRAY(targets, i32, 1, read),
                    KB_SCALAR(N, i32),
                    KB_SCALAR(V, i32),
                    KB_SCALAR(Vp, i32)),
            KB_REQUIRES("dlogits.shape == logits.shape", "logits.shape[0] == N", "logits.shape[1] == Vp",
                        "len(dlosses) == N", "len(targets) == N", "V > 0", "V <= Vp"));
