// kernelbridge: the ONLY C++ code that talks to libcuda.
//
// Why dlopen: the extension must build and import on machines without a driver (CI). libcuda.so.1 is
// opened on first use and every entry point is resolved through cuGetProcAddress_v2 (dlsym fallback),
// at the API version of the cuda.h we compiled against, capped by the driver's version. cuda.h gives
// us types and prototypes only; we never link libcuda.
#pragma once

// cuda.h (types and prototypes only; CMake puts the toolkit headers on the include path).
#include <cuda.h>

#include <string>

namespace kb::drv {

// One member per driver entry point we use; prototypes come from cuda.h (macro-selected versions).
struct Api {
  decltype(&::cuInit) init;
  decltype(&::cuDriverGetVersion) driverGetVersion;
  decltype(&::cuGetErrorName) getErrorName;
  decltype(&::cuGetErrorString) getErrorString;
  decltype(&::cuDeviceGetCount) deviceGetCount;
  decltype(&::cuDeviceGet) deviceGet;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) devicePrimaryCtxRetain;
  decltype(&::cuCtxGetCurrent) ctxGetCurrent;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent;
  decltype(&::cuCtxGetDevice) ctxGetDevice;
  decltype(&::cuCtxSynchronize) ctxSynchronize;
  decltype(&::cuStreamCreate) streamCreate;
  decltype(&::cuStreamDestroy) streamDestroy;
  decltype(&::cuStreamSynchronize) streamSynchronize;
  decltype(&::cuStreamQuery) streamQuery;
  decltype(&::cuStreamWaitEvent) streamWaitEvent;
  decltype(&::cuEventCreate) eventCreate;
  decltype(&::cuEventDestroy) eventDestroy;
  decltype(&::cuEventRecord) eventRecord;
  decltype(&::cuEventQuery) eventQuery;
  decltype(&::cuEventSynchronize) eventSynchronize;
  decltype(&::cuEventElapsedTime) eventElapsedTime;
  decltype(&::cuLaunchKernel) launchKernel;
  decltype(&::cuMemHostAlloc) memHostAlloc;
  decltype(&::cuMemHostGetDevicePointer) memHostGetDevicePointer;
  decltype(&::cuMemFreeHost) memFreeHost;
  decltype(&::cuModuleLoadData) moduleLoadData;
  decltype(&::cuModuleLoadDataEx) moduleLoadDataEx;
  decltype(&::cuModuleUnload) moduleUnload;
  decltype(&::cuModuleGetFunction) moduleGetFunction;
  decltype(&::cuFuncGetAttribute) funcGetAttribute;
  decltype(&::cuFuncSetAttribute) funcSetAttribute;
  decltype(&::cuStreamBeginCapture) streamBeginCapture;
  decltype(&::cuStreamEndCapture) streamEndCapture;
  decltype(&::cuStreamIsCapturing) streamIsCapturing;
  decltype(&::cuGraphInstantiateWithFlags) graphInstantiate;
  decltype(&::cuGraphLaunch) graphLaunch;
  decltype(&::cuGraphExecDestroy) graphExecDestroy;
  decltype(&::cuGraphDestroy) graphDestroy;
  decltype(&::cuPointerGetAttribute) pointerGetAttribute;
  decltype(&::cuStreamGetCtx) streamGetCtx;
  decltype(&::cuDeviceCanAccessPeer) deviceCanAccessPeer;
  decltype(&::cuCtxEnablePeerAccess) ctxEnablePeerAccess;
  decltype(&::cuTensorMapEncodeTiled) tensorMapEncodeTiled;
  decltype(&::cuFuncGetParamInfo) funcGetParamInfo;
  // Launch features (pdl / cooperative / cluster: launch_features.hpp); optional, nullptr when the
  // driver lacks them: only kernels whose contracts use those features need them.
  decltype(&::cuLaunchKernelEx) launchKernelEx;
  decltype(&::cuOccupancyMaxActiveBlocksPerMultiprocessor) occupancyMaxActiveBlocksPerMultiprocessor;
  decltype(&::cuOccupancyMaxActiveClusters) occupancyMaxActiveClusters;
};

// The resolved API, or nullptr when there is no usable driver (then unavailable_reason() says why).
const Api* api();
const std::string& unavailable_reason();

// The resolved API; raises bridge.errors.NoDeviceError (as pybind11::error_already_set) when absent.
const Api& require();

// Raise bridge.errors.CudaError(call, code, name) (as pybind11::error_already_set). `call` may be a
// member name of Api ("streamQuery"); it is reported as the driver's name ("cuStreamQuery").
[[noreturn]] void throw_cuda_error(const char* call, CUresult r);
inline void check(CUresult r, const char* call) {
  if (r != CUDA_SUCCESS) throw_cuda_error(call, r);
}

// Retained primary context of `ordinal` (cached for the process; the one CuPy and PyTorch use).
CUcontext primary_context(int ordinal);
// Make the primary context of `ordinal` current on this thread if it is not already.
void ensure_current(int ordinal);

// Number of devices (cached; 0 without a driver).
int device_count();
// Ordinal of the device whose context is current on this thread; -1 when none is (or no driver).
int current_device();
// Ordinal of the device owning `ctx` (-1 when unknown); never changes the current context for long.
int context_device(CUcontext ctx);

// The primary context of `ordinal` current for a scope (multi-GPU: work for one device never leaves
// another device current behind it). The caller's context is restored at the end; when none was
// current, device 0's stays current (what the runtime's lazy initialisation would make current) and
// any other device's is removed again, so `current_device()` never changes as a side effect.
class ScopedDevice {
 public:
  // `known`: the primary context of `ordinal` when the caller has it already (saves the lookup).
  explicit ScopedDevice(int ordinal, CUcontext known = nullptr);
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  CUcontext saved_ = nullptr;
  bool restore_ = false;
};

}  // namespace kb::drv

// Call a driver entry point and raise CudaError naming it on failure, e.g. KB_CU(streamQuery, s).
#define KB_CU(member, ...) ::kb::drv::check(::kb::drv::require().member(__VA_ARGS__), #member)
