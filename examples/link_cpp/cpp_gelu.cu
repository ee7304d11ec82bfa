// DSL -> C++: the DSL kernel of examples/link_cpp_device.py calls cpp_gelu (declared with simt.extern_device).
extern "C" __device__ float cpp_gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}
