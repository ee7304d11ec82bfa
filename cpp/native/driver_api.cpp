// libcuda, opened lazily with dlopen; see driver_api.hpp for why.
#include "driver_api.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <mutex>
#include <vector>

#include "intake.hpp"
#include "native.hpp"

namespace py = pybind11;

namespace kb::drv {
namespace {

Api g_api{};
const Api* g_ready = nullptr;
std::string g_reason;
std::once_flag g_once;
int g_driver_version = 0;

using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

struct Entry { const char* name; void** slot; };

void load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    g_reason = std::string("libcuda.so.1 could not be opened (no NVIDIA driver?): ") + (e ? e : "");
    return;
  }
  auto get_proc = reinterpret_cast<GetProcFn>(dlsym(lib, "cuGetProcAddress_v2"));
  auto drv_version = reinterpret_cast<decltype(&::cuDriverGetVersion)>(dlsym(lib, "cuDriverGetVersion"));
  if (drv_version == nullptr || drv_version(&g_driver_version) != CUDA_SUCCESS) g_driver_version = 0;
  // Entry points at the CUDA 12.0 ABI: every prototype we use (cuda.h of 12.x/13.x) is that version's,
  // and newer drivers may add variants of the same name with other signatures at higher versions.
  const int want = g_driver_version > 0 ? std::min(g_driver_version, 12000) : 12000;
  const Entry table[] = {
      {"cuInit", reinterpret_cast<void**>(&g_api.init)},
      {"cuDriverGetVersion", reinterpret_cast<void**>(&g_api.driverGetVersion)},
      {"cuGetErrorName", reinterpret_cast<void**>(&g_api.getErrorName)},
      {"cuGetErrorString", reinterpret_cast<void**>(&g_api.getErrorString)},
      {"cuDeviceGetCount", reinterpret_cast<void**>(&g_api.deviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void**>(&g_api.deviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void**>(&g_api.deviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&g_api.devicePrimaryCtxRetain)},
      {"cuCtxGetCurrent", reinterpret_cast<void**>(&g_api.ctxGetCurrent)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&g_api.ctxSetCurrent)},
      {"cuCtxGetDevice", reinterpret_cast<void**>(&g_api.ctxGetDevice)},
      {"cuCtxSynchronize", reinterpret_cast<void**>(&g_api.ctxSynchronize)},
      {"cuStreamCreate", reinterpret_cast<void**>(&g_api.streamCreate)},
      {"cuStreamDestroy", reinterpret_cast<void**>(&g_api.streamDestroy)},
      {"cuStreamSynchronize", reinterpret_cast<void**>(&g_api.streamSynchronize)},
      {"cuStreamQuery", reinterpret_cast<void**>(&g_api.streamQuery)},
      {"cuStreamWaitEvent", reinterpret_cast<void**>(&g_api.streamWaitEvent)},
      {"cuEventCreate", reinterpret_cast<void**>(&g_api.eventCreate)},
      {"cuEventDestroy", reinterpret_cast<void**>(&g_api.eventDestroy)},
      {"cuEventRecord", reinterpret_cast<void**>(&g_api.eventRecord)},
      {"cuEventQuery", reinterpret_cast<void**>(&g_api.eventQuery)},
      {"cuEventSynchronize", reinterpret_cast<void**>(&g_api.eventSynchronize)},
      {"cuEventElapsedTime", reinterpret_cast<void**>(&g_api.eventElapsedTime)},
      {"cuLaunchKernel", reinterpret_cast<void**>(&g_api.launchKernel)},
      {"cuMemHostAlloc", reinterpret_cast<void**>(&g_api.memHostAlloc)},
      {"cuMemHostGetDevicePointer", reinterpret_cast<void**>(&g_api.memHostGetDevicePointer)},
      {"cuMemFreeHost", reinterpret_cast<void**>(&g_api.memFreeHost)},
      {"cuModuleLoadData", reinterpret_cast<void**>(&g_api.moduleLoadData)},
      {"cuModuleLoadDataEx", reinterpret_cast<void**>(&g_api.moduleLoadDataEx)},
      {"cuModuleUnload", reinterpret_cast<void**>(&g_api.moduleUnload)},
      {"cuModuleGetFunction", reinterpret_cast<void**>(&g_api.moduleGetFunction)},
      {"cuFuncGetAttribute", reinterpret_cast<void**>(&g_api.funcGetAttribute)},
      {"cuFuncSetAttribute", reinterpret_cast<void**>(&g_api.funcSetAttribute)},
      {"cuStreamBeginCapture", reinterpret_cast<void**>(&g_api.streamBeginCapture)},
      {"cuStreamEndCapture", reinterpret_cast<void**>(&g_api.streamEndCapture)},
      {"cuStreamIsCapturing", reinterpret_cast<void**>(&g_api.streamIsCapturing)},
      {"cuGraphInstantiateWithFlags", reinterpret_cast<void**>(&g_api.graphInstantiate)},
      {"cuGraphLaunch", reinterpret_cast<void**>(&g_api.graphLaunch)},
      {"cuGraphExecDestroy", reinterpret_cast<void**>(&g_api.graphExecDestroy)},
      {"cuGraphDestroy", reinterpret_cast<void**>(&g_api.graphDestroy)},
      {"cuPointerGetAttribute", reinterpret_cast<void**>(&g_api.pointerGetAttribute)},
      {"cuStreamGetCtx", reinterpret_cast<void**>(&g_api.streamGetCtx)},
      {"cuDeviceCanAccessPeer", reinterpret_cast<void**>(&g_api.deviceCanAccessPeer)},
      {"cuCtxEnablePeerAccess", reinterpret_cast<void**>(&g_api.ctxEnablePeerAccess)},
  };
  // Explicit versioned names for the dlsym fallback (drivers without cuGetProcAddress_v2).
  auto fallback_name = [](const std::string& n) -> std::string {
    if (n == "cuStreamDestroy" || n == "cuEventDestroy" || n == "cuMemHostGetDevicePointer" ||
        n == "cuStreamBeginCapture")
      return n + "_v2";
    return n;
  };
  for (const Entry& e : table) {
    void* fn = nullptr;
    if (get_proc != nullptr) {
      CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
      if (get_proc(e.name, &fn, want, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
          status != CU_GET_PROC_ADDRESS_SUCCESS)
        fn = nullptr;
    }
    if (fn == nullptr) fn = dlsym(lib, fallback_name(e.name).c_str());
    if (fn == nullptr) {
      g_reason = std::string("the CUDA driver lacks ") + e.name + " (driver too old?)";
      return;
    }
    *e.slot = fn;
  }
  // TMA kernels only (tensor maps: CUDA 12.0; parameter offsets: 12.4), at their own ABI versions and
  // optional: without them every other kernel still launches (launcher.hpp names what is missing).
  // Launch features likewise (cuLaunchKernelEx and cluster occupancy: CUDA 12.0).
  const Entry optional[] = {
      {"cuTensorMapEncodeTiled", reinterpret_cast<void**>(&g_api.tensorMapEncodeTiled)},
      {"cuFuncGetParamInfo", reinterpret_cast<void**>(&g_api.funcGetParamInfo)},
      {"cuLaunchKernelEx", reinterpret_cast<void**>(&g_api.launchKernelEx)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor",
       reinterpret_cast<void**>(&g_api.occupancyMaxActiveBlocksPerMultiprocessor)},
      {"cuOccupancyMaxActiveClusters", reinterpret_cast<void**>(&g_api.occupancyMaxActiveClusters)}};
  const int optional_version[] = {12000, 12040, 12000, 12000, 12000};
  static_assert(sizeof optional / sizeof *optional == sizeof optional_version / sizeof *optional_version,
                "one ABI version per optional entry point");
  for (size_t k = 0; k < sizeof optional / sizeof *optional; ++k) {
    void* fn = nullptr;
    const int v = g_driver_version > 0 ? std::min(g_driver_version, optional_version[k]) : optional_version[k];
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (get_proc == nullptr || get_proc(optional[k].name, &fn, v, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS)
      fn = dlsym(lib, optional[k].name);
    *optional[k].slot = fn;
  }
  CUresult r = g_api.init(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    g_api.getErrorName(r, &name);
    g_reason = std::string("cuInit failed: ") + (name ? name : std::to_string(r));
    return;
  }
  int n = 0;
  if (g_api.deviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
    g_reason = "the CUDA driver reports no device";
    return;
  }
  g_ready = &g_api;
}

std::string pretty_call(const char* call) {
  std::string s(call);
  if (!s.empty() && std::islower(static_cast<unsigned char>(s[0])) && s.rfind("cu", 0) != 0) {
    s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
    s = "cu" + s;
  }
  if (s == "cuGraphInstantiate") s = "cuGraphInstantiateWithFlags";
  return s;
}

std::vector<CUcontext> g_primary;   // documented cache: ordinal -> retained primary context
std::mutex g_primary_mutex;

}  // namespace

const Api* api() {
  std::call_once(g_once, load);
  return g_ready;
}

const std::string& unavailable_reason() {
  api();
  return g_reason;
}

const Api& require() {
  if (const Api* a = api()) return *a;
  py::object cls = py::module_::import("bridge.errors").attr("NoDeviceError");
  PyErr_SetObject(cls.ptr(), py::str("no usable CUDA device: " + g_reason).ptr());
  throw py::error_already_set();
}

void throw_cuda_error(const char* call, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_ready) {
    g_api.getErrorName(r, &name);
    g_api.getErrorString(r, &text);
  }
  py::object cls = py::module_::import("bridge.errors").attr("CudaError");
  py::object exc = cls(pretty_call(call), static_cast<int>(r), name ? name : "", text ? text : "");
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

CUcontext primary_context(int ordinal) {
  const Api& a = require();
  std::lock_guard<std::mutex> lock(g_primary_mutex);
  if (ordinal < 0) ordinal = 0;
  if (static_cast<size_t>(ordinal) < g_primary.size() && g_primary[ordinal] != nullptr)
    return g_primary[ordinal];
  int n = 0;
  check(a.deviceGetCount(&n), "deviceGetCount");
  if (ordinal >= n) {
    py::object cls = py::module_::import("bridge.errors").attr("NoDeviceError");
    PyErr_SetObject(cls.ptr(), py::str("device " + std::to_string(ordinal) + " does not exist (" +
                                       std::to_string(n) + " device(s) present)").ptr());
    throw py::error_already_set();
  }
  CUdevice dev = 0;
  check(a.deviceGet(&dev, ordinal), "deviceGet");
  CUcontext ctx = nullptr;
  check(a.devicePrimaryCtxRetain(&ctx, dev), "devicePrimaryCtxRetain");
  if (g_primary.size() <= static_cast<size_t>(ordinal)) g_primary.resize(ordinal + 1, nullptr);
  g_primary[ordinal] = ctx;
  return ctx;
}

void ensure_current(int ordinal) {
  CUcontext want = primary_context(ordinal);
  CUcontext cur = nullptr;
  check(g_api.ctxGetCurrent(&cur), "ctxGetCurrent");
  if (cur != want) check(g_api.ctxSetCurrent(want), "ctxSetCurrent");
}

int device_count() {
  static int n = [] {
    const Api* a = api();
    int c = 0;
    if (a == nullptr || a->deviceGetCount(&c) != CUDA_SUCCESS) c = 0;
    return c;
  }();
  return n;
}

int current_device() {
  const Api* a = api();
  if (a == nullptr) return -1;
  CUcontext cur = nullptr;
  if (a->ctxGetCurrent(&cur) != CUDA_SUCCESS || cur == nullptr) return -1;
  return context_device(cur);
}

int context_device(CUcontext ctx) {
  const Api* a = api();
  if (a == nullptr || ctx == nullptr) return -1;
  {
    std::lock_guard<std::mutex> lock(g_primary_mutex);
    for (size_t i = 0; i < g_primary.size(); ++i)
      if (g_primary[i] == ctx) return static_cast<int>(i);
  }
  // Not a primary context we retained: ask the driver with `ctx` current for a moment.
  CUcontext cur = nullptr;
  if (a->ctxGetCurrent(&cur) != CUDA_SUCCESS) return -1;
  if (cur != ctx && a->ctxSetCurrent(ctx) != CUDA_SUCCESS) return -1;
  CUdevice dev = -1;
  const bool ok = a->ctxGetDevice(&dev) == CUDA_SUCCESS;
  if (cur != ctx) a->ctxSetCurrent(cur);
  return ok ? static_cast<int>(dev) : -1;
}

ScopedDevice::ScopedDevice(int ordinal, CUcontext known) {
  CUcontext want = known != nullptr ? known : primary_context(ordinal < 0 ? 0 : ordinal);
  check(g_api.ctxGetCurrent(&saved_), "ctxGetCurrent");
  if (saved_ == want) return;
  check(g_api.ctxSetCurrent(want), "ctxSetCurrent");
  // Nothing was current: device 0 may stay (the runtime's default); any other device is undone.
  restore_ = saved_ != nullptr || ordinal > 0;
}

ScopedDevice::~ScopedDevice() {
  if (restore_) g_api.ctxSetCurrent(saved_);
}

}  // namespace kb::drv

namespace kb::native {
namespace {
// CAI views carry no device id: ask the driver which device owns the pointer (-1 when unknown).
int pointer_device(uint64_t ptr) {
  const kb::drv::Api* a = kb::drv::api();
  if (a == nullptr || ptr == 0) return -1;
  int ordinal = -1;
  if (a->pointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                             static_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
    return -1;
  return ordinal;
}
}  // namespace

void register_driver(py::module_& m) {
  set_pointer_device_resolver(&pointer_device);
  m.def("driver_available", [] { return kb::drv::api() != nullptr; },
        "True when libcuda.so.1 was opened, every entry point resolved and a device is present.");
  m.def("driver_unavailable_reason", [] { return kb::drv::unavailable_reason(); });
  m.def("driver_version", [] {
    int v = 0;
    KB_CU(driverGetVersion, &v);
    return v;
  }, "cuDriverGetVersion (e.g. 13000).");
  m.def("ensure_current", [](int ordinal) { kb::drv::ensure_current(ordinal); }, py::arg("ordinal"),
        "Make the device's primary context current on this thread.");
  m.def("current_device", [] { return kb::drv::current_device(); },
        "Ordinal of the device whose context is current on this thread (-1: none, or no driver).");
  m.def("device_count", [] { return kb::drv::device_count(); }, "Number of CUDA devices (0 without a driver).");
}

}  // namespace kb::native
