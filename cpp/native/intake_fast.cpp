// Fast intake paths (see intake_fast.hpp): torch tensors through the AOTInductor C shim, CuPy arrays
// through their self-checked C fields, current streams of torch and CuPy through their C entry points. Resolved once per process, at first use.
#include "intake_fast.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace kb::native::fast {
namespace {

enum class State : uint8_t { unresolved, on, off };

// KB_FAST_INTAKE, as bridge/settings.py read and validated it when bridge was imported
// (set_fast_intake_setting): the one reader of KB_* values, with one spelling for every switch.
bool g_setting_on = true;

bool env_disabled() { return !g_setting_on; }

// ---- torch --------------------------------------------------------------------------------------------

using Err = int32_t;   // AOTITorchError: 0 = success
struct TorchShim {
  State state = State::unresolved;
  std::string why;
  PyTypeObject* tensor = nullptr;      // torch.Tensor (kept for the process)
  PyTypeObject* parameter = nullptr;   // torch.nn.Parameter
  Err (*data_ptr)(void*, void**) = nullptr;
  Err (*dim)(void*, int64_t*) = nullptr;
  Err (*sizes)(void*, int64_t**) = nullptr;
  Err (*strides)(void*, int64_t**) = nullptr;
  Err (*dtype)(void*, int32_t*) = nullptr;
  Err (*device_type)(void*, int32_t*) = nullptr;
  Err (*device_index)(void*, int32_t*) = nullptr;
  int32_t dev_cpu = -1, dev_cuda = -1;
  std::vector<std::pair<int32_t, kb::DType>> dtypes;
  State stream_state = State::unresolved;
  std::string stream_why;
  Err (*current_stream)(int32_t, void**) = nullptr;
};
TorchShim& g_torch = *new TorchShim();   // documented process-wide cache of resolved entry points

std::string torch_lib_dir() {
  py::object torch = py::module_::import("torch");
  py::object os_path = py::module_::import("os.path");
  return py::str(os_path.attr("join")(os_path.attr("dirname")(torch.attr("__file__")), "lib"));
}

void* open_loaded(const std::string& path) { return dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD); }

template <class F>
bool sym(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

// The at::Tensor a torch.Tensor object holds: THPVariable keeps it right after PyObject_HEAD (torch 2.x),
// and AtenTensorHandle is an at::Tensor*. Checked against the attribute path before first use.
void* handle_of(PyObject* obj) { return reinterpret_cast<char*>(obj) + sizeof(PyObject); }

bool read_shim(PyObject* obj, kb::ArrayView& v) {
  TorchShim& t = g_torch;
  void* h = handle_of(obj);
  int32_t code = 0, devt = 0, devi = 0;
  int64_t nd = 0;
  int64_t* sz = nullptr;
  int64_t* st = nullptr;
  void* data = nullptr;
  if (t.dtype(h, &code) || t.device_type(h, &devt) || t.dim(h, &nd)) return false;
  kb::DType dt = kb::DType::invalid;
  for (const auto& p : t.dtypes)
    if (p.first == code) { dt = p.second; break; }
  if (dt == kb::DType::invalid || dt == kb::DType::c64 || dt == kb::DType::c128) return false;  // conj bits: attributes
  if (devt != t.dev_cpu && devt != t.dev_cuda) return false;
  if (nd < 0 || nd > kMaxDims) return false;
  if (t.sizes(h, &sz) || t.strides(h, &st) || t.data_ptr(h, &data)) return false;
  if (devt == t.dev_cuda && t.device_index(h, &devi)) return false;
  v = kb::ArrayView{};
  v.dtype = dt;
  v.ndim = static_cast<int32_t>(nd);
  const int64_t item = v.itemsize();
  for (int k = 0; k < v.ndim; ++k) {
    v.shape[k] = sz[k];
    if (sz[k] < 0 || __builtin_mul_overflow(st[k], item, &v.strides[k])) return false;   // attributes raise
  }
  v.ptr = reinterpret_cast<uint64_t>(data);
  v.device_type = devt == t.dev_cuda ? kb::DeviceType::cuda : kb::DeviceType::cpu;
  v.device_id = devt == t.dev_cuda ? devi : 0;
  return true;
}

// The attribute path's reading of `obj`, for the self-check.
bool read_attributes(py::handle t, kb::ArrayView& v) {
  v = kb::ArrayView{};
  v.ndim = py::len(t.attr("shape"));
  py::tuple shape = t.attr("shape"), stride = t.attr("stride")();
  int64_t item = py::cast<int64_t>(t.attr("element_size")());
  for (int k = 0; k < v.ndim; ++k) {
    v.shape[k] = shape[k].cast<int64_t>();
    v.strides[k] = stride[k].cast<int64_t>() * item;
  }
  v.ptr = t.attr("data_ptr")().cast<uint64_t>();
  return true;
}

void resolve_torch() {
  TorchShim& t = g_torch;
  t.state = State::off;
  if (env_disabled()) { t.why = "KB_FAST_INTAKE disables it"; return; }
  try {
    py::object torch = py::module_::import("torch");
    std::string version = py::str(torch.attr("__version__"));
    if (version.rfind("2.", 0) != 0) {
      t.why = "torch " + version + ": the tensor layout the shim is reached through is known for torch 2.x";
      return;
    }
    std::string dir = torch_lib_dir();
    void* lib = open_loaded(dir + "/libtorch_cpu.so");
    if (!lib) { t.why = "libtorch_cpu.so is not loaded from " + dir; return; }
    bool ok = sym(lib, "aoti_torch_get_data_ptr", t.data_ptr) && sym(lib, "aoti_torch_get_dim", t.dim) &&
              sym(lib, "aoti_torch_get_sizes", t.sizes) && sym(lib, "aoti_torch_get_strides", t.strides) &&
              sym(lib, "aoti_torch_get_dtype", t.dtype) && sym(lib, "aoti_torch_get_device_type", t.device_type) &&
              sym(lib, "aoti_torch_get_device_index", t.device_index);
    int32_t (*cpu)() = nullptr;
    int32_t (*cuda)() = nullptr;
    ok = ok && sym(lib, "aoti_torch_device_type_cpu", cpu) && sym(lib, "aoti_torch_device_type_cuda", cuda);
    if (!ok) { t.why = std::string("a shim function is missing: ") + dlerror(); return; }
    t.dev_cpu = cpu();
    t.dev_cuda = cuda();
    static const std::pair<const char*, kb::DType> kDtypes[] = {
        {"bool", kb::DType::bool_}, {"int8", kb::DType::i8}, {"int16", kb::DType::i16}, {"int32", kb::DType::i32},
        {"int64", kb::DType::i64}, {"uint8", kb::DType::u8}, {"uint16", kb::DType::u16}, {"uint32", kb::DType::u32},
        {"uint64", kb::DType::u64}, {"float16", kb::DType::f16}, {"bfloat16", kb::DType::bf16},
        {"float32", kb::DType::f32}, {"float64", kb::DType::f64}, {"complex64", kb::DType::c64},
        {"complex128", kb::DType::c128}, {"float8_e4m3fn", kb::DType::f8e4m3fn},
        {"float8_e4m3fnuz", kb::DType::f8e4m3fnuz}, {"float8_e5m2", kb::DType::f8e5m2},
        {"float8_e5m2fnuz", kb::DType::f8e5m2fnuz}, {"float8_e8m0fnu", kb::DType::f8e8m0fnu}};
    for (const auto& d : kDtypes) {
      int32_t (*code)() = nullptr;
      std::string name = std::string("aoti_torch_dtype_") + d.first;
      if (sym(lib, name.c_str(), code)) t.dtypes.emplace_back(code(), d.second);   // absent ones: attributes
    }
    t.tensor = reinterpret_cast<PyTypeObject*>(py::object(torch.attr("Tensor")).release().ptr());
    t.parameter = reinterpret_cast<PyTypeObject*>(py::object(torch.attr("nn").attr("Parameter")).release().ptr());
    // Self-check on tensors we make: an offset, permuted, sliced view and a 0-d one must read exactly as
    // the attribute path reads them; otherwise the layout is not what we think and the path stays off.
    py::object base = torch.attr("empty")(py::make_tuple(4, 6, 10));
    py::object view = base.attr("permute")(2, 0, 1)[py::make_tuple(py::slice(1, 10, 1), py::slice(0, 4, 1),
                                                                    py::slice(2, 6, 1))];
    py::object scalar = torch.attr("empty")(py::tuple());
    t.state = State::on;   // read_shim consults it through the callers only; set before the check
    for (py::handle probe : {view, scalar}) {
      kb::ArrayView fast{}, slow{};
      if (!read_shim(probe.ptr(), fast) || !read_attributes(probe, slow) || fast.ndim != slow.ndim ||
          fast.ptr != slow.ptr || fast.dtype != kb::DType::f32 || fast.device_type != kb::DeviceType::cpu ||
          !std::equal(fast.shape, fast.shape + fast.ndim, slow.shape) ||
          !std::equal(fast.strides, fast.strides + fast.ndim, slow.strides)) {
        t.state = State::off;
        t.why = "self-check failed: the shim read a probe tensor differently from its attributes";
        return;
      }
    }
    t.why = "torch " + version + " through aoti_torch_* (self-checked)";
  } catch (py::error_already_set& e) {
    t.state = State::off;
    t.why = std::string("could not be resolved: ") + e.what();
  }
}

void resolve_torch_stream() {
  TorchShim& t = g_torch;
  t.stream_state = State::off;
  if (env_disabled()) { t.stream_why = "KB_FAST_INTAKE disables it"; return; }
  try {
    std::string dir = torch_lib_dir();
    void* lib = open_loaded(dir + "/libtorch_cuda.so");
    if (!lib) { t.stream_why = "libtorch_cuda.so is not loaded from " + dir; return; }
    if (!sym(lib, "aoti_torch_get_current_cuda_stream", t.current_stream)) {
      t.stream_why = "aoti_torch_get_current_cuda_stream is missing";
      return;
    }
    t.stream_state = State::on;
    t.stream_why = "aoti_torch_get_current_cuda_stream";
  } catch (py::error_already_set& e) {
    t.stream_why = std::string("could not be resolved: ") + e.what();
  }
}

// ---- CuPy -----------------------------------------------------------------------------------------------

struct CupyStream {
  State state = State::unresolved;
  std::string why;
  intptr_t (*get_stream_ptr)(int) = nullptr;
};
CupyStream& g_cupy = *new CupyStream();

void resolve_cupy_stream() {
  CupyStream& c = g_cupy;
  c.state = State::off;
  if (env_disabled()) { c.why = "KB_FAST_INTAKE disables it"; return; }
  try {
    py::object mod = py::module_::import("cupy_backends.cuda.stream");
    py::object capi = py::getattr(mod, "__pyx_capi__", py::none());
    if (capi.is_none() || !py::isinstance<py::dict>(capi) || !capi.contains("get_stream_ptr")) {
      c.why = "cupy_backends.cuda.stream exports no get_stream_ptr";
      return;
    }
    PyObject* cap = capi["get_stream_ptr"].ptr();
    const char* name = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : nullptr;
    if (name == nullptr || std::strcmp(name, "intptr_t (int)") != 0) {
      PyErr_Clear();
      c.why = std::string("get_stream_ptr has an unexpected signature: ") + (name ? name : "?");
      return;
    }
    c.get_stream_ptr = reinterpret_cast<intptr_t (*)(int)>(PyCapsule_GetPointer(cap, name));
    if (!c.get_stream_ptr) { PyErr_Clear(); c.why = "get_stream_ptr capsule is empty"; return; }
    c.state = State::on;
    c.why = "cupy_backends.cuda.stream.get_stream_ptr (C)";
  } catch (py::error_already_set& e) {
    c.why = std::string("could not be resolved: ") + e.what();
  }
}

// ---- CuPy ndarray metadata -------------------------------------------------------------------------
// CuPy 14.2 has no C API for ndarray metadata; its Cython classes keep them in C fields: the ndarray
// (`_ndarray_base`) holds `std::vector<Py_ssize_t>` shape and byte strides, the dtype object and the
// MemoryPointer, which holds `intptr_t ptr`, `int device_id` and the memory owner. Their offsets are
// found once on probe arrays we make (only pointer/length comparisons before any dereference), then
// every field of three differently shaped probes must read as CuPy's attributes say; otherwise the path
// stays off. Nothing is cached per object: an array reshaped in place is read again at the next launch.

struct StdVec {        // the three pointers of a libstdc++/libc++ std::vector<int64_t>
  const int64_t* begin;
  const int64_t* end;
  const int64_t* cap;
};

struct CupyLayout {
  State state = State::unresolved;
  std::string why;
  PyTypeObject* ndarray = nullptr;     // cupy.ndarray (exact type; subclasses take the attributes)
  PyTypeObject* memptr = nullptr;      // cupy.cuda.MemoryPointer
  Py_ssize_t shape = -1, strides = -1, dtype = -1, data = -1;   // offsets in the ndarray
  Py_ssize_t ptr = -1, device_id = -1;                          // offsets in the MemoryPointer
};
CupyLayout& g_layout = *new CupyLayout();   // documented process-wide cache of the resolved offsets

template <class T>
T field(PyObject* obj, Py_ssize_t off) {
  T v;
  std::memcpy(&v, reinterpret_cast<const char*>(obj) + off, sizeof v);
  return v;
}

// A plausible vector of `n` elements, judged from its three pointers alone (nothing is dereferenced).
bool vector_of(const StdVec& v, int64_t n) {
  if (v.end - v.begin != n || v.cap < v.end) return false;
  if (n == 0) return true;
  return v.begin != nullptr && (reinterpret_cast<uintptr_t>(v.begin) & 7) == 0 && v.cap - v.begin < (1 << 20);
}

// What CuPy's own attributes say about a probe (not the code under test).
struct CupyFacts {
  std::vector<int64_t> shape, strides;
  PyObject* dtype;
  PyObject* data;
  PyObject* mem;
  intptr_t ptr;
  int device_id;
};

CupyFacts cupy_facts(py::handle a) {
  CupyFacts f;
  for (py::handle d : py::tuple(a.attr("shape"))) f.shape.push_back(d.cast<int64_t>());
  for (py::handle d : py::tuple(a.attr("strides"))) f.strides.push_back(d.cast<int64_t>());
  f.dtype = a.attr("dtype").ptr();
  py::object data = a.attr("data");
  f.data = data.ptr();
  f.mem = data.attr("mem").ptr();
  f.ptr = data.attr("ptr").cast<intptr_t>();
  f.device_id = data.attr("device_id").cast<int>();
  return f;                                   // the probes keep every object alive
}

// Offsets of 8-byte slots of `obj` (below `size`) that hold exactly `value`.
std::vector<Py_ssize_t> slots_holding(PyObject* obj, Py_ssize_t size, uintptr_t value) {
  std::vector<Py_ssize_t> out;
  for (Py_ssize_t off = sizeof(PyObject); off + 8 <= size; off += 8)
    if (field<uintptr_t>(obj, off) == value) out.push_back(off);
  return out;
}

Py_ssize_t vector_slot(PyObject* obj, Py_ssize_t size, const std::vector<int64_t>& want) {
  for (Py_ssize_t off = sizeof(PyObject); off + Py_ssize_t(sizeof(StdVec)) <= size; off += 8) {
    StdVec v = field<StdVec>(obj, off);
    if (vector_of(v, static_cast<int64_t>(want.size())) && std::equal(want.begin(), want.end(), v.begin))
      return off;
  }
  return -1;
}

bool read_layout(PyObject* obj, kb::ArrayView& v, PyObject*& dtype) {
  const CupyLayout& L = g_layout;
  PyObject* data = field<PyObject*>(obj, L.data);
  dtype = field<PyObject*>(obj, L.dtype);
  if (data == nullptr || dtype == nullptr || Py_TYPE(data) != L.memptr) return false;
  StdVec sh = field<StdVec>(obj, L.shape), st = field<StdVec>(obj, L.strides);
  int64_t n = sh.end - sh.begin;
  if (n < 0 || n > kMaxDims || !vector_of(sh, n) || !vector_of(st, n)) return false;   // attributes raise
  v = kb::ArrayView{};
  v.ndim = static_cast<int32_t>(n);
  for (int k = 0; k < v.ndim; ++k) {
    v.shape[k] = sh.begin[k];
    v.strides[k] = st.begin[k];
  }
  v.ptr = static_cast<uint64_t>(field<intptr_t>(data, L.ptr));
  v.device_type = kb::DeviceType::cuda;
  v.device_id = field<int>(data, L.device_id);
  return true;
}

bool layout_reads_as(py::handle probe, const CupyFacts& f) {
  kb::ArrayView v{};
  PyObject* dtype = nullptr;
  return read_layout(probe.ptr(), v, dtype) && dtype == f.dtype && v.ptr == static_cast<uint64_t>(f.ptr) &&
         v.device_id == f.device_id && static_cast<size_t>(v.ndim) == f.shape.size() &&
         std::equal(f.shape.begin(), f.shape.end(), v.shape) &&
         std::equal(f.strides.begin(), f.strides.end(), v.strides);
}

std::string find_layout(py::module_& cp) {
  CupyLayout& L = g_layout;
  py::object base = cp.attr("empty")(py::make_tuple(6, 10, 14), "float32");
  // shape (11, 4, 4), byte strides (4, 560, 168): no value of one is a value of the other
  py::object probe = base.attr("transpose")(2, 0, 1)[py::make_tuple(py::slice(1, 12, 1), py::slice(1, 5, 1),
                                                                     py::slice(0, 10, 3))];
  py::object line = cp.attr("empty")(py::make_tuple(9), "float64")[py::slice(2, 9, 1)];
  py::object scalar = cp.attr("empty")(py::tuple(), "int16");
  CupyFacts f = cupy_facts(probe);
  PyObject* a = probe.ptr();
  if (Py_TYPE(a) != L.ndarray) return "cupy.empty does not return an exact cupy.ndarray";
  L.memptr = Py_TYPE(f.data);
  Py_ssize_t size = Py_TYPE(a)->tp_basicsize, msize = L.memptr->tp_basicsize;
  auto dt = slots_holding(a, size, reinterpret_cast<uintptr_t>(f.dtype));
  auto da = slots_holding(a, size, reinterpret_cast<uintptr_t>(f.data));
  auto pt = slots_holding(f.data, msize, static_cast<uintptr_t>(f.ptr));
  auto me = slots_holding(f.data, msize, reinterpret_cast<uintptr_t>(f.mem));
  if (dt.size() != 1 || da.size() != 1) return "the dtype/data fields of an ndarray were not found once";
  // MemoryPointer: intptr_t ptr, int device_id, then the owner: device_id is the one field in between
  if (pt.size() != 1 || me.size() != 1 || me[0] != pt[0] + 16) return "the MemoryPointer layout is not ptr, device_id, mem";
  L.dtype = dt[0];
  L.data = da[0];
  L.ptr = pt[0];
  L.device_id = pt[0] + 8;
  L.shape = vector_slot(a, size, f.shape);
  L.strides = vector_slot(a, size, f.strides);
  if (L.shape < 0 || L.strides < 0) return "the shape/strides vectors of an ndarray were not found";
  for (py::handle p : {probe, line, scalar})
    if (!layout_reads_as(p, cupy_facts(p))) return "self-check failed: a probe array read differently from its attributes";
  return "";
}

void resolve_cupy_layout() {
  CupyLayout& L = g_layout;
  L.state = State::off;
  if (env_disabled()) { L.why = "KB_FAST_INTAKE disables it"; return; }
  try {
    py::module_ cp = py::module_::import("cupy");
    std::string version = py::str(cp.attr("__version__"));
    L.ndarray = reinterpret_cast<PyTypeObject*>(py::object(cp.attr("ndarray")).release().ptr());
    std::string failed = find_layout(cp);
    if (!failed.empty()) { L.why = "CuPy " + version + ": " + failed; return; }
    L.state = State::on;
    L.why = "CuPy " + version + " ndarray/MemoryPointer fields (self-checked)";
  } catch (py::error_already_set& e) {
    L.why = std::string("could not be resolved: ") + e.what();
  }
}

bool g_torch_enabled = true;
bool g_cupy_enabled = true;

const char* state_name(State s) { return s == State::on ? "on" : s == State::off ? "off" : "unresolved"; }

}  // namespace

// Resolve now the fast paths of the frameworks already imported. Resolving probes the framework with
// small arrays it allocates, which a stream capture forbids, so bridge.capture() calls this before it
// begins: a CuPy array's first intake inside a capture invalidated the graph.
void resolve_imported() {
  PyObject* modules = PyImport_GetModuleDict();   // borrowed
  if (g_cupy_enabled && PyDict_GetItemString(modules, "cupy") != nullptr) {
    if (g_layout.state == State::unresolved) resolve_cupy_layout();
    if (g_cupy.state == State::unresolved) resolve_cupy_stream();
  }
  if (g_torch_enabled && PyDict_GetItemString(modules, "torch") != nullptr) {
    if (g_torch.state == State::unresolved) resolve_torch();
    if (g_torch.stream_state == State::unresolved) resolve_torch_stream();
  }
}

bool torch_view(PyObject* obj, kb::ArrayView& view) {
  if (!g_torch_enabled) return false;
  TorchShim& t = g_torch;
  if (t.state == State::unresolved) resolve_torch();
  if (t.state != State::on) return false;
  PyTypeObject* tp = Py_TYPE(obj);
  if (tp != t.tensor && tp != t.parameter) return false;   // subclasses: their own semantics, attributes
  return read_shim(obj, view);
}

bool torch_stream(int dev, uint64_t& out) {
  if (!g_torch_enabled) return false;
  TorchShim& t = g_torch;
  if (t.stream_state == State::unresolved) resolve_torch_stream();
  if (t.stream_state != State::on) return false;
  void* s = nullptr;
  if (t.current_stream(static_cast<int32_t>(dev), &s) != 0) return false;
  out = reinterpret_cast<uint64_t>(s);
  return true;
}

bool cupy_view(PyObject* obj, kb::ArrayView& view, PyObject*& dtype) {
  if (!g_cupy_enabled) return false;
  CupyLayout& L = g_layout;
  if (L.state == State::unresolved) resolve_cupy_layout();
  if (L.state != State::on || Py_TYPE(obj) != L.ndarray) return false;
  return read_layout(obj, view, dtype);
}

bool cupy_stream(int dev, uint64_t& out) {
  if (!g_cupy_enabled) return false;
  CupyStream& c = g_cupy;
  if (c.state == State::unresolved) resolve_cupy_stream();
  if (c.state != State::on) return false;
  intptr_t p = c.get_stream_ptr(dev);
  if (p == -1 && PyErr_Occurred()) throw py::error_already_set();
  out = static_cast<uint64_t>(p);
  return true;
}

void register_fast_intake(py::module_& m) {
  m.def("fast_intake_status", [] {
    py::dict d;
    d["torch"] = py::make_tuple(g_torch_enabled ? state_name(g_torch.state) : "disabled", g_torch.why);
    d["torch_stream"] = py::make_tuple(g_torch_enabled ? state_name(g_torch.stream_state) : "disabled",
                                       g_torch.stream_why);
    d["cupy"] = py::make_tuple(g_cupy_enabled ? state_name(g_layout.state) : "disabled", g_layout.why);
    d["cupy_stream"] = py::make_tuple(g_cupy_enabled ? state_name(g_cupy.state) : "disabled", g_cupy.why);
    return d;
  }, "For each fast intake path: (state, how it was resolved or why it is off). States: on, off, "
     "unresolved (not needed yet), disabled (set_fast_intake).");
  m.def("resolve_fast_intake", &resolve_imported,
        "Resolve the fast intake paths of CuPy and torch when they are imported (bridge.capture calls "
        "it before a capture begins: resolving allocates probe arrays, which a capture forbids).");
  m.def("set_fast_intake_setting", [](bool on) { g_setting_on = on; }, py::arg("on"),
        "KB_FAST_INTAKE as bridge.settings read it (bridge.array applies it at import, before any intake); "
        "off: the fast paths resolve to 'off', saying KB_FAST_INTAKE disables them.");
  m.def("set_fast_intake", [](py::object torch, py::object cupy) {
    if (!torch.is_none()) g_torch_enabled = torch.cast<bool>();
    if (!cupy.is_none()) g_cupy_enabled = cupy.cast<bool>();
  }, py::arg("torch") = py::none(), py::arg("cupy") = py::none(),
     "Turn the fast paths on or off (tests of the fallback attribute paths).");
}

}  // namespace kb::native::fast
