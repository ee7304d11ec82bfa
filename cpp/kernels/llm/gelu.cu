// GELU of a GPT-2 MLP (tanh approximation, llm_common.cuh), forward and backward, on flat arrays:
//   gelu_forward_bf16 / gelu_forward_f32:   out = gelu(inp)
//   gelu_backward_bf16 / gelu_backward_f32: dinp = gelu'(inp) * dout
// The bf16 kernels move 8 values per thread through one 16-byte Packed128 load per input and one store
// (math in f32, one rounding to bf16 at the store); a chunk that would run past N is done element by
// element, so N need not be a multiple of 8. Their arrays must be 16-byte aligned (contract align 16).
// The f32 kernels take one element per thread. All four stride over the array, so any grid >= 1 is
// correct; the derived grid (KB_GRID_FROM) gives each thread one chunk.
#include "llm_common.cuh"

namespace {
using bf16 = __nv_bfloat16;
using PackedBf16 = kb_llm::Packed128<bf16>;
constexpr int kPack = PackedBf16::kSize;  // 8
}  // namespace

extern "C" __global__ void __launch_bounds__(512)
gelu_forward_bf16(bf16* __restrict__ out, const bf16* __restrict__ inp, int N) {
  for (long long i = kb_llm::first_chunk(kPack); i < N; i += kb_llm::chunk_stride(kPack)) {
    if (i + kPack <= N) {
      const PackedBf16 x = PackedBf16::load(inp + i);
      PackedBf16 y;
      for (int k = 0; k < kPack; ++k) y[k] = __float2bfloat16(kb_llm::gelu(__bfloat162float(x[k])));
      y.store(out + i);
    } else {
      for (long long k = i; k < N; ++k) out[k] = __float2bfloat16(kb_llm::gelu(__bfloat162float(inp[k])));
    }
  }
}

KB_CONTRACT(gelu_forward_bf16,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY_EX(out, bf16, 1, write, C, 16),
                    KB_ARRAY_EX(inp, bf16, 1, read, C, 16),
                    KB_SCALAR(N, i32)),
            KB_REQUIRES("len(out) == N", "len(inp) == N"),
            KB_GRID_FROM(out, 8));

extern "C" __global__ void __launch_bounds__(512)
gelu_backward_bf16(bf16* __restrict__ dinp, const bf16* __restrict__ inp, const bf16* __restrict__ dout, int N) {
  for (long long i = kb_llm::first_chunk(kPack); i < N; i += kb_llm::chunk_stride(kPack)) {
    if (i + kPack <= N) {
      const PackedBf16 x = PackedBf16::load(inp + i);
      const PackedBf16 g = PackedBf16::load(dout + i);
      PackedBf16 d;
      for (int k = 0; k < kPack; ++k)
        d[k] = __float2bfloat16(kb_llm::gelu_grad(__bfloat162float(x[k])) * __bfloat162float(g[k]));
      d.store(dinp + i);
    } else {
      for (long long k = i; k < N; ++k)
        dinp[k] = __float2bfloat16(kb_llm::gelu_grad(__bfloat162float(inp[k])) * __bfloat162float(dout[k]));
    }
  }
}

KB_CONTRACT(gelu_backward_bf16,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY_EX(dinp, bf16, 1, write, C, 16),
                    KB_ARRAY_EX(inp, bf16, 1, read, C, 16),
                    KB_ARRAY_EX(dout, bf16, 1, read, C, 16),
                    KB_SCALAR(N, i32)),
            KB_REQUIRES("len(dinp) == N", "len(inp) == N", "len(dout) == N"),
            KB_GRID_FROM(dinp, 8));

extern "C" __global__ void __launch_bounds__(512)
gelu_forward_f32(float* __restrict__ out, const float* __restrict__ inp, int N) {
  for (long long i = kb_llm::first_chunk(1); i < N; i += kb_llm::chunk_stride(1)) out[i] = kb_llm::gelu(inp[i]);
}

KB_CONTRACT(gelu_forward_f32,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(out, f32, 1, write),
                    KB_ARRAY(inp, f32, 1, read),
                    KB_SCALAR(N, i32)),
            KB_REQUIRES("len(out) == N", "len(inp) == N"),
            KB_GRID_FROM(out));

extern "C" __global__ void __launch_bounds__(512)
gelu_backward_f32(float* __restrict__ dinp, const float* __restrict__ inp, const float* __restrict__ dout, int N) {
  for (long long i = kb_llm::first_chunk(1); i < N; i += kb_llm::chunk_stride(1))
    dinp[i] = kb_llm::gelu_grad(inp[i]) * dout[i];
}

KB_CONTRACT(gelu_backward_f32,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(dinp, f32, 1, write),
                    KB_ARRAY(inp, f32, 1, read),
                    KB_ARRAY(dout, f32, 1, read),
                    KB_SCALAR(N, i32)),
            KB_REQUIRES("len(dinp) == N", "len(inp) == N", "len(dout) == N"),
            KB_GRID_FROM(dinp));
