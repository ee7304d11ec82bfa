// Example: exposing existing C++ host launch code to Python through kernelbridge's native pieces.
//
// bridge._native.cpp_example_saxpy(a, x, y) computes y = a*x + y with the package's CUDA C++ saxpy
// kernel (cpp/kernels/saxpy.cu). It is written the way a C++ library would wrap its own launches:
//   * arrays arrive through kb::native::intake, the ONE array path of the runtime (bridge.Array, CuPy,
//     PyTorch, any DLPack or CUDA-Array-Interface producer), zero-copy;
//   * the launch is checked by kb::validate from kernelbridge/contract.hpp, against the contract the
//     kernel's KB_CONTRACT embedded in the fatbin (parsed once with kb::parse_contract);
//   * it runs on the bridge's current stream (bridge.use_stream), ordered after the producers' streams.
// A violation raises the same typed exception (bridge.errors.ShapeRelationError, DTypeError, ...) as a
// launch through bridge.load_module; nothing is launched.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "driver_api.hpp"
#include "errors.hpp"
#include "intake.hpp"
#include "kernelbridge/contract.hpp"
#include "native.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace kb::native {
namespace {

// What a C++ library keeps per device after loading its module once.
struct SaxpyModule {
  std::vector<char> image;        // the fatbin bytes
  CUmodule module = nullptr;
  CUfunction fn = nullptr;
  kb::LaunchContract contract;
  kb::DeviceLimits limits;
  kb::FuncAttrs attrs;
};

constexpr int kMaxDevices = 64;
SaxpyModule* g_loaded[kMaxDevices] = {};   // documented cache: one loaded module per device (GIL-guarded)

std::vector<char> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw py::value_error("cpp_example_saxpy: cannot read " + path + " (was the package built with nvcc?)");
  return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

int attr(CUdevice_attribute a, CUdevice dev) {
  int v = 0;
  KB_CU(deviceGetAttribute, &v, a, dev);
  return v;
}

SaxpyModule& saxpy_module(int device) {
  if (device < 0 || device >= kMaxDevices) throw py::value_error("cpp_example_saxpy: bad device ordinal");
  if (g_loaded[device] != nullptr) return *g_loaded[device];
  auto m = std::make_unique<SaxpyModule>();
  // The fatbin path and its embedded contract JSON (bridge.fatbin reads the __kb_contract_saxpy symbol).
  const std::string path = py::str(py::module_::import("bridge.cpp_kernels").attr("path")("saxpy"));
  m->image = read_file(path);
  py::bytes data(m->image.data(), m->image.size());
  py::dict contracts = py::module_::import("bridge.fatbin").attr("embedded_contracts")(data);
  if (!contracts.contains("saxpy")) throw py::value_error("cpp_example_saxpy: " + path + " carries no saxpy contract");
  const std::string json = py::str(contracts["saxpy"]);
  if (kb::Error e = kb::parse_contract(json, m->contract)) throw_contract_error(e, "saxpy");

  kb::drv::ensure_current(device);
  KB_CU(moduleLoadData, &m->module, m->image.data());
  KB_CU(moduleGetFunction, &m->fn, m->module, "saxpy");
  CUdevice dev;
  KB_CU(deviceGet, &dev, device);
  kb::DeviceLimits& d = m->limits;
  d.device_id = device;
  d.cc = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) * 10 + attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  d.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
  d.max_block[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, dev);
  d.max_block[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, dev);
  d.max_block[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, dev);
  d.max_grid[0] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, dev);
  d.max_grid[1] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, dev);
  d.max_grid[2] = attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, dev);
  d.smem_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, dev);
  d.smem_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  d.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
  int v = 0;
  KB_CU(funcGetAttribute, &v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->fn);
  m->attrs.max_threads_per_block = v;
  KB_CU(funcGetAttribute, &v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, m->fn);
  m->attrs.static_smem = v;
  KB_CU(funcGetAttribute, &v, CU_FUNC_ATTRIBUTE_NUM_REGS, m->fn);
  m->attrs.num_regs = v;
  KB_CU(funcGetAttribute, &v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, m->fn);
  m->attrs.max_dynamic_smem = v;
  g_loaded[device] = m.release();
  return *g_loaded[device];
}

// Read one array argument through the runtime's intake; a non-array is a typed ArgumentKindError.
void take_array(py::handle obj, int index, const char* name, kb::ArgValue& v, IntakeInfo& info,
                uint64_t stream, IntakeMemo& memo) {
  if (!intake(obj.ptr(), v.array, info, static_cast<int64_t>(stream), &memo)) {
    kb::Error e;
    e.code = kb::ErrorCode::argument_kind;
    e.arg = index;
    e.arg_name = name;
    e.message = std::string("saxpy: argument '") + name + "' (#" + std::to_string(index) +
                "): expected an array, got " + Py_TYPE(obj.ptr())->tp_name;
    throw_contract_error(e, "saxpy");
  }
  v.kind = kb::ArgKind::array;
}

void cpp_example_saxpy(double a, py::handle x, py::handle y) {
  const uint64_t stream = kb::rt::current_stream();
  IntakeMemo memo;
  IntakeInfo infos[4];
  kb::ArgValue args[4];
  take_array(x, 1, "x", args[1], infos[1], stream, memo);
  take_array(y, 2, "y", args[2], infos[2], stream, memo);
  args[0].kind = kb::ArgKind::scalar;
  args[0].scalar_kind = kb::ArgValue::ScalarKind::floating;
  args[0].f = a;
  args[0].type_name = "float";
  const int64_t n = args[2].array.ndim == 1 ? args[2].array.shape[0] : -1;
  args[3].kind = kb::ArgKind::scalar;
  args[3].scalar_kind = kb::ArgValue::ScalarKind::integer;
  args[3].i = n;
  args[3].type_name = "int";

  const int device = args[2].array.device_id >= 0 ? args[2].array.device_id : 0;
  SaxpyModule& m = saxpy_module(device);
  kb::LaunchConfig cfg;                      // grid from y (grid_from), block from the launch bounds
  cfg.smem = -1;
  if (kb::Error e = kb::validate(m.contract, args, 4, cfg, m.limits, m.attrs)) throw_contract_error(e, "saxpy");
  if (cfg.skip) return;

  kb::drv::ensure_current(device);
  // Order by memory (x read, y read and written), then after foreign producers' own streams.
  for (int i = 1; i <= 2; ++i) {
    uint64_t lo, hi;
    args[i].array.extent(lo, hi);
    kb::rt::order_use(lo, hi, stream, device, i == 2);
    if (infos[i].has_producer_stream && infos[i].producer_stream != stream)
      kb::rt::order_after(infos[i].producer_stream, stream, device, infos[i].producer_generation);
  }
  float fa = static_cast<float>(a);
  uint64_t px = args[1].array.ptr, py_ = args[2].array.ptr;
  int ni = static_cast<int>(n);
  void* params[] = {&fa, &px, &py_, &ni};
  KB_CU(launchKernel, m.fn, static_cast<unsigned>(cfg.grid[0]), static_cast<unsigned>(cfg.grid[1]),
        static_cast<unsigned>(cfg.grid[2]), static_cast<unsigned>(cfg.block[0]), static_cast<unsigned>(cfg.block[1]),
        static_cast<unsigned>(cfg.block[2]), 0u, reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)),
        params, nullptr);
  for (int i = 1; i <= 2; ++i) {
    uint64_t lo, hi;
    args[i].array.extent(lo, hi);
    kb::rt::note_use(lo, hi, stream, device, i == 2);
  }
  // The callers' objects stay referenced until the kernel is done with their memory.
  py::list keep;
  keep.append(x);
  keep.append(y);
  for (int i = 1; i <= 2; ++i)
    if (infos[i].keepalive) keep.append(infos[i].keepalive);
  kb::rt::keep_until_complete(stream, device, keep);
}

}  // namespace

void register_cpp_example(py::module_& m) {
  m.def("cpp_example_saxpy", &cpp_example_saxpy, py::arg("a"), py::arg("x"), py::arg("y"),
        "Example of a C++ entry point: y = a*x + y with the package's saxpy fatbin, arrays through the "
        "runtime's intake, validated by kernelbridge/contract.hpp, launched on bridge.current_stream().");
}

}  // namespace kb::native
