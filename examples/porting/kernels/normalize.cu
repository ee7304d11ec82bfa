// Contrast stretch: out = clamp((v - lo) / (hi - lo), 0, 1), lo/hi chosen by the host from the histogram.
#include "kernelbridge/kernel_contract.cuh"

extern "C" __global__ void __launch_bounds__(256)
normalize(const float* __restrict__ v, float* __restrict__ out, float lo, float hi, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = fminf(fmaxf((v[i] - lo) / (hi - lo), 0.0f), 1.0f);
}

KB_CONTRACT(normalize,
            KB_BLOCK_MAX(256),
            KB_ARGS(KB_ARRAY(v, f32, 1, read),
                    KB_ARRAY(out, f32, 1, write),
                    KB_SCALAR(lo, f32),
                    KB_SCALAR(hi, f32),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(v) == n", "len(out) == n"),
            KB_GRID_FROM(out));
