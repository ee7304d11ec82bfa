// dsl.integrations._jax_ffi: the XLA FFI handler that launches a DSL kernel inside jax.jit.
//
// Why C++: XLA calls a custom call on its own thread with its own buffers and stream; going back into
// Python there would take the GIL on XLA's hot path. At trace time Python specialises and loads the
// kernel through the bridge (bridge.kernel_from_ptx) and registers a launch *entry* here: the
// CUfunction, its contract (parsed by THE validator, kernelbridge/contract.hpp), the device limits and
// function attributes the bridge read, the launch configuration and, per kernel parameter, where its
// value comes from (an XLA operand, an XLA result, or a scalar fixed at trace time). The handler gets
// the entry id as an attribute, validates the real buffers with kb::validate, packs the parameter
// buffer exactly as the bridge's Launcher does (cpp/native/launcher.cpp: view ABI, scalars in their
// dtype, then the fault record) and calls cuLaunchKernel on XLA's stream.
//
// libcuda is opened with dlopen on first use (only the few entry points below), so the module builds
// and imports without a driver; `pack` runs the validation and packing alone, for CPU tests.
// Built only when jaxlib's FFI headers are found at configure time (CMakeLists.txt).
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/detail/tensor_map.hpp"
#include "xla/ffi/api/ffi.h"

namespace py = pybind11;
namespace ffi = xla::ffi;

namespace {

// ---------------------------------------------------------------------------------------- driver
struct Driver {
  decltype(&::cuGetErrorName) getErrorName = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuCtxGetCurrent) ctxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuStreamGetCtx) streamGetCtx = nullptr;
  decltype(&::cuFuncSetAttribute) funcSetAttribute = nullptr;
  decltype(&::cuMemHostAlloc) memHostAlloc = nullptr;
  decltype(&::cuMemHostGetDevicePointer) memHostGetDevicePointer = nullptr;
  decltype(&::cuTensorMapEncodeTiled) tensorMapEncodeTiled = nullptr;
  decltype(&::cuFuncGetParamInfo) funcGetParamInfo = nullptr;
};

Driver g_drv;
const Driver* g_drv_ready = nullptr;
std::string g_drv_reason;
std::once_flag g_drv_once;

using GetProcFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

void load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    g_drv_reason = "libcuda.so.1 could not be opened (no NVIDIA driver?)";
    return;
  }
  auto get_proc = reinterpret_cast<GetProcFn>(dlsym(lib, "cuGetProcAddress_v2"));
  auto version = reinterpret_cast<decltype(&::cuDriverGetVersion)>(dlsym(lib, "cuDriverGetVersion"));
  int v = 0;
  if (get_proc == nullptr || version == nullptr || version(&v) != CUDA_SUCCESS) {
    g_drv_reason = "the CUDA driver lacks cuGetProcAddress_v2 (driver too old?)";
    return;
  }
  // The CUDA 12.0 ABI of every entry point, as cpp/native/driver_api.cpp resolves them.
  const int want = std::min(v, 12000);
  struct { const char* name; void** slot; } table[] = {
      {"cuGetErrorName", reinterpret_cast<void**>(&g_drv.getErrorName)},
      {"cuLaunchKernel", reinterpret_cast<void**>(&g_drv.launchKernel)},
      {"cuCtxGetCurrent", reinterpret_cast<void**>(&g_drv.ctxGetCurrent)},
      {"cuCtxSetCurrent", reinterpret_cast<void**>(&g_drv.ctxSetCurrent)},
      {"cuStreamGetCtx", reinterpret_cast<void**>(&g_drv.streamGetCtx)},
      {"cuFuncSetAttribute", reinterpret_cast<void**>(&g_drv.funcSetAttribute)},
      {"cuMemHostAlloc", reinterpret_cast<void**>(&g_drv.memHostAlloc)},
      {"cuMemHostGetDevicePointer", reinterpret_cast<void**>(&g_drv.memHostGetDevicePointer)},
  };
  for (auto& e : table) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (get_proc(e.name, e.slot, want, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS || *e.slot == nullptr) {
      g_drv_reason = std::string("the CUDA driver lacks ") + e.name;
      return;
    }
  }
  // TMA kernels only (tensor maps: CUDA 12.0; parameter offsets: 12.4), at their own ABI versions; a
  // driver without them still launches every other kernel (prepare() names what is missing).
  struct { const char* name; void** slot; int version; } tma[] = {
      {"cuTensorMapEncodeTiled", reinterpret_cast<void**>(&g_drv.tensorMapEncodeTiled), 12000},
      {"cuFuncGetParamInfo", reinterpret_cast<void**>(&g_drv.funcGetParamInfo), 12040},
  };
  for (auto& e : tma) {
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (get_proc(e.name, e.slot, std::min(v, e.version), CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS)
      *e.slot = nullptr;
  }
  g_drv_ready = &g_drv;
}

const Driver* driver() {
  std::call_once(g_drv_once, load_driver);
  return g_drv_ready;
}

std::string cu_error(const char* call, CUresult r) {
  const char* name = nullptr;
  if (g_drv_ready) g_drv.getErrorName(r, &name);
  return std::string(call) + " failed: " + (name ? name : std::to_string(static_cast<int>(r)));
}

// ---------------------------------------------------------------------------------------- entries
struct FaultRecord {   // the kernel ABI of docs/architecture.md
  uint32_t flag, site;
  int64_t index, extent;
};
static_assert(sizeof(FaultRecord) == 24, "fault record layout is part of the kernel ABI");

struct Slot {
  enum Kind : uint8_t { operand, result, scalar } kind = operand;
  int index = 0;            // operand / result position
  kb::ArgValue value;       // scalar
};

struct Entry {
  CUfunction fn = nullptr;
  CUcontext ctx = nullptr;
  int device = 0;
  kb::LaunchContract contract;
  kb::DeviceLimits limits;
  kb::FuncAttrs attrs;
  kb::LaunchConfig cfg;     // as given at trace time (zeros: derived by the validator)
  std::vector<Slot> slots;  // one per kernel parameter, in signature order
  FaultRecord* fault_host = nullptr;
  uint64_t fault_dev = 0;
  // kernels with tensor maps: every parameter's offset and size from the driver (tensor_map.hpp)
  std::vector<size_t> param_offsets, param_sizes;
};

std::mutex g_mu;
std::vector<std::unique_ptr<Entry>>& g_entries = *new std::vector<std::unique_ptr<Entry>>();   // never freed:
// XLA executables keep entry ids as attributes for as long as they live

const Entry* find_entry(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (id < 0 || static_cast<size_t>(id) >= g_entries.size()) return nullptr;
  return g_entries[static_cast<size_t>(id)].get();
}

// One XLA buffer as the validator sees it: C-contiguous (ffi_call asks for row-major layouts).
struct Buffer {
  uint64_t ptr = 0;
  kb::DType dtype = kb::DType::invalid;
  std::vector<int64_t> dims;
};

void to_view(const Buffer& b, int device, bool readonly, kb::ArgValue& v) {
  v = kb::ArgValue();
  v.kind = kb::ArgKind::array;
  v.type_name = "XLA buffer";
  kb::ArrayView& a = v.array;
  a.ptr = b.ptr;
  a.dtype = b.dtype;
  a.ndim = static_cast<int32_t>(b.dims.size());
  a.device_type = kb::DeviceType::cuda;
  a.device_id = device;
  a.readonly = readonly;
  int64_t stride = kb::dtype_itemsize(b.dtype);
  for (int k = a.ndim - 1; k >= 0; --k) {
    a.shape[k] = b.dims[static_cast<size_t>(k)];
    a.strides[k] = stride;
    stride *= std::max<int64_t>(a.shape[k], 1);
  }
}

using kb::kMaxParamBytes;   // kernelbridge/detail/param_pack.hpp

struct Packed {
  kb::LaunchConfig cfg;
  alignas(16) unsigned char buf[kMaxParamBytes + 16];
  size_t size = 0;
};

// Validate the buffers against the entry's contract and pack the parameter buffer (launcher.cpp's
// layout). Returns an error naming the kernel and argument; nothing is launched on an error.
kb::Error prepare(const Entry& e, const std::vector<Buffer>& operands, const std::vector<Buffer>& results,
                  Packed& out) {
  const int n = static_cast<int>(e.slots.size());
  std::vector<kb::ArgValue> vals(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const Slot& s = e.slots[static_cast<size_t>(i)];
    const std::vector<Buffer>& from = s.kind == Slot::result ? results : operands;
    if (s.kind == Slot::scalar) {
      vals[static_cast<size_t>(i)] = s.value;
    } else if (s.index < 0 || static_cast<size_t>(s.index) >= from.size()) {
      kb::Error err;
      err.code = kb::ErrorCode::argument_count;
      err.message = e.contract.kernel + ": the XLA call has " + std::to_string(operands.size()) + " operands and " +
                    std::to_string(results.size()) + " results, fewer than its launch entry expects";
      return err;
    } else {
      const Buffer& b = from[static_cast<size_t>(s.index)];
      if (b.dims.size() > static_cast<size_t>(kb::kMaxDims)) {
        kb::Error err;
        err.code = kb::ErrorCode::ndim;
        err.arg = i;
        err.arg_name = e.contract.args[static_cast<size_t>(i)].name;
        err.message = e.contract.kernel + ": argument '" + err.arg_name + "' (#" + std::to_string(i) +
                      "): expected at most " + std::to_string(kb::kMaxDims) + " dimensions, got an array of " +
                      std::to_string(b.dims.size());
        return err;
      }
      to_view(b, e.device, s.kind == Slot::operand, vals[static_cast<size_t>(i)]);
    }
  }
  out.cfg = e.cfg;
  kb::Error err = kb::validate(e.contract, vals.data(), n, out.cfg, e.limits, e.attrs);
  if (err) return err;
  if (out.cfg.smem < 0) out.cfg.smem = 0;
  bool overflow = false, mismatch = false;
  const bool placed = !e.contract.tensor_maps.empty();
  kb::ParamPlacer where(placed ? &e.param_offsets : nullptr, &e.param_sizes);
  auto put = [&](const void* p, size_t size, size_t align) {
    size_t off = 0;
    if (!where.place(size, align, off)) { mismatch = true; return; }
    if (off + size > kMaxParamBytes) { overflow = true; return; }
    std::memcpy(out.buf + off, p, size);
  };
  const int unpackable = kb::pack_arguments(e.contract, vals.data(), n, put);
  if (unpackable >= 0) {
    kb::Error bad;
    bad.code = kb::ErrorCode::argument_kind;
    bad.arg = unpackable;
    bad.arg_name = e.contract.args[static_cast<size_t>(unpackable)].name;
    bad.message = e.contract.kernel + ": argument '" + bad.arg_name + "' (#" + std::to_string(unpackable) +
                  "): scalars of dtype " + kb::dtype_name(kb::packed_scalar_dtype(e.contract, vals.data(), unpackable)) +
                  " cannot be passed to a kernel";
    return bad;
  }
  if (placed && (g_drv_ready == nullptr || g_drv.tensorMapEncodeTiled == nullptr)) {
    kb::Error no;
    no.code = kb::ErrorCode::argument_kind;
    no.message = e.contract.kernel + ": TMA tensor maps need a CUDA driver with cuTensorMapEncodeTiled (" +
                 (g_drv_ready ? std::string("CUDA 12.0 or newer") : g_drv_reason) + ")";
    return no;
  }
  for (const kb::TensorMapSpec& t : e.contract.tensor_maps) {
    CUtensorMap m;
    const kb::ArrayView& a = vals[static_cast<size_t>(t.arg)].array;
    const CUresult r = kb::encode_tensor_map(g_drv.tensorMapEncodeTiled, t, a, &m);
    if (r != CUDA_SUCCESS) {
      kb::Error bad;
      bad.code = kb::ErrorCode::layout;
      bad.arg = t.arg;
      bad.arg_name = e.contract.args[static_cast<size_t>(t.arg)].name;
      bad.message = e.contract.kernel + ": argument '" + bad.arg_name + "' (#" + std::to_string(t.arg) +
                    "): cuTensorMapEncodeTiled refused the view (" + cu_error("cuTensorMapEncodeTiled", r) + ")";
      return bad;
    }
    put(&m, sizeof m, 64);
  }
  if (e.contract.has_fault_buffer) put(&e.fault_dev, 8, 8);
  if (mismatch) {
    kb::Error bad;
    bad.code = kb::ErrorCode::contract_definition;
    bad.message = e.contract.kernel + ": the compiled kernel's parameters do not match its contract";
    return bad;
  }
  if (overflow) {
    kb::Error big;
    big.code = kb::ErrorCode::argument_count;
    big.message = e.contract.kernel + ": kernel parameters exceed " + std::to_string(kMaxParamBytes) + " bytes";
    return big;
  }
  out.size = where.end();
  return kb::Error();
}

kb::DType from_xla(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::PRED: return kb::DType::bool_;
    case ffi::DataType::S8: return kb::DType::i8;
    case ffi::DataType::S16: return kb::DType::i16;
    case ffi::DataType::S32: return kb::DType::i32;
    case ffi::DataType::S64: return kb::DType::i64;
    case ffi::DataType::U8: return kb::DType::u8;
    case ffi::DataType::U16: return kb::DType::u16;
    case ffi::DataType::U32: return kb::DType::u32;
    case ffi::DataType::U64: return kb::DType::u64;
    case ffi::DataType::F16: return kb::DType::f16;
    case ffi::DataType::BF16: return kb::DType::bf16;
    case ffi::DataType::F32: return kb::DType::f32;
    case ffi::DataType::F64: return kb::DType::f64;
    case ffi::DataType::C64: return kb::DType::c64;
    case ffi::DataType::C128: return kb::DType::c128;
    case ffi::DataType::F8E5M2: return kb::DType::f8e5m2;
    case ffi::DataType::F8E4M3FN: return kb::DType::f8e4m3fn;
    case ffi::DataType::F8E5M2FNUZ: return kb::DType::f8e5m2fnuz;
    case ffi::DataType::F8E4M3FNUZ: return kb::DType::f8e4m3fnuz;
    case ffi::DataType::F8E3M4: return kb::DType::f8e3m4;
    case ffi::DataType::F8E4M3: return kb::DType::f8e4m3;
    case ffi::DataType::F8E8M0FNU: return kb::DType::f8e8m0fnu;
    case ffi::DataType::F4E2M1FN: return kb::DType::f4e2m1fn;
    default: return kb::DType::invalid;
  }
}

Buffer from_any(const ffi::AnyBuffer& b) {
  Buffer out;
  out.ptr = reinterpret_cast<uint64_t>(b.untyped_data());
  out.dtype = from_xla(b.element_type());
  auto dims = b.dimensions();
  out.dims.assign(dims.begin(), dims.end());
  return out;
}

const char* const kErrorClass[] = {"", "ArgumentCountError", "ArgumentKindError", "DTypeError", "NdimError",
                                   "ShapeRelationError", "LayoutError", "AlignmentError", "ReadOnlyError",
                                   "AliasingError", "DeviceMismatchError", "ScalarRangeError", "BlockSizeError",
                                   "GridSizeError", "SharedMemoryError", "ComputeCapabilityError",
                                   "ContractDefinitionError", "MissingContractError"};

ffi::Error launch_impl(CUstream stream, int64_t launch_id, ffi::RemainingArgs args, ffi::RemainingRets rets) {
  const Entry* e = find_entry(launch_id);
  if (e == nullptr) return ffi::Error::InvalidArgument("kernelbridge: unknown launch entry " + std::to_string(launch_id));
  const Driver* d = driver();
  if (d == nullptr) return ffi::Error::Internal("kernelbridge: " + g_drv_reason);
  std::vector<Buffer> operands, results;
  for (size_t i = 0; i < args.size(); ++i) {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    operands.push_back(from_any(*b));
  }
  for (size_t i = 0; i < rets.size(); ++i) {
    auto b = rets.get<ffi::AnyBuffer>(i);
    if (!b.has_value()) return b.error();
    results.push_back(from_any(**b));
  }
  auto packed = std::make_unique<Packed>();
  kb::Error err = prepare(*e, operands, results, *packed);
  if (err) {
    const int code = static_cast<int>(err.code);
    const char* cls = code > 0 && code < static_cast<int>(sizeof kErrorClass / sizeof *kErrorClass)
                          ? kErrorClass[code] : "LaunchContractError";
    return ffi::Error::InvalidArgument(std::string("kernelbridge ") + cls + ": " + err.message);
  }
  if (packed->cfg.skip) return ffi::Error::Success();
  CUcontext sctx = nullptr;
  CUresult r = d->streamGetCtx(stream, &sctx);
  if (r != CUDA_SUCCESS) return ffi::Error::Internal("kernelbridge: " + cu_error("cuStreamGetCtx", r));
  if (sctx != e->ctx)
    return ffi::Error::InvalidArgument("kernelbridge DeviceMismatchError: " + e->contract.kernel +
                                       ": compiled and loaded for cuda:" + std::to_string(e->device) +
                                       ", but XLA runs this call on another device's stream");
  CUcontext cur = nullptr;
  d->ctxGetCurrent(&cur);
  if (cur != e->ctx && (r = d->ctxSetCurrent(e->ctx)) != CUDA_SUCCESS)
    return ffi::Error::Internal("kernelbridge: " + cu_error("cuCtxSetCurrent", r));
  const kb::LaunchConfig& c = packed->cfg;
  if (c.smem > e->attrs.max_dynamic_smem &&
      (r = d->funcSetAttribute(e->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(c.smem))) !=
          CUDA_SUCCESS)
    return ffi::Error::Internal("kernelbridge: " + cu_error("cuFuncSetAttribute", r));
  size_t size = packed->size;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, packed->buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  r = d->launchKernel(e->fn, static_cast<unsigned>(c.grid[0]), static_cast<unsigned>(c.grid[1]),
                      static_cast<unsigned>(c.grid[2]), static_cast<unsigned>(c.block[0]),
                      static_cast<unsigned>(c.block[1]), static_cast<unsigned>(c.block[2]),
                      static_cast<unsigned>(c.smem), stream, nullptr, extra);
  if (cur != e->ctx && cur != nullptr) d->ctxSetCurrent(cur);
  if (r != CUDA_SUCCESS) return ffi::Error::Internal("kernelbridge: " + e->contract.kernel + ": " + cu_error("cuLaunchKernel", r));
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(KbDslLaunch, launch_impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::PlatformStream<CUstream>>()
                                  .Attr<int64_t>("launch_id")
                                  .RemainingArgs()
                                  .RemainingRets());

namespace {

// ---------------------------------------------------------------------------------------- Python side
[[noreturn]] void raise_contract_error(const kb::Error& e, const std::string& kernel) {
  py::object make = py::module_::import("bridge.errors").attr("contract_error");
  py::object arg = e.arg >= 0 ? py::object(py::int_(e.arg)) : py::object(py::none());
  py::object name = e.arg_name.empty() ? py::object(py::none()) : py::object(py::str(e.arg_name));
  py::object exc = make(static_cast<int>(e.code), e.message, kernel, arg, name);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

kb::ArgValue scalar_value(py::handle v) {
  kb::ArgValue a;
  a.kind = kb::ArgKind::scalar;
  a.type_name = Py_TYPE(v.ptr())->tp_name;
  if (PyBool_Check(v.ptr())) {
    a.scalar_kind = kb::ArgValue::ScalarKind::boolean;
    a.i = v.ptr() == Py_True;
  } else if (PyLong_Check(v.ptr())) {
    a.scalar_kind = kb::ArgValue::ScalarKind::integer;
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow == 0) {
      a.i = x;
    } else {
      unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
      if (PyErr_Occurred()) {
        PyErr_Clear();
        a.huge_int = true;
      } else {
        a.is_big_unsigned = true;
        a.u = u;
        a.i = static_cast<int64_t>(u);
      }
    }
  } else if (PyFloat_Check(v.ptr())) {
    a.scalar_kind = kb::ArgValue::ScalarKind::floating;
    a.f = PyFloat_AsDouble(v.ptr());
  } else {
    throw py::type_error(std::string("scalar slot: expected a Python bool, int or float, got ") + a.type_name);
  }
  return a;
}

void read_dims(py::handle seq, int64_t out[3]) {
  auto v = seq.cast<std::vector<int64_t>>();
  if (v.size() != 3) throw py::value_error("expected 3 dimensions");
  for (int k = 0; k < 3; ++k) out[k] = v[static_cast<size_t>(k)];
}

int64_t register_entry(uint64_t fn, uint64_t ctx, int device, const std::string& contract_json, py::dict limits,
                       py::dict attrs, py::tuple grid, py::tuple block, int64_t smem, py::list slots) {
  auto e = std::make_unique<Entry>();
  e->fn = reinterpret_cast<CUfunction>(static_cast<uintptr_t>(fn));
  e->ctx = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(ctx));
  e->device = device;
  kb::Error err = kb::parse_contract(contract_json, e->contract);
  if (err) raise_contract_error(err, e->contract.kernel);
  kb::DeviceLimits& l = e->limits;
  l.device_id = device;
  l.cc = limits["cc"].cast<int>();
  l.max_threads_per_block = limits["max_threads_per_block"].cast<int>();
  auto mb = limits["max_block"].cast<std::vector<int>>();
  auto mg = limits["max_grid"].cast<std::vector<int64_t>>();
  for (int k = 0; k < 3; ++k) {
    l.max_block[k] = mb.at(static_cast<size_t>(k));
    l.max_grid[k] = mg.at(static_cast<size_t>(k));
  }
  l.smem_per_block = limits["smem_per_block"].cast<int64_t>();
  l.smem_per_block_optin = limits["smem_per_block_optin"].cast<int64_t>();
  l.sm_count = limits["sm_count"].cast<int>();
  e->attrs.max_threads_per_block = attrs["max_threads_per_block"].cast<int>();
  e->attrs.static_smem = attrs["static_smem"].cast<int64_t>();
  e->attrs.num_regs = attrs["num_regs"].cast<int>();
  e->attrs.max_dynamic_smem = attrs["max_dynamic_smem"].cast<int64_t>();
  int64_t b[3];
  read_dims(grid, e->cfg.grid);
  read_dims(block, b);
  for (int k = 0; k < 3; ++k) e->cfg.block[k] = static_cast<int>(b[k]);
  e->cfg.smem = smem;
  if (slots.size() != e->contract.args.size())
    throw py::value_error(e->contract.kernel + ": " + std::to_string(slots.size()) + " slots for " +
                          std::to_string(e->contract.args.size()) + " kernel parameters");
  for (py::handle h : slots) {
    py::tuple t = h.cast<py::tuple>();
    std::string kind = t[0].cast<std::string>();
    Slot s;
    if (kind == "operand") { s.kind = Slot::operand; s.index = t[1].cast<int>(); }
    else if (kind == "result") { s.kind = Slot::result; s.index = t[1].cast<int>(); }
    else if (kind == "scalar") { s.kind = Slot::scalar; s.value = scalar_value(t[1]); }
    else throw py::value_error("slot kind must be operand, result or scalar, got " + kind);
    e->slots.push_back(s);
  }
  if (!e->contract.tensor_maps.empty() && fn != 0) {   // packed at the driver's parameter offsets
    const Driver* d = driver();
    if (d == nullptr) throw std::runtime_error("kernelbridge: " + g_drv_reason);
    if (d->funcGetParamInfo == nullptr)
      throw std::runtime_error("kernelbridge: " + e->contract.kernel + ": its TMA tensor maps need a CUDA driver "
                               "with cuFuncGetParamInfo (CUDA 12.4 or newer)");
    kb::param_layout(d->funcGetParamInfo, e->fn, kb::param_count(e->contract), e->param_offsets, e->param_sizes);
  }
  if (e->contract.has_fault_buffer && fn != 0) {
    const Driver* d = driver();
    if (d == nullptr) throw std::runtime_error("kernelbridge: " + g_drv_reason);
    void* host = nullptr;
    CUresult r = d->memHostAlloc(&host, sizeof(FaultRecord), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
    if (r != CUDA_SUCCESS) throw std::runtime_error(cu_error("cuMemHostAlloc", r));
    CUdeviceptr dev = 0;
    if ((r = d->memHostGetDevicePointer(&dev, host, 0)) != CUDA_SUCCESS)
      throw std::runtime_error(cu_error("cuMemHostGetDevicePointer", r));
    std::memset(host, 0, sizeof(FaultRecord));
    e->fault_host = static_cast<FaultRecord*>(host);
    e->fault_dev = static_cast<uint64_t>(dev);
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_entries.push_back(std::move(e));
  return static_cast<int64_t>(g_entries.size() - 1);
}

std::vector<Buffer> buffers(py::list items) {
  std::vector<Buffer> out;
  for (py::handle h : items) {
    py::tuple t = h.cast<py::tuple>();
    Buffer b;
    b.ptr = t[0].cast<uint64_t>();
    b.dims = t[1].cast<std::vector<int64_t>>();
    b.dtype = kb::dtype_from_name(t[2].cast<std::string>());
    out.push_back(std::move(b));
  }
  return out;
}

py::tuple pack(int64_t id, py::list operands, py::list results) {
  const Entry* e = find_entry(id);
  if (e == nullptr) throw py::key_error("unknown launch entry " + std::to_string(id));
  auto packed = std::make_unique<Packed>();
  kb::Error err = prepare(*e, buffers(operands), buffers(results), *packed);
  if (err) raise_contract_error(err, e->contract.kernel);
  const kb::LaunchConfig& c = packed->cfg;
  return py::make_tuple(py::make_tuple(c.grid[0], c.grid[1], c.grid[2]),
                        py::make_tuple(c.block[0], c.block[1], c.block[2]), c.smem, c.skip,
                        py::bytes(reinterpret_cast<const char*>(packed->buf), packed->size));
}

// Set fault records as bridge.stream.raise_faults reads them: (kernel, sites, site, index, extent, stream).
py::list take_faults() {
  py::list out;
  std::vector<Entry*> hit;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto& e : g_entries)
      if (e->fault_host != nullptr && e->fault_host->flag != 0) hit.push_back(e.get());
  }
  for (Entry* e : hit) {
    py::dict sites;
    for (const kb::FaultSite& s : e->contract.fault_sites) sites[py::int_(s.id)] = py::make_tuple(s.array, s.file, s.line, s.text);
    FaultRecord* r = e->fault_host;
    out.append(py::make_tuple(e->contract.kernel, sites, r->site, r->index, r->extent, 0));
    r->site = 0;
    r->index = r->extent = 0;
    r->flag = 0;
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_jax_ffi, m) {
  m.doc() = "XLA FFI launch handler for dsl.jax.kernel_call (cpp/jax/kb_jax_ffi.cpp)";
  m.def("handler", [] { return py::capsule(reinterpret_cast<void*>(&KbDslLaunch)); },
        "The FFI handler as a PyCapsule, for jax.ffi.register_ffi_target(..., platform='CUDA').");
  m.def("register", &register_entry, py::arg("function"), py::arg("context"), py::arg("device"),
        py::arg("contract_json"), py::arg("limits"), py::arg("attrs"), py::arg("grid"), py::arg("block"),
        py::arg("smem"), py::arg("slots"),
        "Register a launch entry; returns its id (the handler's launch_id attribute). slots: per kernel "
        "parameter ('operand', i) | ('result', j) | ('scalar', value).");
  m.def("pack", &pack, py::arg("entry"), py::arg("operands"), py::arg("results"),
        "Validate buffers [(ptr, shape, dtype)] against an entry and pack its parameters, as the handler "
        "does: (grid, block, smem, skip, parameter bytes). Raises the bridge's typed error.");
  m.def("take_faults", &take_faults, "Read and clear the set fault records of every entry.");
  m.def("entry_count", [] {
    std::lock_guard<std::mutex> lock(g_mu);
    return g_entries.size();
  });
  m.def("driver_available", [] { return driver() != nullptr; });
}
