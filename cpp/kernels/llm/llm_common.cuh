// What the GPT-2 training-step kernels of cpp/kernels/llm/ share: 16-byte packed accesses, warp and
// block reductions, and the tanh-approximated GELU. Each family (.cu) is its own translation unit and
// includes this header, so everything here is inline and lives in namespace kb_llm.
#pragma once

#include <cuda_bf16.h>

#include "kernelbridge/kernel_contract.cuh"

namespace kb_llm {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpSize = 32;

// Packed128<T>: 16 bytes of T moved by one 128-bit load or store (8 bf16 or 4 f32). The pointer must be
// 16-byte aligned: contracts of kernels using it declare align 16 (KB_ARRAY_EX(..., C, 16)) and the
// kernels take a packed access only where the element index is a multiple of kSize.
template <class T>
struct alignas(16) Packed128 {
  static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
  T payload[kSize];

  __device__ __forceinline__ T& operator[](int k) { return payload[k]; }
  __device__ __forceinline__ const T& operator[](int k) const { return payload[k]; }

  __device__ static __forceinline__ Packed128 load(const T* address) {
    Packed128 out;
    *reinterpret_cast<int4*>(out.payload) = *reinterpret_cast<const int4*>(address);
    return out;
  }
  __device__ __forceinline__ void store(T* address) const {
    *reinterpret_cast<int4*>(address) = *reinterpret_cast<const int4*>(payload);
  }
};

// Butterfly reductions: every lane of the (whole) warp ends with the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Every thread of the block gets the sum (or max) over all its threads. `scratch` holds one float per
// warp; the trailing barrier lets the caller reuse it at once. The block must be whole warps.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  const int warps = blockDim.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = threadIdx.x % kWarpSize < warps ? scratch[threadIdx.x % kWarpSize] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  const int warps = blockDim.x / kWarpSize;
  if (threadIdx.x % kWarpSize == 0) scratch[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  v = threadIdx.x % kWarpSize < warps ? scratch[threadIdx.x % kWarpSize] : -INFINITY;
  v = warp_max(v);
  __syncthreads();
  return v;
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), and its derivative.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  const float inner = kGeluScale * (x + kGeluCube * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float inner = kGeluScale * (x + kGeluCube * x * x * x);
  const float t = tanhf(inner);
  const float sech2 = 1.0f - t * t;
  return 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

// The first element index of this thread in a grid-stride loop over chunks of `per_thread`, and the stride.
__device__ __forceinline__ long long first_chunk(int per_thread) {
  return (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) * per_thread;
}
__device__ __forceinline__ long long chunk_stride(int per_thread) {
  return static_cast<long long>(gridDim.x) * blockDim.x * per_thread;
}

}  // namespace kb_llm
