// The native launch hot path: Launcher (one compiled function + its contract) and Dispatcher (argument
// signature -> Launcher, for generic kernels). Their Python bindings and fastcalls: launcher.cpp.
//
// Per launch, all in C++: intake every argument (plan cache by Python type), validate with the ONE
// validator (kb::validate), order after producer streams, pack the parameter buffer per `abi`, append
// the fault-record pointer, cuLaunchKernel, keep temporaries alive until the launch completes.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>   // header-only: a profiler injects itself at run time, nothing is linked
#define KB_HAVE_NVTX 1
#endif
#endif

#include "errors.hpp"
#include "intake.hpp"
#include "kernelbridge/contract.hpp"
#include "native.hpp"
#include "runtime.hpp"
#include "scalars.hpp"

namespace py = pybind11;

namespace kb::native {
// Helpers of the launch path (one translation unit includes this header: launcher.cpp).
namespace launch_detail {

constexpr int kStackArgs = 16;

// Opt-in NVTX ranges around each launch, named after the kernel (KB_NVTX=1 or bridge.set_nvtx(True)).
inline bool g_nvtx = [] {
  const char* v = std::getenv("KB_NVTX");
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}();
inline uint64_t g_nvtx_ranges = 0;   // ranges pushed (tests read it)

#ifdef KB_HAVE_NVTX
struct NvtxRange {
  bool on;
  NvtxRange(bool o, const std::string& name) : on(o) {
    if (on) {
      nvtxRangePushA(name.c_str());
      ++g_nvtx_ranges;
    }
  }
  ~NvtxRange() {
    if (on) nvtxRangePop();
  }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
#endif
constexpr size_t kMaxParamBytes = 32764;   // CUDA >= 12.1 kernel parameter limit
inline std::atomic<uint64_t> g_next_launcher_id{1};

enum class Plan : uint8_t { unknown, scalar, array };

// Launch configuration as given by the caller, before the validator resolves it.
struct Given {
  kb::LaunchConfig cfg;
  py::object stream;   // None: this thread's current stream at call time
};

// grid / block / shared_mem as the caller gave them; errors are the contract's classes naming the
// kernel (GridSizeError, BlockSizeError, SharedMemoryError: parse_launch_dims in intake_errors.cpp).
inline void parse_dims(py::handle obj, const char* what, int64_t out[3], const KernelName& kernel) {
  parse_launch_dims(obj.ptr(), what, out, kernel);
}

inline Given make_given(py::handle grid, py::handle block, py::handle smem, py::handle stream, const KernelName& kernel) {
  Given g;
  int64_t b[3];
  parse_dims(grid, "grid", g.cfg.grid, kernel);
  parse_dims(block, "block", b, kernel);
  for (int i = 0; i < 3; ++i)
    g.cfg.block[i] = static_cast<int>(std::max<int64_t>(INT_MIN, std::min<int64_t>(INT_MAX, b[i])));
  g.cfg.smem = parse_shared_mem(smem.ptr(), kernel);
  g.stream = py::reinterpret_borrow<py::object>(stream);
  return g;
}

inline uint64_t resolve_stream(PyObject* s) {
  if (s == Py_None) return kb::rt::current_stream();
  if (PyLong_Check(s)) {
    unsigned long long h = PyLong_AsUnsignedLongLong(s);
    if (PyErr_Occurred()) throw py::error_already_set();
    return h;
  }
  py::handle obj(s);
  if (py::hasattr(obj, "__cuda_stream__")) {
    py::object r = obj.attr("__cuda_stream__")();
    py::tuple t = py::reinterpret_borrow<py::tuple>(r);
    if (!PyTuple_Check(r.ptr()) || t.size() != 2 || t[0].cast<int>() != 0)
      throw py::type_error("stream: __cuda_stream__() must return (0, handle)");
    return t[1].cast<uint64_t>();
  }
  if (py::hasattr(obj, "handle")) return obj.attr("handle").cast<uint64_t>();
  throw py::type_error(std::string("stream must be a bridge.Stream, an object with __cuda_stream__, an int "
                                   "handle or None, got ") + Py_TYPE(s)->tp_name);
}

// Re-raise an intake failure so the message names the kernel and the argument (numbered as the
// validator does); the producer's own error is kept as __cause__ (raise_for_argument, intake_errors.cpp).
[[noreturn]] inline void rethrow_intake_error(py::error_already_set& err, const kb::LaunchContract& c, int i) {
  std::string name = i < static_cast<int>(c.args.size()) ? c.args[i].name : std::string("?");
  raise_for_argument(err, c.kernel, i, name);
}

}  // namespace launch_detail
using namespace launch_detail;  // NOLINT: the classes below and launcher.cpp use these names

// One compiled function with its contract, limits and attributes: the unit every launch goes through.
class Launcher {
 public:
  Launcher(uint64_t func, py::object contract, py::object limits, py::object attrs, int device,
           py::object fault_info)
      : func_(reinterpret_cast<CUfunction>(static_cast<uintptr_t>(func))),
        contract_(contract.cast<const kb::LaunchContract&>()),
        limits_(limits.cast<const kb::DeviceLimits&>()),
        attrs_(attrs.cast<const kb::FuncAttrs&>()),
        device_(device),
        id_(g_next_launcher_id++),
        contract_obj_(std::move(contract)) {
    if (fault_info.is_none() && !contract_.fault_sites.empty()) {
      py::dict d;
      for (const kb::FaultSite& s : contract_.fault_sites)
        d[py::int_(s.id)] = py::make_tuple(s.array, s.file, s.line, s.text);
      fault_info = d;
    }
    fault_info_ = std::move(fault_info);
    plan_.assign(contract_.args.size(), Plan::unknown);
    plan_types_.assign(contract_.args.size(), nullptr);
  }
  ~Launcher() { kb::rt::forget_launcher(id_); }

  const kb::LaunchContract& contract() const { return contract_; }
  py::object contract_obj() const { return contract_obj_; }
  const kb::FuncAttrs& attrs() const { return attrs_; }
  int device() const { return device_; }
  uint64_t id() const { return id_; }

  // Read one argument into `v` (array through the intake, scalar through argvalue_from_scalar).
  void read_arg(int i, PyObject* obj, kb::ArgValue& v, IntakeInfo& info, uint64_t stream,
                IntakeMemo& memo) {
    PyTypeObject* t = Py_TYPE(obj);
    Plan p = Plan::unknown;
    if (i < static_cast<int>(plan_.size()) && plan_types_[i] == t) p = plan_[i];
    try {
      if (p == Plan::array) {
        if (intake(obj, v.array, info, static_cast<int64_t>(stream), &memo)) { v.kind = kb::ArgKind::array; return; }
      } else if (p == Plan::scalar) {
        if (argvalue_from_scalar(obj, v)) { v.kind = kb::ArgKind::scalar; return; }
      }
      if (argvalue_from_scalar(obj, v)) {
        v.kind = kb::ArgKind::scalar;
        p = Plan::scalar;
      } else if (intake(obj, v.array, info, static_cast<int64_t>(stream), &memo)) {
        v.kind = kb::ArgKind::array;
        p = Plan::array;
      } else {
        v = kb::ArgValue{};
        v.kind = kb::ArgKind::scalar;
        v.scalar_kind = kb::ArgValue::ScalarKind::none;
        v.type_name = t->tp_name;
        return;
      }
    } catch (py::error_already_set& e) {
      rethrow_intake_error(e, contract_, i);
    } catch (py::builtin_exception& e) {  // pybind11's C++-side errors (cast_error, ...): the same treatment
      e.set_error();
      py::error_already_set err;
      rethrow_intake_error(err, contract_, i);
    }
    if (i < static_cast<int>(plan_.size())) {
      plan_types_[i] = t;
      plan_[i] = p;
    }
  }

  // Launch `n` arguments already read (vals/infos) with the caller's configuration.
  // temp_refcount: an argument whose reference count (less our keepalive) is at most this is a
  // temporary only this call holds; it is kept alive until the launch completes.
  // inner: optional per-argument flags for arrays taken out of a Tiling (held by it: a temporary when
  // nothing else references them).
  void launch_prepared(PyObject* const* objs, int n, kb::ArgValue* vals, IntakeInfo* infos,
                       kb::LaunchConfig cfg, uint64_t stream, Py_ssize_t temp_refcount,
                       const uint8_t* inner = nullptr) {
    kb::Error e = kb::validate(contract_, vals, n, cfg, limits_, attrs_);
    if (e) throw_contract_error(e, contract_.kernel);
    if (cfg.skip) return;
    if (cfg.smem < 0) cfg.smem = 0;
    const kb::drv::Api& a = kb::drv::require();
    alignas(16) unsigned char buf[kMaxParamBytes + 16];
    size_t size = pack(vals, n, stream, buf);

    // Context: the device's primary context (CuPy and PyTorch use the same one).
    if (ctx_ == nullptr) ctx_ = kb::drv::primary_context(device_);
    CUcontext cur = nullptr;
    kb::drv::check(a.ctxGetCurrent(&cur), "ctxGetCurrent");
    if (cur != ctx_) kb::drv::check(a.ctxSetCurrent(ctx_), "ctxSetCurrent");

    const Capture capture = capture_of(stream);
    if (capture == Capture::none) order_before(vals, infos, n, stream);
    // Opt in to more dynamic shared memory than the function's current maximum (validated above).
    if (cfg.smem > attrs_.max_dynamic_smem) {
      kb::drv::check(a.funcSetAttribute(func_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(cfg.smem)),
                     "funcSetAttribute");
      attrs_.max_dynamic_smem = cfg.smem;
    }
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    {
#ifdef KB_HAVE_NVTX
      NvtxRange range(g_nvtx, contract_.kernel);
#endif
      kb::drv::check(a.launchKernel(func_, static_cast<unsigned>(cfg.grid[0]), static_cast<unsigned>(cfg.grid[1]),
                                    static_cast<unsigned>(cfg.grid[2]), static_cast<unsigned>(cfg.block[0]),
                                    static_cast<unsigned>(cfg.block[1]), static_cast<unsigned>(cfg.block[2]),
                                    static_cast<unsigned>(cfg.smem),
                                    reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)), nullptr, extra),
                     "launchKernel");
    }
    if (capture == Capture::foreign) return;   // see capture_of
    record_after(vals, n, stream, capture == Capture::bridge);
    keep_alive(objs, vals, infos, n, stream, capture == Capture::bridge, temp_refcount, inner);
  }

  // Intake + validation only, never the driver: the CPU simulator's launches (limits.host_memory) go
  // through the same validator as the GPU's. Returns the configuration the validator settled on.
  py::tuple validate_only(py::tuple args, kb::LaunchConfig cfg) {
    const int n = static_cast<int>(args.size());
    std::vector<kb::ArgValue> vals(static_cast<size_t>(n));
    std::vector<IntakeInfo> infos(static_cast<size_t>(n));
    IntakeMemo memo;
    for (int i = 0; i < n; ++i) read_arg(i, args[static_cast<size_t>(i)].ptr(), vals[i], infos[i], 0, memo);
    kb::Error e = kb::validate(contract_, vals.data(), n, cfg, limits_, attrs_);
    if (e) throw_contract_error(e, contract_.kernel);
    return py::make_tuple(py::make_tuple(cfg.grid[0], cfg.grid[1], cfg.grid[2]),
                          py::make_tuple(cfg.block[0], cfg.block[1], cfg.block[2]),
                          cfg.smem < 0 ? int64_t{0} : cfg.smem, cfg.skip);
  }

  void launch_tuple(py::handle args, const kb::LaunchConfig& cfg, uint64_t stream, Py_ssize_t temp_refcount) {
    launch_objs(PySequence_Fast_ITEMS(args.ptr()), static_cast<int>(PyTuple_GET_SIZE(args.ptr())), cfg, stream,
                temp_refcount);
  }

  void launch_objs(PyObject* const* objs, int n, const kb::LaunchConfig& cfg, uint64_t stream,
                   Py_ssize_t temp_refcount) {
    if (n <= kStackArgs) {
      kb::ArgValue vals[kStackArgs];
      IntakeInfo infos[kStackArgs];
      IntakeMemo memo;
      for (int i = 0; i < n; ++i) read_arg(i, objs[i], vals[i], infos[i], stream, memo);
      launch_prepared(objs, n, vals, infos, cfg, stream, temp_refcount);
    } else {
      std::vector<kb::ArgValue> vals(n);
      std::vector<IntakeInfo> infos(n);
      IntakeMemo memo;
      for (int i = 0; i < n; ++i) read_arg(i, objs[i], vals[i], infos[i], stream, memo);
      launch_prepared(objs, n, vals.data(), infos.data(), cfg, stream, temp_refcount);
    }
  }

 private:
  enum class Capture : uint8_t { none, bridge, foreign };

  // How `stream` is being captured into a CUDA graph: by bridge.capture() (the graph records buffers
  // and byte ranges), by someone else (torch.cuda.graph, CuPy, ...: the launch only adds its node —
  // no event queries, no memory log, no keepalive, which the capture would forbid; buffers used in a
  // foreign graph must outlive it, as with any CUDA graph), or not at all.
  Capture capture_of(uint64_t stream) {
    if (kb::rt::capture_active() && kb::rt::stream_captured(stream)) return Capture::bridge;
    if (stream <= 1) return Capture::none;   // the legacy default stream cannot be captured
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (kb::drv::require().streamIsCapturing(reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)), &st) !=
        CUDA_SUCCESS)
      return Capture::none;
    return st == CU_STREAM_CAPTURE_STATUS_NONE ? Capture::none : Capture::foreign;
  }

  // The parameter buffer: arrays per abi, scalars in their dtype, then the fault record. Returns bytes.
  size_t pack(const kb::ArgValue* vals, int n, uint64_t stream, unsigned char* buf) {
    size_t off = 0;
    auto put = [&](const void* p, size_t size, size_t align) {
      off = (off + align - 1) / align * align;
      if (off + size > kMaxParamBytes)
        throw py::value_error(contract_.kernel + ": kernel parameters exceed " +
                              std::to_string(kMaxParamBytes) + " bytes");
      std::memcpy(buf + off, p, size);
      off += size;
    };
    for (int i = 0; i < n; ++i) {
      const kb::ArgSpec& spec = contract_.args[i];
      const kb::ArgValue& v = vals[i];
      if (spec.kind == kb::ArgKind::array) {
        const uint64_t ptr = v.array.ptr;
        put(&ptr, 8, 8);
        if (spec.abi == kb::Abi::view) {
          const int64_t item = v.array.itemsize();
          for (int d = 0; d < v.array.ndim; ++d) put(&v.array.shape[d], 8, 8);
          for (int d = 0; d < v.array.ndim; ++d) {
            const int64_t s = v.array.strides[d] / item;
            put(&s, 8, 8);
          }
        }
      } else {
        unsigned char tmp[16];
        const kb::DType dt = spec.dtype == kb::DType::any ? v.scalar_dtype : spec.dtype;
        const int size = kb::pack_scalar(v, dt, tmp);
        if (size <= 0)
          throw py::type_error(contract_.kernel + ": argument '" + spec.name + "' (#" +
                               std::to_string(i) + "): scalars of dtype " + kb::dtype_name(dt) +
                               " cannot be passed to a kernel");
        put(tmp, static_cast<size_t>(size), static_cast<size_t>(size));
      }
    }
    if (contract_.has_fault_buffer) {
      // The (stream, launcher) record is stable while this launcher lives: remember the last one
      // instead of searching the process-wide table on every launch.
      if (stream != fault_stream_) {
        fault_rec_ = kb::rt::fault_record(stream, id_, device_, contract_.kernel, fault_info_);
        fault_stream_ = stream;
      }
      put(&fault_rec_, 8, 8);
    }
    return off;
  }

  // Order after the streams that wrote (for writes: also read) these bytes, whichever object named
  // them, and after each foreign producer's own stream (event record + wait, no host block).
  void order_before(const kb::ArgValue* vals, const IntakeInfo* infos, int n, uint64_t stream) {
    uint64_t done[kStackArgs];
    int ndone = 0;
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array) continue;
      uint64_t lo, hi;
      vals[i].array.extent(lo, hi);
      kb::rt::order_use(lo, hi, stream, device_, contract_.args[i].writable());
      const IntakeInfo& inf = infos[i];
      if (!inf.has_producer_stream) continue;
      const uint64_t p = inf.producer_stream;
      if (p == stream || std::find(done, done + ndone, p) != done + ndone) continue;
      kb::rt::order_after(p, stream, device_, inf.producer_generation);
      if (ndone < kStackArgs) done[ndone++] = p;
    }
  }

  // Record what this launch touched, by memory. A launch captured by bridge.capture() runs nothing
  // now: the graph remembers its ranges and Graph.replay orders and records them on the replay stream.
  void record_after(const kb::ArgValue* vals, int n, uint64_t stream, bool captured) {
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array) continue;
      uint64_t lo, hi;
      vals[i].array.extent(lo, hi);
      const bool write = contract_.args[i].writable();
      if (captured) kb::rt::capture_use(stream, kb::rt::CapturedUse{lo, hi, device_, write});
      else kb::rt::note_use(lo, hi, stream, device_, write);
    }
  }

  // Lifetimes: a graph keeps every buffer it uses; otherwise temporaries live until completion.
  void keep_alive(PyObject* const* objs, const kb::ArgValue* vals, const IntakeInfo* infos, int n,
                  uint64_t stream, bool captured, Py_ssize_t temp_refcount, const uint8_t* inner) {
    if (captured) {
      for (int i = 0; i < n; ++i) {
        kb::rt::capture_keep(stream, objs[i]);
        if (infos[i].keepalive) kb::rt::capture_keep(stream, infos[i].keepalive);
      }
      return;
    }
    py::list temps;
    bool any = false;
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array) continue;
      const Py_ssize_t refs = Py_REFCNT(objs[i]) - (infos[i].keepalive.ptr() == objs[i] ? 1 : 0);
      if (refs > (inner && inner[i] ? 1 : temp_refcount)) continue;
      if (!any) { temps = py::list(); any = true; }
      temps.append(objs[i]);
      if (infos[i].keepalive) temps.append(infos[i].keepalive);
    }
    if (any) kb::rt::keep_until_complete(stream, device_, std::move(temps));
    kb::rt::poll_keepalive();
  }

  CUfunction func_;
  kb::LaunchContract contract_;
  kb::DeviceLimits limits_;
  kb::FuncAttrs attrs_;
  int device_;
  uint64_t id_;
  CUcontext ctx_ = nullptr;
  uint64_t fault_stream_ = UINT64_MAX;   // stream of fault_rec_ (UINT64_MAX: none yet)
  uint64_t fault_rec_ = 0;               // device address of this launcher's record on fault_stream_
  py::object contract_obj_;
  py::object fault_info_;
  std::vector<Plan> plan_;
  std::vector<PyTypeObject*> plan_types_;
};

// Maps an argument signature (per argument: type, dtype, ndim, C-contiguity, 16-byte alignment, and
// optionally last extent % 8 == 0) to a Launcher; on a miss asks `miss_callback(args) -> Launcher` (the
// DSL specialises generic kernels). A plan per position lets the tile model use the same path:
// kPartition positions take a Tiling (its array is launched, its tile shape joins the key), kConstant
// positions join the key by value (hash + equality) and are not passed to the kernel.
class Dispatcher {
 public:
  enum Kind : uint8_t { kPass = 0, kPartition = 1, kConstant = 2 };
  static constexpr int kKeyWords = 3;

  Dispatcher(py::object miss, py::object plan, bool key_div8, py::object names, std::string kernel)
      : miss_(std::move(miss)), key_div8_(key_div8), kernel_(std::move(kernel)) {
    if (!plan.is_none())
      for (py::handle k : plan) {
        int v = k.cast<int>();
        if (v < kPass || v > kConstant) throw py::value_error("Dispatcher plan: kinds are 0, 1 or 2");
        plan_.push_back(static_cast<uint8_t>(v));
      }
    if (!names.is_none())
      for (py::handle n : names) names_.push_back(n.cast<std::string>());
  }

  void launch_tuple(py::handle args, const kb::LaunchConfig& cfg, uint64_t stream) {
    launch_objs(PySequence_Fast_ITEMS(args.ptr()), static_cast<int>(PyTuple_GET_SIZE(args.ptr())), args, cfg,
                stream, kb::rt::g_temporary_refcount_native);
  }

  // `args`: the arguments as a tuple when the caller has one (the miss callback takes it), else empty.
  void launch_objs(PyObject* const* objs, int n, py::handle args, const kb::LaunchConfig& cfg, uint64_t stream,
                   Py_ssize_t temp_refcount) {
    // No heap allocation on the hot path for up to kStackArgs arguments.
    kb::ArgValue vals_stack[kStackArgs];
    IntakeInfo infos_stack[kStackArgs];
    uint64_t key_stack[kKeyWords * kStackArgs];
    PyObject* flat_stack[kStackArgs];
    uint8_t inner_stack[kStackArgs];
    PyObject* consts_stack[kStackArgs];
    std::vector<kb::ArgValue> vals_heap;
    std::vector<IntakeInfo> infos_heap;
    std::vector<uint64_t> key_heap;
    std::vector<PyObject*> flat_heap, consts_heap;
    std::vector<uint8_t> inner_heap;
    kb::ArgValue* vals = vals_stack;
    IntakeInfo* infos = infos_stack;
    uint64_t* key = key_stack;
    PyObject** flat = flat_stack;
    uint8_t* inner = inner_stack;
    PyObject** consts = consts_stack;
    if (n > kStackArgs) {
      vals_heap.resize(static_cast<size_t>(n));
      infos_heap.resize(static_cast<size_t>(n));
      key_heap.resize(kKeyWords * static_cast<size_t>(n));
      flat_heap.resize(static_cast<size_t>(n));
      inner_heap.resize(static_cast<size_t>(n));
      consts_heap.resize(static_cast<size_t>(n));
      vals = vals_heap.data();
      infos = infos_heap.data();
      key = key_heap.data();
      flat = flat_heap.data();
      inner = inner_heap.data();
      consts = consts_heap.data();
    }
    // a call whose arity differs from the plan cannot hit: the miss callback refuses it
    const bool planned = !plan_.empty() && static_cast<int>(plan_.size()) == n;
    if (!plan_.empty() && !planned) {
      miss_(as_tuple(objs, n, args));
      throw py::type_error(kernel_ + ": expected " + std::to_string(plan_.size()) + " arguments, got " +
                           std::to_string(n));
    }
    IntakeMemo memo;
    int nflat = 0, nconst = 0;
    for (int i = 0; i < n; ++i) {
      PyObject* o = objs[i];
      uint64_t* k = key + kKeyWords * i;
      k[0] = reinterpret_cast<uintptr_t>(Py_TYPE(o));
      k[1] = k[2] = 0;
      const uint8_t kind = planned ? plan_[i] : kPass;
      if (kind == kConstant) {
        Py_hash_t h = PyObject_Hash(o);
        if (h == -1) {           // unhashable: the miss callback says so
          PyErr_Clear();
          k[1] = 3;
        } else {
          k[2] = static_cast<uint64_t>(h);
        }
        consts[nconst++] = o;
        continue;
      }
      if (kind == kPartition) {
        PyTypeObject* tt = tiling_type();
        if (!tt || !PyObject_TypeCheck(o, tt)) {
          k[1] = 4;              // not a partition: the miss callback says so
          flat[nflat] = o;
          vals[nflat] = kb::ArgValue{};
          inner[nflat++] = 0;
          continue;
        }
        const Tiling& t = py::handle(o).cast<const Tiling&>();
        uint64_t bits = static_cast<uint64_t>(t.ndim);
        for (int d = 0; d < t.ndim; ++d) bits = bits * 64 + static_cast<uint64_t>(__builtin_ctzll(t.tile[d]));
        k[2] = bits;
        o = t.array.ptr();
        k[0] = reinterpret_cast<uintptr_t>(Py_TYPE(o));
        inner[nflat] = 1;
      } else {
        inner[nflat] = 0;
      }
      flat[nflat] = o;
      kb::ArgValue& v = vals[nflat];
      IntakeInfo& info = infos[nflat];
      ++nflat;
      if (argvalue_from_scalar(o, v)) {
        v.kind = kb::ArgKind::scalar;
        continue;
      }
      bool is_array;
      try {
        is_array = intake(o, v.array, info, static_cast<int64_t>(stream), &memo);
      } catch (py::error_already_set& e) {
        rethrow_positional(e, i);
      }
      if (!is_array) {
        v.kind = kb::ArgKind::scalar;
        v.scalar_kind = kb::ArgValue::ScalarKind::none;
        v.type_name = Py_TYPE(o)->tp_name;
        k[1] |= 1;
        continue;
      }
      v.kind = kb::ArgKind::array;
      const kb::ArrayView& a = v.array;
      const bool div8 = key_div8_ && a.ndim > 0 && a.shape[a.ndim - 1] % 8 == 0;
      k[1] |= (uint64_t{1} << 40) | (static_cast<uint64_t>(a.dtype) << 16) |
              (static_cast<uint64_t>(static_cast<uint32_t>(a.ndim)) << 4) | (div8 ? 8u : 0u) |
              (a.is_c_contiguous() ? 2u : 0u) | (a.ptr % 16 == 0 ? 1u : 0u);
    }
    const size_t klen = kKeyWords * static_cast<size_t>(n);
    Launcher* target = nullptr;
    if (last_ >= 0 && matches(entries_[last_], key, klen, consts, nconst)) target = entries_[last_].launcher;
    for (size_t j = 0; target == nullptr && j < entries_.size(); ++j)
      if (matches(entries_[j], key, klen, consts, nconst)) {
        target = entries_[j].launcher;
        last_ = static_cast<int>(j);
      }
    if (target == nullptr) {
      py::object l = miss_(as_tuple(objs, n, args));
      target = l.cast<Launcher*>();
      py::tuple kept(nconst);
      for (int c = 0; c < nconst; ++c) kept[c] = py::reinterpret_borrow<py::object>(consts[c]);
      entries_.push_back(Entry{std::vector<uint64_t>(key, key + klen), l, target, std::move(kept)});
      last_ = static_cast<int>(entries_.size() - 1);
    }
    target->launch_prepared(flat, nflat, vals, infos, cfg, stream, temp_refcount, inner);
  }

  size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); last_ = -1; }
  const py::object& miss_callback() const { return miss_; }  // names the kernel in configuration errors

 private:
  struct Entry {
    std::vector<uint64_t> key;
    py::object owner;
    Launcher* launcher;
    py::tuple consts;          // constant arguments of this specialisation (compared by value)
  };

  static py::tuple as_tuple(PyObject* const* objs, int n, py::handle args) {
    if (args && PyTuple_Check(args.ptr())) return py::reinterpret_borrow<py::tuple>(args);
    py::tuple t(n);
    for (int i = 0; i < n; ++i) t[i] = py::reinterpret_borrow<py::object>(objs[i]);
    return t;
  }

  static bool matches(const Entry& e, const uint64_t* key, size_t klen, PyObject* const* consts, int nconst) {
    if (e.key.size() != klen || !std::equal(key, key + klen, e.key.begin())) return false;
    for (int c = 0; c < nconst; ++c) {
      PyObject* mine = PyTuple_GET_ITEM(e.consts.ptr(), c);
      if (mine == consts[c]) continue;
      int eq = PyObject_RichCompareBool(mine, consts[c], Py_EQ);
      if (eq < 0) { PyErr_Clear(); return false; }
      if (!eq) return false;
    }
    return true;
  }

  // An intake failure before any Launcher is known: name the kernel and the argument.
  [[noreturn]] void rethrow_positional(py::error_already_set& err, int i) {
    std::string name = i < static_cast<int>(names_.size()) ? names_[i] : std::string("?");
    std::string prefix = kernel_ + ": argument '" + name + "' (#" + std::to_string(i) + "): ";
    py::object errors = py::module_::import("bridge.errors");
    py::object base = errors.attr("LaunchContractError");
    py::object cls = err.type();
    std::string msg = py::str(err.value());
    if (!PyObject_IsSubclass(cls.ptr(), base.ptr())) cls = errors.attr("ArgumentKindError");
    py::object exc = cls(prefix + msg, py::arg("kernel") = kernel_, py::arg("arg") = i, py::arg("arg_name") = name);
    PyObject* cause = err.value().ptr();
    Py_XINCREF(cause);
    PyException_SetCause(exc.ptr(), cause);
    PyErr_Clear();
    PyErr_SetObject(cls.ptr(), exc.ptr());
    throw py::error_already_set();
  }

  py::object miss_;
  std::vector<uint8_t> plan_;
  bool key_div8_ = false;
  std::vector<std::string> names_;
  std::string kernel_;
  std::vector<Entry> entries_;
  int last_ = -1;
};

}  // namespace kb::native
