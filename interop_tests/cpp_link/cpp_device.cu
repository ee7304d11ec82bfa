// C++ side of the DSL -> C++ linking tests: a device function the DSL kernel calls.
extern "C" __device__ float cpp_affine(float x, float a, float b) { return fmaf(a, x, b); }
