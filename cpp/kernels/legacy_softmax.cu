// legacy_softmax: y[r, :] = softmax(x[r, :]) for C-contiguous (rows, cols) f32, numerically stable
// (subtracts the row max). The classic "one block per row" kernel: launch with grid=(rows,) and
// block=256. Blocks stride over rows, so any grid >= 1 is correct (a smaller grid is only slower).
// No KB_GRID_FROM: grid_from derives grid.x from an array's LAST axis (cols), not from rows.
#include "kernelbridge/kernel_contract.cuh"

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

struct Max { __device__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct Sum { __device__ float operator()(float a, float b) const { return a + b; } };

// Every thread of the block gets op over all threads' v. `scratch` holds kWarps floats.
template <class Op>
__device__ float block_all_reduce(float v, float* scratch, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFull, v, offset));
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < kWarps; ++w) v = op(v, scratch[w]);
  __syncthreads();  // scratch may be reused by the next call
  return v;
}
}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
legacy_softmax(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float scratch[kWarps];
  for (int row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + static_cast<size_t>(row) * cols;
    float* yr = y + static_cast<size_t>(row) * cols;
    float m = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, xr[c]);
    m = block_all_reduce(m, scratch, Max{});
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(xr[c] - m);
    s = block_all_reduce(s, scratch, Sum{});
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += kThreads) yr[c] = expf(xr[c] - m) * inv;
  }
}

KB_CONTRACT(legacy_softmax,
            KB_DOMAIN(1),
            KB_BLOCK(256),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(x, f32, 2, read),
                    KB_ARRAY(y, f32, 2, write),
                    KB_SCALAR(rows, i32),
                    KB_SCALAR(cols, i32)),
            KB_REQUIRES("x.shape == y.shape", "x.shape[0] == rows", "x.shape[1] == cols", "cols > 0"));
