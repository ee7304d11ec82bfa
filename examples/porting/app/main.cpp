// The porting example's application: blur -> histogram -> contrast stretch on a synthetic image.
//
// The kernels live in porting_kernels.fatbin (kernels/*.cu, built by kernelbridge_add_cuda_module) and
// are launched with the CUDA driver API, the way many existing applications do. PORTING_STEP selects how
// many of them come from the DSL instead, through the AOT header `dsl_kernels_kernels.h`:
//   0: all C++   1: blur from the DSL   2: blur + histogram from the DSL   3: all three from the DSL
// Usage: porting_app <porting_kernels.fatbin> <rows> <cols> <out.bin>
// Prints the max difference to the CPU reference and writes the normalised image + histogram to out.bin
// (and the input image to out.bin.input, so that run_porting.py can feed the same pixels from Python).
#include <cuda.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#ifndef PORTING_STEP
#define PORTING_STEP 0
#endif
#if PORTING_STEP > 0
#include "dsl_kernels_kernels.h"
#endif

#define CU(call)                                                                      \
  do {                                                                                \
    CUresult r_ = (call);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                         \
      const char* n_ = nullptr;                                                       \
      cuGetErrorName(r_, &n_);                                                        \
      std::fprintf(stderr, "%s failed: %s\n", #call, n_ ? n_ : "?");                  \
      std::exit(3);                                                                   \
    }                                                                                 \
  } while (0)

#if PORTING_STEP > 0
static void check(const dsl_kernels_kernels::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s refused (code %d): %s\n", what, s.code, s.message.c_str());
    std::exit(4);
  }
}
#endif

// --- the CPU reference: the same float operations in the same order --------------------------------
static void reference(const std::vector<float>& img, int rows, int cols, std::vector<float>& blurred,
                      std::vector<uint32_t>& hist, std::vector<float>& out, float& lo, float& hi);

// Contrast limits from the histogram: the 1st and 99th percentiles, at bin granularity.
static void limits(const std::vector<uint32_t>& hist, long long n, float& lo, float& hi) {
  long long acc = 0;
  int b_lo = 0, b_hi = 255;
  for (int b = 0; b < 256; ++b) {
    acc += hist[b];
    if (acc * 100 < n) b_lo = b + 1;
    if (acc * 100 <= n * 99) b_hi = b + 1;
  }
  b_hi = std::max(b_hi, b_lo + 1);
  lo = static_cast<float>(b_lo) / 256.0f;
  hi = static_cast<float>(std::min(b_hi, 256)) / 256.0f;
}

static void reference(const std::vector<float>& img, int rows, int cols, std::vector<float>& blurred,
                      std::vector<uint32_t>& hist, std::vector<float>& out, float& lo, float& hi) {
  blurred.assign(img.size(), 0.0f);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      float s = 0.0f;
      for (int dr = -1; dr <= 1; ++dr)
        for (int dc = -1; dc <= 1; ++dc)
          s += img[static_cast<size_t>(std::min(std::max(r + dr, 0), rows - 1)) * cols +
                   std::min(std::max(c + dc, 0), cols - 1)];
      blurred[static_cast<size_t>(r) * cols + c] = s / 9.0f;
    }
  hist.assign(256, 0);
  for (float v : blurred) hist[std::min(std::max(static_cast<int>(v * 256.0f), 0), 255)]++;
  limits(hist, static_cast<long long>(blurred.size()), lo, hi);
  out.resize(blurred.size());
  for (size_t i = 0; i < blurred.size(); ++i)
    out[i] = std::fmin(std::fmax((blurred[i] - lo) / (hi - lo), 0.0f), 1.0f);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <porting_kernels.fatbin> <rows> <cols> <out.bin>\n", argv[0]);
    return 2;
  }
  int rows = std::atoi(argv[2]), cols = std::atoi(argv[3]);
  int n = rows * cols;
  std::vector<float> img(n);
  uint32_t s = 2024u;                          // a smooth gradient plus noise, values in [0, 1)
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      s = s * 1664525u + 1013904223u;
      const float noise = static_cast<float>(s >> 8) * (1.0f / 16777216.0f);
      img[static_cast<size_t>(r) * cols + c] = 0.6f * (static_cast<float>(r + c) / static_cast<float>(rows + cols)) + 0.35f * noise;
    }

  CU(cuInit(0));
  CUdevice dev;
  CUcontext ctx;
  CU(cuDeviceGet(&dev, 0));
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  CUstream stream;
  CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  std::ifstream f(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (image.empty()) { std::fprintf(stderr, "cannot read %s\n", argv[1]); return 2; }
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image.data()));
  CUfunction k_blur, k_hist, k_norm;
  CU(cuModuleGetFunction(&k_blur, mod, "blur3x3"));
  CU(cuModuleGetFunction(&k_hist, mod, "histogram256"));
  CU(cuModuleGetFunction(&k_norm, mod, "normalize"));

  CUdeviceptr d_img, d_blur, d_hist, d_out;
  CU(cuMemAlloc(&d_img, n * sizeof(float)));
  CU(cuMemAlloc(&d_blur, n * sizeof(float)));
  CU(cuMemAlloc(&d_hist, 256 * sizeof(uint32_t)));
  CU(cuMemAlloc(&d_out, n * sizeof(float)));
  CU(cuMemcpyHtoDAsync(d_img, img.data(), n * sizeof(float), stream));
  CU(cuMemsetD32Async(d_hist, 0, 256, stream));

  // 1. blur
#if PORTING_STEP >= 1
  check(dsl_kernels_kernels::blur3x3(reinterpret_cast<const float*>(d_img), rows, cols,
                                     reinterpret_cast<float*>(d_blur), rows, cols, stream), "blur3x3");
#else
  {
    void* p[] = {&d_img, &d_blur, &rows, &cols};
    CU(cuLaunchKernel(k_blur, (cols + 15) / 16, (rows + 15) / 16, 1, 16, 16, 1, 0, stream, p, nullptr));
  }
#endif
  // 2. histogram
#if PORTING_STEP >= 2
  check(dsl_kernels_kernels::histogram256(reinterpret_cast<const float*>(d_blur), n,
                                          reinterpret_cast<uint32_t*>(d_hist), 256, stream,
                                          dsl_kernels_kernels::Grid{(n + 255) / 256, 1, 1}), "histogram256");
#else
  {
    void* p[] = {&d_blur, &d_hist, &n};
    CU(cuLaunchKernel(k_hist, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, p, nullptr));
  }
#endif
  std::vector<uint32_t> hist(256);
  CU(cuMemcpyDtoHAsync(hist.data(), d_hist, 256 * sizeof(uint32_t), stream));
  CU(cuStreamSynchronize(stream));
  float lo, hi;
  limits(hist, n, lo, hi);
  // 3. contrast stretch
#if PORTING_STEP >= 3
  check(dsl_kernels_kernels::normalize(reinterpret_cast<const float*>(d_blur), n, lo, hi,
                                       reinterpret_cast<float*>(d_out), n, stream), "normalize");
#else
  {
    void* p[] = {&d_blur, &d_out, &lo, &hi, &n};
    CU(cuLaunchKernel(k_norm, (n + 255) / 256, 1, 1, 256, 1, 1, 0, stream, p, nullptr));
  }
#endif
  std::vector<float> out(n);
  CU(cuMemcpyDtoHAsync(out.data(), d_out, n * sizeof(float), stream));
  CU(cuStreamSynchronize(stream));
#if PORTING_STEP > 0
  check(dsl_kernels_kernels::check_faults(stream), "DSL kernels");
#endif

  std::vector<float> ref_blur, ref_out;
  std::vector<uint32_t> ref_hist;
  float ref_lo, ref_hi;
  reference(img, rows, cols, ref_blur, ref_hist, ref_out, ref_lo, ref_hi);
  double maxdiff = 0.0;
  for (int i = 0; i < n; ++i) maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(out[i]) - ref_out[i]));
  const bool hist_ok = hist == ref_hist;
  std::printf("step %d: lo=%.6f hi=%.6f hist_equal=%d max_abs_diff=%.3g\n", PORTING_STEP, lo, hi, hist_ok ? 1 : 0,
              maxdiff);

  std::ofstream in_copy(std::string(argv[4]) + ".input", std::ios::binary);   // for run_porting.py
  in_copy.write(reinterpret_cast<const char*>(img.data()), n * sizeof(float));
  std::ofstream o(argv[4], std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()), n * sizeof(float));
  o.write(reinterpret_cast<const char*>(hist.data()), 256 * sizeof(uint32_t));
  CU(cuMemFree(d_img)); CU(cuMemFree(d_blur)); CU(cuMemFree(d_hist)); CU(cuMemFree(d_out));
  CU(cuStreamDestroy(stream));
  return hist_ok && maxdiff <= 1e-6 ? 0 : 1;
}
