"""CUDA C++ sources with KB_CONTRACT declarations that the module-format tests compile into cubins,
PTX and fatbins (the reader, the decompression limits and the modules fuzz target)."""
from __future__ import annotations

HEADER = '#include "kernelbridge/kernel_contract.cuh"\n'

FILL = r'''extern "C" __global__ void __launch_bounds__(64) fill(float* y, float v, int n) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) y[i] = v;
}
KB_CONTRACT(fill, KB_BLOCK(64), KB_ARGS(KB_ARRAY(y, f32, 1, write), KB_SCALAR(v, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(y) == n"), KB_GRID_FROM(y));
'''

AXPB = r'''extern "C" __global__ void __launch_bounds__(128) axpb(const float* x, float* y, float a, float b, int n) {
  int i = blockIdx.x * 128 + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
KB_CONTRACT(axpb, KB_BLOCK(128), KB_ARGS(KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, write),
            KB_SCALAR(a, f32), KB_SCALAR(b, f32), KB_SCALAR(n, i32)),
            KB_REQUIRES("len(x) == n", "len(y) == n"), KB_GRID_FROM(y));
'''

BARE = 'extern "C" __global__ void bare(float* y) { y[0] = 1.0f; }\n'   # no contract
