// Residual connection of a GPT-2 block: out = inp1 + inp2 on flat f32 arrays, 4 values per thread
// through 16-byte Packed128 loads and stores (a chunk that would run past N is done element by element,
// so N need not be a multiple of 4; the arrays must be 16-byte aligned, contract align 16). The threads
// stride over the array, so any grid >= 1 is correct; the derived grid gives each thread one chunk.
#include "llm_common.cuh"

namespace {
using PackedF32 = kb_llm::Packed128<float>;
constexpr int kPack = PackedF32::kSize;  // 4
}  // namespace

extern "C" __global__ void __launch_bounds__(512)
residual_forward(float* __restrict__ out, const float* __restrict__ inp1, const float* __restrict__ inp2, int N) {
  for (long long i = kb_llm::first_chunk(kPack); i < N; i += kb_llm::chunk_stride(kPack)) {
    if (i + kPack <= N) {
      const PackedF32 a = PackedF32::load(inp1 + i);
      const PackedF32 b = PackedF32::load(inp2 + i);
      PackedF32 y;
      for (int k = 0; k < kPack; ++k) y[k] = a[k] + b[k];
      y.store(out + i);
    } else {
      for (long long k = i; k < N; ++k) out[k] = inp1[k] + inp2[k];
    }
  }
}

KB_CONTRACT(residual_forward,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY_EX(out, f32, 1, write, C, 16),
                    KB_ARRAY_EX(inp1, f32, 1, read, C, 16),
                    KB_ARRAY_EX(inp2, f32, 1, read, C, 16),
                    KB_SCALAR(N, i32)),
            KB_REQUIRES("len(out) == N", "len(inp1) == N", "len(inp2) == N"),
            KB_GRID_FROM(out, 4));
