// transpose: out = in.T for a C-contiguous (rows, cols) f32 matrix, through a 32x32 shared-memory tile
// padded to 33 columns (no bank conflicts). Block (32, 8): each thread moves 4 elements per tile.
// Grid (ceil(cols/32), ceil(rows/32)) = KB_GRID_FROM(in, 1, 4): x over in's columns, y over its rows.
#include "kernelbridge/kernel_contract.cuh"

namespace {
constexpr int kTile = 32;
constexpr int kRows = 8;  // blockDim.y
}  // namespace

extern "C" __global__ void __launch_bounds__(kTile * kRows)
transpose(const float* __restrict__ in, float* __restrict__ out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];
  const int col0 = blockIdx.x * kTile;
  const int row0 = blockIdx.y * kTile;
  for (int j = threadIdx.y; j < kTile; j += kRows) {
    const int r = row0 + j, c = col0 + threadIdx.x;
    if (r < rows && c < cols) tile[j][threadIdx.x] = in[static_cast<size_t>(r) * cols + c];
  }
  __syncthreads();
  for (int j = threadIdx.y; j < kTile; j += kRows) {
    const int out_row = col0 + j, out_col = row0 + threadIdx.x;  // out is (cols, rows)
    if (out_row < cols && out_col < rows) out[static_cast<size_t>(out_row) * rows + out_col] = tile[threadIdx.x][j];
  }
}

KB_CONTRACT(transpose,
            KB_DOMAIN(2),
            KB_BLOCK(32, 8),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(in, f32, 2, read),
                    KB_ARRAY(out, f32, 2, write),
                    KB_SCALAR(rows, i32),
                    KB_SCALAR(cols, i32)),
            KB_REQUIRES("in.shape[0] == rows", "in.shape[1] == cols",
                        "out.shape[0] == cols", "out.shape[1] == rows"),
            KB_GRID_FROM(in, 1, 4));
