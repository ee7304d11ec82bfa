// Test kernels of the runtime tests (interop_tests/runtime). rt_kernels.ptx is generated from this file:
//   nvcc -ptx -arch=compute_80 -o rt_kernels.ptx rt_kernels.cu
// The tests load the PTX with JSON contracts written in the tests (no contract macros here on purpose).

// pointer abi: out[i] = a[i] + b[i] for i < n
extern "C" __global__ void vecadd(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// same body, compiled with launch bounds 256: its max_threads_per_block attribute is 256
extern "C" __global__ void __launch_bounds__(256) vecadd_lb256(const float* a, const float* b, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// view abi, 2-D: out[i, j] = a[i, j] * s + c; extents and strides in ELEMENTS (any strides)
extern "C" __global__ void scale2d(const float* a, long long a_n0, long long a_n1, long long a_s0,
                                   long long a_s1, float* out, long long o_n0, long long o_n1,
                                   long long o_s0, long long o_s1, float s, double c) {
  long long j = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  long long i = blockIdx.y * (long long)blockDim.y + threadIdx.y;
  if (i < o_n0 && j < o_n1) out[i * o_s0 + j * o_s1] = a[i * a_s0 + j * a_s1] * s + (float)c;
}

// deliberately slow producer: spin `cycles` clock ticks, then out[i] = v * (i + 1)
extern "C" __global__ void spin_fill(float* out, int n, float v, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = v * (float)(i + 1);
}

// deliberately slow reader: spin `cycles` clock ticks, then out[i] = a[i]
extern "C" __global__ void spin_copy(const float* a, float* out, int n, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i];
}

// dynamic shared memory user: out[i] = a[i] staged through smem (block-sized)
extern "C" __global__ void smem_copy(const float* a, float* out, int n) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? a[i] : 0.f;
  __syncthreads();
  if (i < n) out[i] = buf[threadIdx.x];
}

// run-time bounds check as the DSL emits it: on failure set the fault record (atom.cas 0 -> 1), fill
// site/index/extent, return (no trap). Params: data as a 1-D view, out as a 1-D view, idx, then the
// fault-record pointer the launcher appends.
struct FaultRecord { unsigned flag; unsigned site; long long index; long long extent; };
extern "C" __global__ void checked_get(const float* data, long long n, long long stride, float* out,
                                       long long n_out, long long s_out, long long idx,
                                       FaultRecord* rec) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (idx < 0 || idx >= n) {
    if (atomicCAS(&rec->flag, 0u, 1u) == 0u) {
      rec->site = 7u;
      rec->index = idx;
      rec->extent = n;
      __threadfence_system();
    }
    return;
  }
  out[0] = data[idx * stride];
}
