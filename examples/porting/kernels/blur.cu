// 3x3 box blur with clamp-to-edge borders: out[r][c] = mean of the 9 neighbours of img[r][c].
#include "kernelbridge/kernel_contract.cuh"

extern "C" __global__ void __launch_bounds__(256)
blur3x3(const float* __restrict__ img, float* __restrict__ out, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y * blockDim.y + threadIdx.y;
  if (r >= rows || c >= cols) return;
  float s = 0.0f;
  for (int dr = -1; dr <= 1; ++dr) {
    for (int dc = -1; dc <= 1; ++dc) {
      const int rr = min(max(r + dr, 0), rows - 1);
      const int cc = min(max(c + dc, 0), cols - 1);
      s += img[static_cast<long long>(rr) * cols + cc];
    }
  }
  out[static_cast<long long>(r) * cols + c] = s / 9.0f;
}

KB_CONTRACT(blur3x3,
            KB_DOMAIN(2),
            KB_BLOCK(16, 16),
            KB_ARGS(KB_ARRAY(img, f32, 2, read),
                    KB_ARRAY(out, f32, 2, write),
                    KB_SCALAR(rows, i32),
                    KB_SCALAR(cols, i32)),
            KB_REQUIRES("img.shape[0] == rows", "img.shape[1] == cols",
                        "out.shape[0] == rows", "out.shape[1] == cols"),
            KB_GRID_FROM(out));
