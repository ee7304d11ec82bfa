// 256-bin histogram of values in [0, 1): bin = clamp(int(v * 256), 0, 255), one atomicAdd per value.
#include "kernelbridge/kernel_contract.cuh"

extern "C" __global__ void __launch_bounds__(256)
histogram256(const float* __restrict__ v, unsigned int* __restrict__ hist, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int b = min(max(static_cast<int>(v[i] * 256.0f), 0), 255);
  atomicAdd(&hist[b], 1u);
}

KB_CONTRACT(histogram256,
            KB_BLOCK(256),
            KB_ARGS(KB_ARRAY(v, f32, 1, read),
                    KB_ARRAY(hist, u32, 1, readwrite),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(v) == n", "len(hist) == 256"),
            KB_GRID_FROM(v));
