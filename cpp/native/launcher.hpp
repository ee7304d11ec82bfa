// The native launch hot path: Launcher (one compiled function + its contract; the Dispatcher that maps
// argument signatures to Launchers is dispatcher.hpp). Their Python bindings and fastcalls: launcher.cpp.
//
// Per launch, all in C++: intake every argument (plan cache by Python type), validate with the ONE
// validator (kb::validate), order after producer streams, pack the parameter buffer per `abi`, append
// the fault-record pointer, cuLaunchKernel, keep temporaries alive until the launch completes.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>
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
#include "kernelbridge/detail/tensor_map.hpp"
#include "launch_features.hpp"
#include "native.hpp"
#include "runtime.hpp"
#include "scalars.hpp"

namespace py = pybind11;

namespace kb::native {
// Helpers of the launch path (one translation unit includes this header: launcher.cpp).
namespace launch_detail {

constexpr int kStackArgs = 16;

// Opt-in NVTX ranges around each launch, named after the kernel (bridge.set_nvtx(True), or KB_NVTX=1,
// which bridge/profiling.py reads through bridge/settings.py and applies when bridge is imported).
inline bool g_nvtx = false;
inline uint64_t g_nvtx_ranges = 0;   // ranges pushed (tests read it)

// Launch-path phase timer for contributors (docs/contributing.md, "Profiling the launch path"): compiled
// in only with -DKB_LAUNCH_PHASES=ON, where each mark adds the TSC ticks since the previous one to its
// phase; _native.launch_phases() reads them. Off (the default) the marks are empty statements.
#if defined(KB_LAUNCH_PHASES) && (defined(__x86_64__) || defined(__i386__))
#define KB_PHASES_ON 1
constexpr int kPhases = 8;
inline const char* const kPhaseNames[kPhases] = {"intake (+ dispatch key)", "validate", "device + pack",
                                                 "order before", "driver launch", "record after",
                                                 "keep alive", "return"};
inline uint64_t g_phase_ticks[kPhases] = {};
inline uint64_t g_phase_last = 0;
inline uint64_t g_phase_calls = 0;
inline void phase_begin() { g_phase_last = __builtin_ia32_rdtsc(); ++g_phase_calls; }
inline void phase_mark(int i) {
  const uint64_t t = __builtin_ia32_rdtsc();
  g_phase_ticks[i] += t - g_phase_last;
  g_phase_last = t;
}
#define KB_PHASE_BEGIN() ::kb::native::launch_detail::phase_begin()
#define KB_PHASE(i) ::kb::native::launch_detail::phase_mark(i)
#else
#define KB_PHASE_BEGIN() ((void)0)
#define KB_PHASE(i) ((void)0)
#endif

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
inline std::atomic<uint64_t> g_next_launcher_id{1};

enum class Plan : uint8_t { unknown, scalar, array };

// Per argument position, what the Python type last seen there turned out to be (array or scalar), so
// the next call with that type tries the right reader first and reads the object once. Shared by the
// Launcher and the Dispatcher; positions past kStackArgs are read without a plan.
class ReadPlan {
 public:
  // One argument into `v`: a scalar, or an array view (and `info`); false for neither (`v` is then an
  // unsupported scalar naming its type, for the validator's message). Intake errors propagate.
  bool read(int i, PyObject* obj, kb::ArgValue& v, IntakeInfo& info, uint64_t stream, IntakeMemo& memo) {
    if (obj == Py_None) {   // an absent array: the validator allows it where the contract says optional
      v = kb::ArgValue::absent();
      return true;
    }
    PyTypeObject* t = Py_TYPE(obj);
    const bool known = i >= 0 && i < kStackArgs && types_[i] == t;
    Plan p = known ? plans_[i] : Plan::unknown;
    if (p == Plan::array) {
      if (intake(obj, v.array, info, static_cast<int64_t>(stream), &memo)) { v.kind = kb::ArgKind::array; return true; }
    } else if (p == Plan::scalar) {
      if (argvalue_from_scalar(obj, v)) { v.kind = kb::ArgKind::scalar; return true; }
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
      return false;
    }
    if (i >= 0 && i < kStackArgs) {
      types_[i] = t;
      plans_[i] = p;
    }
    return true;
  }

 private:
  PyTypeObject* types_[kStackArgs] = {};
  Plan plans_[kStackArgs] = {};
};

// Equal as far as the validator can tell: every field kb::validate reads (array views up to ndim).
inline bool same_launch_value(const kb::ArgValue& x, const kb::ArgValue& y) {
  if (x.kind != y.kind || x.none != y.none) return false;
  if (x.kind == kb::ArgKind::array) {
    const kb::ArrayView& a = x.array;
    const kb::ArrayView& b = y.array;
    if (a.ptr != b.ptr || a.ndim != b.ndim || a.dtype != b.dtype || a.device_type != b.device_type ||
        a.device_id != b.device_id || a.readonly != b.readonly || a.ndim < 0 || a.ndim > kb::kMaxDims)
      return false;
    for (int d = 0; d < a.ndim; ++d)
      if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
    return true;
  }
  return x.scalar_kind == y.scalar_kind && x.i == y.i && x.u == y.u && x.is_big_unsigned == y.is_big_unsigned &&
         std::memcmp(&x.f, &y.f, sizeof x.f) == 0 && x.scalar_dtype == y.scalar_dtype && x.huge_int == y.huge_int &&
         x.type_name == y.type_name;
}

// The last launch the ONE validator accepted, by value, with the configuration it resolved. kb::validate
// is a pure function of (contract, argument values, given configuration, device limits, function
// attributes); per Launcher the contract and limits are fixed and the attributes change only where the
// Launcher raises the function's dynamic shared memory (which forgets the acceptance), so a launch whose
// argument values, given configuration and peer mask equal the remembered ones has the validator's
// answer already: accepted, with `resolved`. Anything else (a new pointer, a shape or stride changed in place,
// another scalar) is validated again. This is a memo of the validator, not a second one: it never
// accepts what the validator would not, and refusals always come from the validator.
struct AcceptedLaunch {
  bool valid = false;
  int n = 0;
  kb::LaunchConfig given, resolved;
  uint64_t peer_mask = 0;
  kb::ArgValue vals[kStackArgs];

  bool same(const kb::ArgValue* v, int count, const kb::LaunchConfig& cfg, uint64_t peers) const {
    if (!valid || count != n || peers != peer_mask || cfg.smem != given.smem) return false;
    for (int d = 0; d < 3; ++d)
      if (cfg.grid[d] != given.grid[d] || cfg.block[d] != given.block[d]) return false;
    for (int i = 0; i < count; ++i)
      if (!same_launch_value(v[i], vals[i])) return false;
    return true;
  }
  void remember(const kb::ArgValue* v, int count, const kb::LaunchConfig& in, const kb::LaunchConfig& out,
                uint64_t peers) {
    valid = count <= kStackArgs;
    if (!valid) return;
    n = count;
    given = in;
    resolved = out;
    peer_mask = peers;
    std::copy(v, v + count, vals);
  }
  void forget() { valid = false; }   // the function attributes the acceptance relied on changed
};

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

// `pdl=`: True (or None) launches with the contract's PDL, False opts this launch out of it.
inline void set_pdl(Given& g, py::handle pdl, const KernelName& kernel) {
  if (pdl.is_none() || pdl.ptr() == Py_True) return;
  if (pdl.ptr() != Py_False)
    throw py::type_error(kernel.get() + ": pdl must be True or False, got " + std::string(py::repr(pdl)));
  g.cfg.no_pdl = true;
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

// --- devices (docs/architecture.md "Devices") ------------------------------------------------------
inline uint64_t device_bit(int d) { return d >= 0 && d < 64 ? uint64_t{1} << d : 0; }

inline bool is_device_array(const kb::ArgValue& v) {
  return v.kind == kb::ArgKind::array && v.array.device_type == kb::DeviceType::cuda && v.array.device_id >= 0;
}

// First device array among the arguments (-1: none).
inline int first_device_array(const kb::ArgValue* vals, int n) {
  for (int i = 0; i < n; ++i)
    if (is_device_array(vals[i])) return i;
  return -1;
}

// Bit d set for every cuda:d an array argument lives on.
inline uint64_t array_devices(const kb::ArgValue* vals, int n) {
  uint64_t m = 0;
  for (int i = 0; i < n; ++i)
    if (is_device_array(vals[i])) m |= device_bit(vals[i].array.device_id);
  return m;
}

// The device a launch runs on: its arrays' (the first device array's; the validator refuses arrays of
// other devices unless peer access is on), else its stream's, else the current device (device 0 when
// none is current). With peer access the arrays may span devices, so the stream's device comes first.
inline int launch_device(const kb::ArgValue* vals, int n, uint64_t stream, bool peer) {
  const int first = peer ? -1 : first_device_array(vals, n);
  if (first >= 0) return vals[first].array.device_id;
  const int sd = kb::rt::stream_device(stream);
  if (sd >= 0) return sd;
  if (peer) {
    const int any = first_device_array(vals, n);
    if (any >= 0) return vals[any].array.device_id;
  }
  const int cur = kb::drv::current_device();
  return cur >= 0 ? cur : 0;
}

// Raise bridge.errors.<cls>(message, kernel=, arg=, arg_name=) (a DeviceMismatchError or subclass).
[[noreturn]] inline void throw_device_error(const char* cls, const std::string& message, const std::string& kernel,
                                            int arg, const std::string& arg_name) {
  py::object type = py::module_::import("bridge.errors").attr(cls);
  py::object a = arg >= 0 ? py::object(py::int_(arg)) : py::object(py::none());
  py::object exc = type(py::str(message), py::arg("kernel") = kernel, py::arg("arg") = a,
                        py::arg("arg_name") = py::str(arg_name));
  PyErr_SetObject(type.ptr(), exc.ptr());
  throw py::error_already_set();
}

inline std::string hex_handle(uint64_t h) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(h));
  return buf;
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
    // Launch features (launch_features.hpp): decided once, so a plain launch pays one branch for them.
    features_ = contract_.has_launch_features() || attrs_.required_cluster[0] > 0 || attrs_.cluster_must_be_set;
    if (features_ && func_ != nullptr) occ_ = std::make_unique<DriverOccupancy>(func_, contract_, attrs_, device_);
    if (fault_info.is_none() && !contract_.fault_sites.empty()) {
      py::dict d;
      for (const kb::FaultSite& s : contract_.fault_sites)
        d[py::int_(s.id)] = py::make_tuple(s.array, s.file, s.line, s.text);
      fault_info = d;
    }
    fault_info_ = std::move(fault_info);
    tmaps_.resize(contract_.tensor_maps.size());
  }
  ~Launcher() { kb::rt::forget_launcher(id_); }

  const kb::LaunchContract& contract() const { return contract_; }
  py::object contract_obj() const { return contract_obj_; }
  const kb::FuncAttrs& attrs() const { return attrs_; }
  int device() const { return device_; }
  uint64_t id() const { return id_; }
  bool launch_features() const { return features_; }

  // Read one argument into `v` (ReadPlan); an intake error names this kernel's argument.
  void read_arg(int i, PyObject* obj, kb::ArgValue& v, IntakeInfo& info, uint64_t stream,
                IntakeMemo& memo) {
    try {
      reader_.read(i, obj, v, info, stream, memo);
    } catch (py::error_already_set& e) {
      rethrow_intake_error(e, contract_, i);
    } catch (py::builtin_exception& e) {  // pybind11's C++-side errors (cast_error, ...): the same treatment
      e.set_error();
      py::error_already_set err;
      rethrow_intake_error(err, contract_, i);
    }
  }

  // Launch `n` arguments already read (vals/infos) with the caller's configuration.
  // temp_refcount: an argument whose reference count (less our keepalive) is at most this is a
  // temporary only this call holds; it is kept alive until the launch completes.
  // inner: optional per-argument flags for arrays taken out of a Tiling (held by it: a temporary when
  // nothing else references them). peer: the launch may read and write other devices' arrays through
  // peer access (enabled here for the devices it names; docs/architecture.md "Devices").
  void launch_prepared(PyObject* const* objs, int n, kb::ArgValue* vals, IntakeInfo* infos,
                       kb::LaunchConfig cfg, uint64_t stream, Py_ssize_t temp_refcount,
                       const uint8_t* inner = nullptr, bool peer = false) {
    if (router_ && !router_.is_none()) {   // a kernel that loads itself on the device where it is launched
      const int d = launch_device(vals, n, stream, peer);
      if (d != device_) {
        routed(d).launch_prepared(objs, n, vals, infos, cfg, stream, temp_refcount, inner, peer);
        return;
      }
    }
    kb::DeviceLimits with_peers;
    const kb::DeviceLimits* lim = &limits_;
    if (peer) {
      with_peers = limits_;
      with_peers.peer_mask = array_devices(vals, n) & ~device_bit(device_);
      lim = &with_peers;
    }
    KB_PHASE(0);
    const bool no_pdl = cfg.no_pdl;         // a per-launch choice, not part of what was validated
    if (accepted_.same(vals, n, cfg, lim->peer_mask)) {
      cfg = accepted_.resolved;
      cfg.no_pdl = no_pdl;
      ++accepted_hits_;
    } else {
      const kb::LaunchConfig given = cfg;
      kb::Error e = kb::validate(contract_, vals, n, cfg, *lim, attrs_, occ_.get());
      if (e) throw_contract_error(e, contract_.kernel);
      if (cfg.skip) return;                  // nothing to launch: no stream or peer is touched
      accepted_.remember(vals, n, given, cfg, lim->peer_mask);
    }
    KB_PHASE(1);
    check_stream_device(vals, n, stream);
    if (peer && with_peers.peer_mask != 0) enable_peers(vals, n);
    if (cfg.smem < 0) cfg.smem = 0;
    const kb::drv::Api& a = kb::drv::require();
    // Context: the device's primary context (CuPy and PyTorch use the same one), for this launch only
    // (the fault-record pool, events and waits below are created in it); the caller's is restored.
    if (ctx_ == nullptr) ctx_ = kb::drv::primary_context(device_);
    kb::drv::ScopedDevice on(device_, ctx_);
    alignas(16) unsigned char buf[kMaxParamBytes + 16];
    size_t size = pack(vals, n, stream, buf);
    KB_PHASE(2);

    const Capture capture = capture_of(stream);
    if (contract_.cooperative && capture != Capture::none) {
      // The driver (CUDA 13.0, H200) answers a cooperative cuLaunchKernelEx inside a stream capture with
      // CUDA_ERROR_INVALID_VALUE, which also invalidates the user's whole capture: refuse it first.
      kb::Error e;
      e.code = kb::ErrorCode::cooperative_grid;
      e.message = contract_.kernel + ": a cooperative launch cannot be captured in a CUDA graph (the driver "
                  "refuses cooperative launches during stream capture); launch it outside the capture";
      throw_contract_error(e, contract_.kernel);
    }
    if (capture == Capture::none) order_before(vals, infos, n, stream);
    // Opt in to more dynamic shared memory than the function's current maximum (validated above).
    if (cfg.smem > attrs_.max_dynamic_smem) {
      kb::drv::check(a.funcSetAttribute(func_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(cfg.smem)),
                     "funcSetAttribute");
      attrs_.max_dynamic_smem = cfg.smem;
      accepted_.forget();
    }
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    KB_PHASE(3);
    {
#ifdef KB_HAVE_NVTX
      NvtxRange range(g_nvtx, contract_.kernel);
#endif
      CUlaunchAttribute ex[3];
      const unsigned nex = features_ ? launch_attributes(contract_, cfg, attrs_, limits_.cc, ex) : 0;
      if (nex == 0) {
        kb::drv::check(a.launchKernel(func_, static_cast<unsigned>(cfg.grid[0]), static_cast<unsigned>(cfg.grid[1]),
                                      static_cast<unsigned>(cfg.grid[2]), static_cast<unsigned>(cfg.block[0]),
                                      static_cast<unsigned>(cfg.block[1]), static_cast<unsigned>(cfg.block[2]),
                                      static_cast<unsigned>(cfg.smem),
                                      kb::rt::as_stream(stream), nullptr, extra),
                       "launchKernel");
      } else {
        if (occ_) occ_->allow_nonportable();
        kb::drv::check(launch_ex(a, func_, cfg, kb::rt::as_stream(stream), ex, nex, extra, contract_.kernel),
                       "launchKernelEx");
      }
    }
    KB_PHASE(4);
    if (capture == Capture::foreign) return;   // see capture_of
    record_after(vals, n, stream, capture == Capture::bridge);
    KB_PHASE(5);
    keep_alive(objs, vals, infos, n, stream, capture == Capture::bridge, temp_refcount, inner);
    KB_PHASE(6);
  }

  // The Launcher of the same kernel on device `d` (asked of the router once, then kept).
  Launcher& routed(int d) {
    for (auto& r : routes_)
      if (r.first == d) return *r.second.cast<Launcher*>();
    py::object l = router_(d);
    if (!py::isinstance<Launcher>(l))
      throw py::type_error(contract_.kernel + ": the device router must return a Launcher, got " +
                           std::string(Py_TYPE(l.ptr())->tp_name));
    Launcher* target = l.cast<Launcher*>();
    if (target->device() != d)
      throw py::value_error(contract_.kernel + ": the device router returned a Launcher of cuda:" +
                            std::to_string(target->device()) + " for a launch on cuda:" + std::to_string(d));
    routes_.emplace_back(d, l);
    return *target;
  }
  uint64_t accepted_hits() const { return accepted_hits_; }
  void set_router(py::object router) {
    router_ = std::move(router);
    routes_.clear();
  }
  py::object router() const { return router_ ? router_ : py::object(py::none()); }

  // Intake + validation only, never the driver: the CPU simulator's launches (limits.host_memory) go
  // through the same validator as the GPU's. Returns the configuration the validator settled on.
  py::tuple validate_only(py::tuple args, kb::LaunchConfig cfg) {
    const int n = static_cast<int>(args.size());
    std::vector<kb::ArgValue> vals(static_cast<size_t>(n));
    std::vector<IntakeInfo> infos(static_cast<size_t>(n));
    IntakeMemo memo;
    for (int i = 0; i < n; ++i) read_arg(i, args[static_cast<size_t>(i)].ptr(), vals[i], infos[i], 0, memo);
    kb::Error e = kb::validate(contract_, vals.data(), n, cfg, limits_, attrs_, occ_.get());
    if (e) throw_contract_error(e, contract_.kernel);
    return py::make_tuple(py::make_tuple(cfg.grid[0], cfg.grid[1], cfg.grid[2]),
                          py::make_tuple(cfg.block[0], cfg.block[1], cfg.block[2]),
                          cfg.smem < 0 ? int64_t{0} : cfg.smem, cfg.skip);
  }

  void launch_tuple(py::handle args, const kb::LaunchConfig& cfg, uint64_t stream, Py_ssize_t temp_refcount,
                    bool peer = false) {
    launch_objs(PySequence_Fast_ITEMS(args.ptr()), static_cast<int>(PyTuple_GET_SIZE(args.ptr())), cfg, stream,
                temp_refcount, peer);
  }

  void launch_objs(PyObject* const* objs, int n, const kb::LaunchConfig& cfg, uint64_t stream,
                   Py_ssize_t temp_refcount, bool peer = false) {
    if (n <= kStackArgs) {
      kb::ArgValue vals[kStackArgs];
      IntakeInfo infos[kStackArgs];
      IntakeMemo memo;
      for (int i = 0; i < n; ++i) read_arg(i, objs[i], vals[i], infos[i], stream, memo);
      launch_prepared(objs, n, vals, infos, cfg, stream, temp_refcount, nullptr, peer);
    } else {
      std::vector<kb::ArgValue> vals(n);
      std::vector<IntakeInfo> infos(n);
      IntakeMemo memo;
      for (int i = 0; i < n; ++i) read_arg(i, objs[i], vals[i], infos[i], stream, memo);
      launch_prepared(objs, n, vals.data(), infos.data(), cfg, stream, temp_refcount, nullptr, peer);
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
    if (kb::drv::require().streamIsCapturing(kb::rt::as_stream(stream), &st) !=
        CUDA_SUCCESS)
      return Capture::none;
    return st == CU_STREAM_CAPTURE_STATUS_NONE ? Capture::none : Capture::foreign;
  }

  // The parameter buffer: arrays per abi, scalars in their dtype, then the fault record. Returns bytes.
  // Kernels with tensor maps (64-byte aligned parameters) are packed at the offsets the driver reports
  // (cuFuncGetParamInfo): ptxas aligns such a parameter's address in the constant bank, not its offset
  // from the first parameter, so the buffer layout is not the naive one. Others keep the naive layout.
  size_t pack(const kb::ArgValue* vals, int n, uint64_t stream, unsigned char* buf) {
    const bool placed = !contract_.tensor_maps.empty();
    if (placed && param_offsets_.empty()) load_param_offsets();
    kb::ParamPlacer where(placed ? &param_offsets_ : nullptr, &param_sizes_);
    auto put = [&](const void* p, size_t size, size_t align) {
      size_t off = 0;
      if (!where.place(size, align, off))
        throw py::value_error(contract_.kernel + ": the compiled kernel's parameters do not match its contract "
                              "(parameter #" + std::to_string(where.index()) + ")");
      if (off + size > kMaxParamBytes)
        throw py::value_error(contract_.kernel + ": kernel parameters exceed " +
                              std::to_string(kMaxParamBytes) + " bytes");
      std::memcpy(buf + off, p, size);
    };
    const int bad = kb::pack_arguments(contract_, vals, n, put);
    if (bad >= 0)
      throw py::type_error(contract_.kernel + ": argument '" + contract_.args[bad].name + "' (#" +
                           std::to_string(bad) + "): scalars of dtype " +
                           kb::dtype_name(kb::packed_scalar_dtype(contract_, vals, bad)) +
                           " cannot be passed to a kernel");
    for (size_t t = 0; t < contract_.tensor_maps.size(); ++t) {
      const CUtensorMap& m = tensor_map(t, vals[contract_.tensor_maps[t].arg].array);
      put(&m, sizeof m, 64);
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
    return where.end();
  }

  // The TMA descriptor of contract tensor map `t` for this view (validated: kb::detail::check_tensor_map).
  // One cached descriptor per slot, reused while pointer, shape and strides stay the same (a hot loop
  // over the same arrays encodes nothing). Axis 0 of a tensor map is the array's innermost axis.
  const CUtensorMap& tensor_map(size_t t, const kb::ArrayView& a) {
    TensorMapSlot& slot = tmaps_[t];
    if (slot.valid && slot.ptr == a.ptr && slot.ndim == a.ndim &&
        std::equal(a.shape, a.shape + a.ndim, slot.shape) && std::equal(a.strides, a.strides + a.ndim, slot.strides))
      return slot.map;
    const kb::TensorMapSpec& spec = contract_.tensor_maps[t];
    slot.valid = false;
    const CUresult res = kb::encode_tensor_map(kb::drv::require().tensorMapEncodeTiled, spec, a, &slot.map);
    if (res != CUDA_SUCCESS) {
      const char* name = nullptr;
      kb::drv::require().getErrorName(res, &name);
      kb::ArgValue v;
      v.kind = kb::ArgKind::array;
      v.array = a;
      throw_contract_error(
          kb::detail::arg_error(contract_, spec.arg, kb::ErrorCode::layout,
                                "a view cuTensorMapEncodeTiled accepts (TMA box " +
                                    kb::detail::tuple_text(spec.box.data(), static_cast<int>(spec.box.size())) + ")",
                                kb::detail::value_text(v) + " with byte strides " +
                                    kb::detail::tuple_text(a.strides, a.ndim) + ", refused with " +
                                    (name ? name : "an error")),
          contract_.kernel);
    }
    slot.ptr = a.ptr;
    slot.ndim = a.ndim;
    std::copy(a.shape, a.shape + a.ndim, slot.shape);
    std::copy(a.strides, a.strides + a.ndim, slot.strides);
    slot.valid = true;
    return slot.map;
  }

  void load_param_offsets() {
    const kb::drv::Api& a = kb::drv::require();
    if (a.funcGetParamInfo == nullptr || a.tensorMapEncodeTiled == nullptr)
      throw py::value_error(contract_.kernel + ": its TMA tensor maps need a CUDA driver with "
                            "cuTensorMapEncodeTiled and cuFuncGetParamInfo (CUDA 12.4 or newer)");
    kb::param_layout(a.funcGetParamInfo, func_, kb::param_count(contract_), param_offsets_, param_sizes_);
  }

  // The stream must belong to the launch's device (the default streams 0-2 exist on every device and
  // are this one's here). One process-wide device: nothing to check (the common case costs nothing).
  void check_stream_device(const kb::ArgValue* vals, int n, uint64_t stream) const {
    if (stream <= 2 || kb::drv::device_count() == 1) return;
    const int sd = kb::rt::stream_device(stream);
    if (sd < 0 || sd == device_) return;
    const int i = first_device_array(vals, n);
    const std::string where = "the stream " + hex_handle(stream) + " belongs to cuda:" + std::to_string(sd) +
                              "; pass a stream of cuda:" + std::to_string(device_) +
                              " (stream=..., or bridge.use_stream) or move the arrays";
    if (i >= 0) {
      const std::string& name = contract_.args[i].name;
      throw_device_error("DeviceMismatchError",
                         contract_.kernel + ": argument '" + name + "' (#" + std::to_string(i) +
                             "): the launch runs on cuda:" + std::to_string(device_) +
                             " (where this array is), but " + where,
                         contract_.kernel, i, name);
    }
    throw_device_error("DeviceMismatchError",
                       contract_.kernel + ": stream: expected a stream of cuda:" + std::to_string(device_) +
                           " (the device this kernel is loaded on), got a stream of cuda:" + std::to_string(sd),
                       contract_.kernel, -1, "stream");
  }

  // Peer access from this device to every other device an array lives on (validated already).
  void enable_peers(const kb::ArgValue* vals, int n) const {
    uint64_t done = device_bit(device_);
    for (int i = 0; i < n; ++i) {
      if (!is_device_array(vals[i])) continue;
      const int p = vals[i].array.device_id;
      if (done & device_bit(p)) continue;
      if (!kb::rt::enable_peer(device_, p)) {
        const std::string& name = contract_.args[i].name;
        throw_device_error("PeerAccessError",
                           contract_.kernel + ": argument '" + name + "' (#" + std::to_string(i) +
                               "): memory on cuda:" + std::to_string(p) + " cannot be reached from cuda:" +
                               std::to_string(device_) + " (cuDeviceCanAccessPeer says no); copy it with "
                               "bridge.copy_peer instead",
                           contract_.kernel, i, name);
      }
      done |= device_bit(p);
    }
  }

  // Order after the streams that wrote (for writes: also read) these bytes, whichever object named
  // them, and after each foreign producer's own stream (event record + wait, no host block).
  void order_before(const kb::ArgValue* vals, const IntakeInfo* infos, int n, uint64_t stream) {
    uint64_t done[kStackArgs];
    int ndone = 0;
    if (contract_.cooperative) {
      const uint64_t key = self_key();
      kb::rt::order_use(key, key + 1, stream, device_, true);
    }
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array || vals[i].none) continue;
      uint64_t lo, hi;
      vals[i].array.extent(lo, hi);
      kb::rt::order_use(lo, hi, stream, device_, contract_.args[i].writable());
      const IntakeInfo& inf = infos[i];
      if (!inf.has_producer_stream) continue;
      const uint64_t p = inf.producer_stream;
      if (p == stream || std::find(done, done + ndone, p) != done + ndone) continue;
      const int producer_device = vals[i].array.device_id >= 0 ? vals[i].array.device_id : device_;
      kb::rt::order_after(p, stream, producer_device, inf.producer_generation, device_);
      if (ndone < kStackArgs) done[ndone++] = p;
    }
  }

  // Record what this launch touched, by memory. A launch captured by bridge.capture() runs nothing
  // now: the graph remembers its ranges and Graph.replay orders and records them on the replay stream.
  void record_after(const kb::ArgValue* vals, int n, uint64_t stream, bool captured) {
    if (contract_.cooperative) {          // the kernel's grid barrier word: one launch of it at a time
      const uint64_t key = self_key();    // (never captured: launch() refuses a cooperative capture)
      kb::rt::note_use(key, key + 1, stream, device_, true);
    }
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array || vals[i].none) continue;
      uint64_t lo, hi;
      vals[i].array.extent(lo, hi);
      const bool write = contract_.args[i].writable();
      if (captured) kb::rt::capture_use(stream, kb::rt::CapturedUse{lo, hi, device_, write});
      else kb::rt::note_use(lo, hi, stream, device_, write);
    }
  }

  // A cooperative kernel's grid barrier is a word of its module (dsl/backend/launch_codegen.py), shared
  // by every launch of the function: two launches on different streams must not overlap. The memory log
  // orders them as writes of one byte keyed by the CUfunction handle, a host address, which unified
  // addressing keeps disjoint from every device allocation the log tracks.
  uint64_t self_key() const { return reinterpret_cast<uint64_t>(func_); }

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
    py::list temps = py::reinterpret_steal<py::list>(py::handle());   // no list unless a temporary needs one
    bool any = false;
    for (int i = 0; i < n; ++i) {
      if (vals[i].kind != kb::ArgKind::array || vals[i].none) continue;
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
  bool features_ = false;                               // pdl / cooperative / cluster (launch_features.hpp)
  std::unique_ptr<DriverOccupancy> occ_;                // the validator's occupancy answers (features_ only)
  CUcontext ctx_ = nullptr;
  py::object router_;                                    // device -> Launcher of this kernel there
  std::vector<std::pair<int, py::object>> routes_;       // what router_ returned, per device
  uint64_t fault_stream_ = UINT64_MAX;   // stream of fault_rec_ (UINT64_MAX: none yet)
  uint64_t fault_rec_ = 0;               // device address of this launcher's record on fault_stream_
  py::object contract_obj_;
  py::object fault_info_;
  ReadPlan reader_;
  AcceptedLaunch accepted_;            // the validator's last acceptance (see AcceptedLaunch)
  uint64_t accepted_hits_ = 0;         // launches accepted through it (tests read it)
  struct TensorMapSlot {               // the last descriptor built for one contract tensor map
    bool valid = false;
    uint64_t ptr = 0;
    int ndim = 0;
    int64_t shape[5] = {};
    int64_t strides[5] = {};
    CUtensorMap map;
  };
  std::vector<TensorMapSlot> tmaps_;
  std::vector<size_t> param_offsets_;   // per kernel parameter, from the driver (kernels with tensor maps)
  std::vector<size_t> param_sizes_;
};

}  // namespace kb::native
