// Driver modules and functions: load PTX / cubin / fatbin images into a device's primary context.
#include <optional>
#include <string>
#include <vector>

#include "native.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace kb::rt {
namespace {

CUmodule as_module(uint64_t h) { return reinterpret_cast<CUmodule>(static_cast<uintptr_t>(h)); }
CUfunction as_func(uint64_t h) { return reinterpret_cast<CUfunction>(static_cast<uintptr_t>(h)); }

}  // namespace

void register_modules(py::module_& m) {
  m.def("module_load_data", [](int device, py::bytes image) {
    kb::drv::ScopedDevice on(device);   // loaded into that device's context; the caller's stays current
    std::string data = image;             // NUL-terminated copy (PTX text must be)
    std::vector<char> log(16384, '\0');
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* vals[] = {log.data(), reinterpret_cast<void*>(static_cast<uintptr_t>(log.size() - 1))};
    CUmodule mod = nullptr;
    CUresult r = kb::drv::require().moduleLoadDataEx(&mod, data.c_str(), 2, opts, vals);
    if (r != CUDA_SUCCESS) {
      std::string text(log.data());
      if (!text.empty()) {
        const char* name = nullptr;
        kb::drv::require().getErrorName(r, &name);
        py::object cls = py::module_::import("bridge.errors").attr("CudaError");
        py::object exc = cls("cuModuleLoadDataEx", static_cast<int>(r), name ? name : "", text);
        PyErr_SetObject(cls.ptr(), exc.ptr());
        throw py::error_already_set();
      }
      kb::drv::throw_cuda_error("moduleLoadDataEx", r);
    }
    return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(mod));
  }, py::arg("device"), py::arg("image"),
     "cuModuleLoadDataEx into the device's primary context; the JIT error log is in the CudaError.");
  m.def("module_unload", [](uint64_t mod, int device) {
    std::optional<kb::drv::ScopedDevice> on;
    if (device >= 0) on.emplace(device);
    KB_CU(moduleUnload, as_module(mod));
  }, py::arg("module"), py::arg("device") = -1);
  m.def("module_get_function", [](uint64_t mod, const std::string& name) -> py::object {
    CUfunction f = nullptr;
    CUresult r = kb::drv::require().moduleGetFunction(&f, as_module(mod), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) return py::none();
    kb::drv::check(r, "moduleGetFunction");
    return py::int_(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(f)));
  }, py::arg("module"), py::arg("name"), "CUfunction handle of `name`, None when the module has none.");
  m.def("func_attributes", [](uint64_t func) {
    struct { const char* key; CUfunction_attribute attr; } table[] = {
        {"max_threads_per_block", CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK},
        {"static_smem", CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES},
        {"const_bytes", CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES},
        {"local_bytes", CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES},
        {"num_regs", CU_FUNC_ATTRIBUTE_NUM_REGS},
        {"ptx_version", CU_FUNC_ATTRIBUTE_PTX_VERSION},
        {"binary_version", CU_FUNC_ATTRIBUTE_BINARY_VERSION},
        {"max_dynamic_smem", CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES},
    };
    py::dict out;
    for (const auto& t : table) {
      int v = 0;
      KB_CU(funcGetAttribute, &v, t.attr, as_func(func));
      out[t.key] = v;
    }
    // Cluster attributes (CUDA 11.8+; the validator's cluster checks): 0 where a driver cannot say.
    struct { const char* key; CUfunction_attribute attr; } cluster[] = {
        {"required_cluster_width", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH},
        {"required_cluster_height", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT},
        {"required_cluster_depth", CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH},
        {"cluster_size_must_be_set", CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET},
    };
    for (const auto& t : cluster) {
      int v = 0;
      if (kb::drv::require().funcGetAttribute(&v, t.attr, as_func(func)) != CUDA_SUCCESS) v = 0;
      out[t.key] = v;
    }
    return out;
  }, py::arg("func"), "cuFuncGetAttribute values of a function, by name.");
}

}  // namespace kb::rt
