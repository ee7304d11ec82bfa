// Host program for the AOT tests: runs the generated launchers on the GPU, prints results as text.
// Compiled with nvcc on CPU (test_aot_header_compiles), run on a GPU (test_aot_launcher_gpu).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "aot_kernels_src_kernels.h"

namespace k = aot_kernels_src_kernels;

#define CHECK_CU(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { std::printf("CUDA %d at %s\n", (int)r_, #x); return 3; } } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000;
  CHECK_CU(cuInit(0));
  CUdevice dev; CUcontext ctx;
  CHECK_CU(cuDeviceGet(&dev, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK_CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<float> x(n), y(n), out(n, -7.0f);
  unsigned s = 12345u;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u; x[i] = (s >> 8) * (1.0f / 16777216.0f) - 0.5f;
    s = s * 1664525u + 1013904223u; y[i] = (s >> 8) * (1.0f / 16777216.0f) + 0.25f;
  }
  CUdeviceptr dx, dy, dout;
  CHECK_CU(cuMemAlloc(&dx, n * 4)); CHECK_CU(cuMemAlloc(&dy, n * 4)); CHECK_CU(cuMemAlloc(&dout, (n + 1) * 4));
  CHECK_CU(cuMemcpyHtoD(dx, x.data(), n * 4)); CHECK_CU(cuMemcpyHtoD(dy, y.data(), n * 4));
  CHECK_CU(cuMemcpyHtoD(dout, out.data(), n * 4));
  auto* px = reinterpret_cast<const float*>(dx);
  auto* py = reinterpret_cast<const float*>(dy);
  auto* pout = reinterpret_cast<float*>(dout);
  // 1. a correct launch
  k::Status st = k::scale_add(px, n, py, n, 2.5f, pout, n, stream);
  std::printf("launch code=%d msg=%s\n", st.code, st.message.c_str());
  if (!st.ok()) return 1;
  st = k::check_faults(stream);
  std::printf("faults code=%d\n", st.code);
  CHECK_CU(cuMemcpyDtoH(out.data(), dout, n * 4));
  double maxerr = 0;
  for (int i = 0; i < n; ++i) {
    double e = std::abs(static_cast<double>(out[i]) - (2.5 * x[i] + y[i]));
    if (e > maxerr) maxerr = e;
  }
  std::printf("maxerr=%.3g\n", maxerr);
  // 2. a violating launch: out has n + 1 elements, the contract needs len(out) == len(x)
  std::vector<float> poison(n + 1, 123.0f);
  CHECK_CU(cuMemcpyHtoD(dout, poison.data(), (n + 1) * 4));
  st = k::scale_add(px, n, py, n, 2.5f, pout, n + 1, stream);
  std::printf("violation code=%d arg=%s msg=%s\n", st.code, st.arg_name.c_str(), st.message.c_str());
  CHECK_CU(cuStreamSynchronize(stream));
  std::vector<float> after(n + 1);
  CHECK_CU(cuMemcpyDtoH(after.data(), dout, (n + 1) * 4));
  bool unchanged = true;
  for (int i = 0; i <= n; ++i) unchanged = unchanged && after[i] == 123.0f;
  std::printf("poison_unchanged=%d\n", unchanged ? 1 : 0);
  std::printf("shape_relation_code=%d\n", static_cast<int>(kb::ErrorCode::shape_relation));
  // 3. a run-time bounds fault: offset_i32 reads x[i] for every i < len(out), x is shorter
  CUdeviceptr dxi, douti;
  CHECK_CU(cuMemAlloc(&dxi, (n / 2) * 4)); CHECK_CU(cuMemAlloc(&douti, n * 4));
  CHECK_CU(cuMemsetD32(dxi, 5, n / 2));
  st = k::offset_i32(reinterpret_cast<const int32_t*>(dxi), n / 2, 7, reinterpret_cast<int32_t*>(douti), n, stream);
  std::printf("fault_launch code=%d\n", st.code);
  st = k::check_faults(stream);
  std::printf("fault code=%d arg=%s msg=%s\n", st.code, st.arg_name.c_str(), st.message.c_str());
  st = k::check_faults(stream);
  std::printf("fault_cleared code=%d\n", st.code);
  return 0;
}
