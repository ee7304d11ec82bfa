// C++ -> DSL: this CUDA C++ kernel calls dsl_softsign, a @simt.device(export="dsl_softsign") function.
extern "C" __device__ float dsl_softsign(float x, float k);

extern "C" __global__ void softsign_kernel(const float* x, float k, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = dsl_softsign(x[i], k);
}
