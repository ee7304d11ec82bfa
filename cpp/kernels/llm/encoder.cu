// Token + position embedding of GPT-2, forward and backward, for token ids inp (B, T) i32, token
// embeddings wte (V, C), position embeddings wpe (maxT, C) with maxT >= T, activations (B, T, C), f32:
//   encoder_forward:  out[b, t, :] = wte[inp[b, t], :] + wpe[t, :]
//   encoder_backward: dwte[inp[b, t], :] += dout[b, t, :] and dwpe[t, :] += dout[b, t, :] through
//                     atomicAdd (many tokens share an id, all batches share a position).
// Token ids are data the contract cannot check, so the kernels do: a token outside [0, V) gives a NaN
// row in out and adds nothing to dwte (never a read or write outside wte / dwte).
// encoder_forward moves 4 values per thread through 16-byte Packed128 accesses when C is a multiple of
// 4 (then a chunk never crosses a row), else one value per step; arrays must be 16-byte aligned.
// Both kernels stride over the B*T*C values, so any grid >= 1 is correct. The grid is the caller's (a
// derived grid would follow out's last axis, C): ceil(B*T*C / (4 * block)) for the forward pass,
// ceil(B*T*C / block) for the backward pass.
#include "llm_common.cuh"

namespace {
using PackedF32 = kb_llm::Packed128<float>;
constexpr int kPack = PackedF32::kSize;  // 4

__device__ __forceinline__ bool valid_token(int ix, int V) { return ix >= 0 && ix < V; }

// The row/column split of flat index i costs a division; Index is 32-bit whenever B*T*C fits (a 64-bit
// division is emulated in software, several times slower).
template <class Index>
__device__ __forceinline__ void encoder_forward_body(float* __restrict__ out, const int* __restrict__ inp,
                                                     const float* __restrict__ wte, const float* __restrict__ wpe,
                                                     Index total, int T, int C, int V) {
  const int per = C % kPack == 0 ? kPack : 1;  // uniform over the grid
  for (long long j = kb_llm::first_chunk(per); j < total; j += kb_llm::chunk_stride(per)) {
    const Index i = static_cast<Index>(j);
    const Index bt = i / static_cast<Index>(C);
    const int c = static_cast<int>(i - bt * static_cast<Index>(C));
    const int t = static_cast<int>(bt % static_cast<Index>(T));
    const int ix = inp[bt];
    const bool ok = valid_token(ix, V);
    if (per == kPack) {
      PackedF32 y;
      if (ok) {
        const PackedF32 a = PackedF32::load(wte + static_cast<long long>(ix) * C + c);
        const PackedF32 p = PackedF32::load(wpe + static_cast<long long>(t) * C + c);
        for (int k = 0; k < kPack; ++k) y[k] = a[k] + p[k];
      } else {
        for (int k = 0; k < kPack; ++k) y[k] = __int_as_float(0x7fc00000);  // quiet NaN
      }
      y.store(out + i);
    } else {
      out[i] = ok ? wte[static_cast<long long>(ix) * C + c] + wpe[static_cast<long long>(t) * C + c]
                  : __int_as_float(0x7fc00000);
    }
  }
}

template <class Index>
__device__ __forceinline__ void encoder_backward_body(float* __restrict__ dwte, float* __restrict__ dwpe,
                                                      const float* __restrict__ dout, const int* __restrict__ inp,
                                                      Index total, int T, int C, int V) {
  for (long long j = kb_llm::first_chunk(1); j < total; j += kb_llm::chunk_stride(1)) {
    const Index i = static_cast<Index>(j);
    const Index bt = i / static_cast<Index>(C);
    const int c = static_cast<int>(i - bt * static_cast<Index>(C));
    const int t = static_cast<int>(bt % static_cast<Index>(T));
    const int ix = inp[bt];
    const float g = dout[i];
    if (valid_token(ix, V)) atomicAdd(&dwte[static_cast<long long>(ix) * C + c], g);
    atomicAdd(&dwpe[static_cast<long long>(t) * C + c], g);
  }
}

constexpr long long kMax32 = 0xffffffffLL;
}  // namespace

extern "C" __global__ void __launch_bounds__(512)
encoder_forward(float* __restrict__ out, const int* __restrict__ inp, const float* __restrict__ wte,
                const float* __restrict__ wpe, int B, int T, int C, int V) {
  const long long total = static_cast<long long>(B) * T * C;
  if (total <= kMax32) encoder_forward_body<unsigned>(out, inp, wte, wpe, static_cast<unsigned>(total), T, C, V);
  else encoder_forward_body<long long>(out, inp, wte, wpe, total, T, C, V);
}

KB_CONTRACT(encoder_forward,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY_EX(out, f32, 3, write, C, 16),
                    KB_ARRAY(inp, i32, 2, read),
                    KB_ARRAY_EX(wte, f32, 2, read, C, 16),
                    KB_ARRAY_EX(wpe, f32, 2, read, C, 16),
                    KB_SCALAR(B, i32),
                    KB_SCALAR(T, i32),
                    KB_SCALAR(C, i32),
                    KB_SCALAR(V, i32)),
            KB_REQUIRES("out.shape[0] == B", "out.shape[1] == T", "out.shape[2] == C", "inp.shape[0] == B",
                        "inp.shape[1] == T", "wte.shape[0] == V", "wte.shape[1] == C", "wpe.shape[1] == C",
                        "wpe.shape[0] >= T"));

extern "C" __global__ void __launch_bounds__(512)
encoder_backward(float* __restrict__ dwte, float* __restrict__ dwpe, const float* __restrict__ dout,
                 const int* __restrict__ inp, int B, int T, int C, int V) {
  const long long total = static_cast<long long>(B) * T * C;
  if (total <= kMax32) encoder_backward_body<unsigned>(dwte, dwpe, dout, inp, static_cast<unsigned>(total), T, C, V);
  else encoder_backward_body<long long>(dwte, dwpe, dout, inp, total, T, C, V);
}

KB_CONTRACT(encoder_backward,
            KB_BLOCK_MAX(512),
            KB_MIN_CC(80),
            KB_ARGS(KB_ARRAY(dwte, f32, 2, readwrite),
                    KB_ARRAY(dwpe, f32, 2, readwrite),
                    KB_ARRAY(dout, f32, 3, read),
                    KB_ARRAY(inp, i32, 2, read),
                    KB_SCALAR(B, i32),
                    KB_SCALAR(T, i32),
                    KB_SCALAR(C, i32),
                    KB_SCALAR(V, i32)),
            KB_REQUIRES("dout.shape[0] == B", "dout.shape[1] == T", "dout.shape[2] == C", "inp.shape[0] == B",
                        "inp.shape[1] == T", "dwte.shape[0] == V", "dwte.shape[1] == C", "dwpe.shape[1] == C",
                        "dwpe.shape[0] >= T"));
