// saxpy: y = a * x + y, in place on y. One thread per element; any block up to 1024 threads.
#include "kernelbridge/kernel_contract.cuh"

extern "C" __global__ void __launch_bounds__(1024)
saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaf(a, x[i], y[i]);
}

KB_CONTRACT(saxpy,
            KB_DOMAIN(1),
            KB_BLOCK_MAX(1024),
            KB_MIN_CC(80),
            KB_ARGS(KB_SCALAR(a, f32),
                    KB_ARRAY(x, f32, 1, read),
                    KB_ARRAY(y, f32, 1, readwrite),
                    KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n"),
            KB_GRID_FROM(y));
