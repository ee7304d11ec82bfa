// C++ side of the C++ -> DSL linking tests: a C++ kernel calling the DSL-exported dsl_softclip.
extern "C" __device__ float dsl_softclip(float v, float limit);

extern "C" __global__ void apply_softclip(const float* x, float limit, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = dsl_softclip(x[i], limit);
}
