// The one array-intake path: bridge.Array -> CuPy -> torch -> __dlpack__ -> __cuda_array_interface__.
//
// Hot path of every launch: attribute names are interned once, library types and dtype objects are
// cached once (strong references, documented below), and nothing here loops in Python.
#include "intake.hpp"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "intake_fast.hpp"
#include "kernelbridge/dlpack/dlpack.h"

namespace py = pybind11;

namespace kb::native {
namespace {

// ---- small CPython helpers --------------------------------------------------------------------------

PyObject* interned(const char* s) { return PyUnicode_InternFromString(s); }

#define KB_NAME(var, text) static PyObject* var = interned(text)

[[noreturn]] void throw_py(PyObject* type, const std::string& msg) {
  PyErr_SetObject(type, utf8_str(msg).ptr());
  throw py::error_already_set();
}

// Replace the pending Python error by `type`("what (<Original>: <text>)"), the original as __cause__.
[[noreturn]] void throw_from_pending(PyObject* type, const std::string& what) {
  py::error_already_set err;  // takes the pending error
  if (!translatable(err)) throw err;
  py::object orig = err.value();
  py::object exc = py::reinterpret_steal<py::object>(
      PyObject_CallOneArg(type, utf8_str(what + " (" + exception_text(orig.ptr()) + ")").ptr()));
  if (!exc) throw py::error_already_set();
  PyException_SetCause(exc.ptr(), orig.release().ptr());  // steals
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

// bool(o), with a failing __bool__ as a TypeError naming `what`.
bool truth(PyObject* o, const std::string& what) {
  int t = PyObject_IsTrue(o);
  if (t < 0) throw_from_pending(PyExc_TypeError, what + ": its truth value could not be read");
  return t == 1;
}

// New reference or throw the pending Python error.
py::object attr(PyObject* obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj, name);
  if (!r) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

// New reference, or an empty object when the attribute does not exist (other errors propagate).
py::object opt_attr(PyObject* obj, PyObject* name) {
  PyObject* r = PyObject_GetAttr(obj, name);
  if (r) return py::reinterpret_steal<py::object>(r);
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw py::error_already_set();
  PyErr_Clear();
  return py::object();
}

py::object call0(PyObject* obj, PyObject* method) {
  PyObject* r = PyObject_CallMethodNoArgs(obj, method);
  if (!r) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(r);
}

int64_t as_i64(PyObject* o, const char* what) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);  // non-ints through __index__
  if (v == -1 && PyErr_Occurred()) {
    if (!PyIndex_Check(o) || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      throw_py(PyExc_TypeError, std::string(what) + ": expected an integer, got " + Py_TYPE(o)->tp_name);
    }
    throw_from_pending(PyExc_TypeError, std::string(what) + ": expected an integer, reading " +
                                            Py_TYPE(o)->tp_name + " as one failed");
  }
  if (overflow != 0)
    throw_py(PyExc_ValueError, std::string(what) + ": expected a 64-bit integer, got one outside [-2**63, 2**63)");
  return v;
}

uint64_t as_u64(PyObject* o, const char* what) {
  if (!PyLong_Check(o)) {
    throw_py(PyExc_TypeError, std::string(what) + ": expected an integer, got " + Py_TYPE(o)->tp_name);
  }
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw_py(PyExc_ValueError, std::string(what) + ": expected a non-negative 64-bit integer");
  }
  return v;
}

// Read a tuple/list of ints into out[]; returns its length.
int read_ints(PyObject* seq, int64_t* out, const char* what) {
  PyObject* fast = PySequence_Fast(seq, what);
  if (!fast) {
    PyErr_Clear();
    throw_py(PyExc_TypeError, std::string(what) + ": expected a tuple of integers, got " +
                                  Py_TYPE(seq)->tp_name);
  }
  py::object guard = py::reinterpret_steal<py::object>(fast);
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > kMaxDims) {
    throw_py(PyExc_ValueError, std::string(what) + ": " + std::to_string(n) +
                                   " dimensions given, kernelbridge supports at most " +
                                   std::to_string(kMaxDims));
  }
  PyObject** items = PySequence_Fast_ITEMS(fast);
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = as_i64(items[i], what);
  return static_cast<int>(n);
}

void check_shape(const kb::ArrayView& v, const char* producer) {
  for (int i = 0; i < v.ndim; ++i) {
    if (v.shape[i] < 0) {
      throw_py(PyExc_ValueError, std::string(producer) + ": negative extent " +
                                     std::to_string(v.shape[i]) + " in axis " + std::to_string(i));
    }
  }
}

// Element strides -> byte strides, saturating instead of overflowing (check_view_extent then refuses
// the view: its byte extent cannot fit int64 unless the axis has extent 1).
int64_t byte_stride(int64_t elements, int64_t itemsize) {
  int64_t r;
  if (__builtin_mul_overflow(elements, itemsize, &r)) return elements < 0 ? INT64_MIN : INT64_MAX;
  return r;
}

// C-contiguous byte strides. Saturates instead of overflowing: such a shape's byte extent does not fit
// int64 and check_view_extent refuses it.
void c_contiguous_strides(kb::ArrayView& v) {
  int64_t s = v.itemsize();
  for (int i = v.ndim - 1; i >= 0; --i) {
    v.strides[i] = s;
    if (__builtin_mul_overflow(s, v.shape[i] > 0 ? v.shape[i] : 1, &s)) s = INT64_MAX;
  }
}

// ---- dtype objects of NumPy/CuPy and torch -> DType -----------------------------------------------

// "bfloat16" / "float8_e4m3fn" / "float32" (library spelling, no "torch." prefix) -> DType.
kb::DType dtype_from_library_name(std::string name) {
  static const std::pair<const char*, const char*> prefixes[] = {
      {"float8_", "f8"}, {"float6_", "f6"}, {"float4_", "f4"}};
  for (const auto& p : prefixes) {
    size_t n = std::strlen(p.first);
    if (name.compare(0, n, p.first) == 0) { name = std::string(p.second) + name.substr(n); break; }
  }
  kb::DType t = kb::dtype_from_name(name);
  return t == kb::DType::any ? kb::DType::invalid : t;
}

// Documented cache: dtype object (NumPy dtype instance or torch.dtype; both are long-lived singletons
// for built-in types) -> DType. Holds strong references; bounded so odd producers cannot grow it.
struct DTypeCache {
  static constexpr size_t kMax = 64;
  std::vector<std::pair<PyObject*, kb::DType>> entries;
  bool find(PyObject* key, kb::DType& out) const {
    for (const auto& e : entries) if (e.first == key) { out = e.second; return true; }
    return false;
  }
  void add(PyObject* key, kb::DType t) {
    if (entries.size() >= kMax) return;
    Py_INCREF(key);
    entries.emplace_back(key, t);
  }
};

[[noreturn]] void unsupported_dtype(const std::string& given) {
  raise_bridge_error("DTypeError", "unsupported array dtype: " + given +
                                       " (kernelbridge supports bool, int8..int64, uint8..uint64, "
                                       "float16, bfloat16, float32, float64, complex64, complex128 and "
                                       "the float8/float6/float4 formats)");
}

kb::DType numpy_dtype(PyObject* dtype) {
  static DTypeCache cache;
  kb::DType t;
  if (cache.find(dtype, t)) return t;
  KB_NAME(s_name, "name");
  KB_NAME(s_byteorder, "byteorder");
  std::string name = py::str(attr(dtype, s_name));
  std::string order = py::str(attr(dtype, s_byteorder));
  bool native = order == "=" || order == "|" || (order == "<") == (PY_LITTLE_ENDIAN != 0);
  t = native ? dtype_from_library_name(name) : kb::DType::invalid;
  if (t == kb::DType::invalid) {
    unsupported_dtype(std::string(native ? "" : "non-native byte order ") + "NumPy/CuPy dtype " +
                      std::string(py::repr(dtype)));
  }
  cache.add(dtype, t);
  return t;
}

kb::DType torch_dtype(PyObject* dtype) {
  static DTypeCache cache;
  kb::DType t;
  if (cache.find(dtype, t)) return t;
  std::string s = py::str(dtype);  // "torch.float32"
  t = dtype_from_library_name(s.rfind("torch.", 0) == 0 ? s.substr(6) : s);
  if (t == kb::DType::invalid) unsupported_dtype("torch dtype " + s);
  cache.add(dtype, t);
  return t;
}

// ---- library type detection (documented cache: type objects, resolved once the module is imported) -

struct LibType {
  const char* module;
  const char* attr;
  PyTypeObject* type = nullptr;
  bool matches(PyObject* obj) {
    if (!type) {
      PyObject* mods = PyImport_GetModuleDict();  // borrowed
      PyObject* mod = PyDict_GetItemString(mods, module);
      if (!mod) return false;  // never imported: obj cannot be one of its instances
      PyObject* t = PyObject_GetAttrString(mod, attr);
      if (!t || !PyType_Check(t)) { Py_XDECREF(t); PyErr_Clear(); return false; }
      type = reinterpret_cast<PyTypeObject*>(t);  // keep the reference for the process
    }
    return Py_TYPE(obj) == type || PyObject_TypeCheck(obj, type);
  }
};

LibType g_cupy{"cupy", "ndarray"};
LibType g_torch{"torch", "Tensor"};
LibType g_numpy{"numpy", "ndarray"};
PointerDeviceFn g_pointer_device = nullptr;

// Function objects looked up once: cupy.cuda.get_current_stream, torch._C._cuda_getCurrentRawStream.
py::object dotted(const char* module, std::initializer_list<const char*> path) {
  py::object o = py::module_::import(module);
  for (const char* p : path) o = o.attr(p);
  return o;
}

uint64_t cupy_current_stream(int dev, IntakeMemo* memo) {
  if (memo) for (int i = 0; i < memo->n_cupy; ++i) if (memo->cupy_dev[i] == dev) return memo->cupy_stream[i];
  uint64_t fast_h = 0;
  if (fast::cupy_stream(dev, fast_h)) {
    if (memo && memo->n_cupy < IntakeMemo::kSlots) {
      memo->cupy_dev[memo->n_cupy] = dev; memo->cupy_stream[memo->n_cupy++] = fast_h;
    }
    return fast_h;
  }
  static PyObject* get = dotted("cupy", {"cuda", "get_current_stream"}).release().ptr();  // kept for the process
  KB_NAME(s_ptr, "ptr");
  PyObject* s = PyObject_CallOneArg(get, py::int_(dev).ptr());
  if (!s) throw py::error_already_set();
  py::object stream = py::reinterpret_steal<py::object>(s);
  uint64_t h = as_u64(attr(stream.ptr(), s_ptr).ptr(), "cupy current stream");
  if (memo && memo->n_cupy < IntakeMemo::kSlots) {
    memo->cupy_dev[memo->n_cupy] = dev; memo->cupy_stream[memo->n_cupy++] = h;
  }
  return h;
}

uint64_t torch_current_stream(int dev, IntakeMemo* memo) {
  if (memo) for (int i = 0; i < memo->n_torch; ++i) if (memo->torch_dev[i] == dev) return memo->torch_stream[i];
  uint64_t fast_h = 0;
  if (fast::torch_stream(dev, fast_h)) {
    if (memo && memo->n_torch < IntakeMemo::kSlots) {
      memo->torch_dev[memo->n_torch] = dev; memo->torch_stream[memo->n_torch++] = fast_h;
    }
    return fast_h;
  }
  static PyObject* get = dotted("torch", {"_C", "_cuda_getCurrentRawStream"}).release().ptr();  // kept for the process
  PyObject* s = PyObject_CallOneArg(get, py::int_(dev).ptr());
  if (!s) throw py::error_already_set();
  uint64_t h = as_u64(py::reinterpret_steal<py::object>(s).ptr(), "torch current stream");
  if (memo && memo->n_torch < IntakeMemo::kSlots) {
    memo->torch_dev[memo->n_torch] = dev; memo->torch_stream[memo->n_torch++] = h;
  }
  return h;
}

// ---- the producers ------------------------------------------------------------------------------------

void from_array_base(PyObject* obj, kb::ArrayView& view, IntakeInfo& info) {
  ArrayBase& a = array_base_of(obj);
  view = a.view;
  info.keepalive = py::reinterpret_borrow<py::object>(obj);
  info.has_producer_stream = a.has_stream;
  info.producer_stream = a.stream;
  info.producer_generation = a.stream_generation;
}

void from_cupy(PyObject* obj, kb::ArrayView& view, IntakeInfo& info, IntakeMemo* memo) {
  KB_NAME(s_data, "data"); KB_NAME(s_ptr, "ptr"); KB_NAME(s_device_id, "device_id");
  KB_NAME(s_shape, "shape"); KB_NAME(s_strides, "strides"); KB_NAME(s_dtype, "dtype");
  info.keepalive = py::reinterpret_borrow<py::object>(obj);
  info.has_producer_stream = true;
  PyObject* dtype = nullptr;
  if (fast::cupy_view(obj, view, dtype)) {      // the C fields: no Python attribute reads
    view.dtype = numpy_dtype(dtype);
    info.producer_stream = cupy_current_stream(view.device_id, memo);
    return;
  }
  py::object mem = attr(obj, s_data);
  view = kb::ArrayView{};
  view.dtype = numpy_dtype(attr(obj, s_dtype).ptr());
  view.ptr = as_u64(attr(mem.ptr(), s_ptr).ptr(), "cupy ndarray .data.ptr");
  view.device_type = kb::DeviceType::cuda;
  view.device_id = static_cast<int32_t>(as_i64(attr(mem.ptr(), s_device_id).ptr(), "cupy .data.device_id"));
  view.ndim = read_ints(attr(obj, s_shape).ptr(), view.shape, "cupy ndarray shape");
  read_ints(attr(obj, s_strides).ptr(), view.strides, "cupy ndarray strides");
  info.producer_stream = cupy_current_stream(view.device_id, memo);
}

// false: a torch tensor on a device this fast path does not read (it then goes through __dlpack__).
bool from_torch(PyObject* obj, kb::ArrayView& view, IntakeInfo& info, IntakeMemo* memo) {
  if (fast::torch_view(obj, view)) {     // the C shim: no Python attribute reads
    info.keepalive = py::reinterpret_borrow<py::object>(obj);
    if (view.device_type == kb::DeviceType::cuda) {
      info.has_producer_stream = true;
      info.producer_stream = torch_current_stream(view.device_id, memo);
    }
    return true;
  }
  KB_NAME(s_is_cuda, "is_cuda"); KB_NAME(s_get_device, "get_device"); KB_NAME(s_device, "device");
  KB_NAME(s_type, "type"); KB_NAME(s_data_ptr, "data_ptr"); KB_NAME(s_shape, "shape");
  KB_NAME(s_stride, "stride"); KB_NAME(s_dtype, "dtype"); KB_NAME(s_is_conj, "is_conj");
  bool cuda = truth(attr(obj, s_is_cuda).ptr(), "torch tensor .is_cuda");
  int dev = 0;
  if (cuda) {
    dev = static_cast<int>(as_i64(call0(obj, s_get_device).ptr(), "torch get_device()"));
  } else {
    std::string type = py::str(attr(attr(obj, s_device).ptr(), s_type));
    if (type != "cpu") return false;
  }
  view = kb::ArrayView{};
  view.dtype = torch_dtype(attr(obj, s_dtype).ptr());
  if ((view.dtype == kb::DType::c64 || view.dtype == kb::DType::c128) &&
      truth(call0(obj, s_is_conj).ptr(), "torch tensor .is_conj()")) {
    throw_py(PyExc_ValueError, "torch tensor has its conjugate bit set (a lazy conjugate view): call "
                               ".resolve_conj() first so the memory holds the values");
  }
  view.ptr = as_u64(call0(obj, s_data_ptr).ptr(), "torch data_ptr()");
  view.device_type = cuda ? kb::DeviceType::cuda : kb::DeviceType::cpu;
  view.device_id = dev;
  view.ndim = read_ints(attr(obj, s_shape).ptr(), view.shape, "torch tensor shape");
  read_ints(call0(obj, s_stride).ptr(), view.strides, "torch tensor stride()");
  int64_t item = view.itemsize();
  for (int i = 0; i < view.ndim; ++i) view.strides[i] = byte_stride(view.strides[i], item);
  info.keepalive = py::reinterpret_borrow<py::object>(obj);
  if (cuda) {
    info.has_producer_stream = true;
    info.producer_stream = torch_current_stream(dev, memo);
  }
  return true;
}

// ---- NumPy -----------------------------------------------------------------------------------------

// NumPy's PyArrayInterface, the C struct behind `__array_struct__` (NumPy's documented array interface
// protocol). Of all ways to read pointer, shape, strides and flags it is the cheapest (one capsule, no
// dict, no ctypes object), and it works for every array, where NumPy's own __dlpack__ refuses
// non-native byte order, strides that are not multiples of the itemsize and ml_dtypes types.
struct NpyArrayInterface {
  int two;             // 2, a sanity check
  int nd;
  char typekind;
  int itemsize;
  int flags;
  Py_ssize_t* shape;
  Py_ssize_t* strides;  // in bytes
  void* data;
  PyObject* descr;
};
constexpr int kNpyWriteable = 0x0400;

// ndarray's own `__array_struct__` and `dtype` getters (documented cache: looked up once, kept for the
// process), so a subclass cannot describe other memory than the array's.
struct NpyGetters {
  PyObject* array_struct = nullptr;
  PyObject* dtype = nullptr;
  bool ready = false;
  void init(PyTypeObject* ndarray) {
    if (ready) return;
    py::handle t(reinterpret_cast<PyObject*>(ndarray));
    array_struct = py::object(t.attr("__array_struct__")).release().ptr();
    dtype = py::object(t.attr("dtype")).release().ptr();
    if (!Py_TYPE(array_struct)->tp_descr_get || !Py_TYPE(dtype)->tp_descr_get)
      throw_py(PyExc_TypeError, "numpy.ndarray.__array_struct__ / .dtype are not descriptors");
    ready = true;
  }
  static py::object get(PyObject* descr, PyObject* obj) {
    PyObject* r = Py_TYPE(descr)->tp_descr_get(descr, obj, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
    if (!r) throw py::error_already_set();
    return py::reinterpret_steal<py::object>(r);
  }
};
NpyGetters g_npy;

void from_numpy(PyObject* obj, kb::ArrayView& view, IntakeInfo& info) {
  g_npy.init(g_numpy.type);
  view = kb::ArrayView{};
  view.dtype = numpy_dtype(NpyGetters::get(g_npy.dtype, obj).ptr());  // refuses non-native byte order
  py::object cap = NpyGetters::get(g_npy.array_struct, obj);
  void* p = PyCapsule_CheckExact(cap.ptr()) ? PyCapsule_GetPointer(cap.ptr(), PyCapsule_GetName(cap.ptr())) : nullptr;
  if (!p) {
    PyErr_Clear();
    throw_py(PyExc_TypeError, "numpy.ndarray: __array_struct__ did not return an array-interface capsule");
  }
  const auto* ai = static_cast<const NpyArrayInterface*>(p);
  if (ai->two != 2 || ai->nd < 0 || ai->nd > kMaxDims || (ai->nd > 0 && (!ai->shape || !ai->strides))) {
    throw_py(PyExc_ValueError, "numpy.ndarray with " + std::to_string(ai->nd) +
                                   " dimensions: kernelbridge supports 0.." + std::to_string(kMaxDims));
  }
  if (ai->itemsize != view.itemsize()) {
    unsupported_dtype("NumPy dtype " + std::string(py::repr(NpyGetters::get(g_npy.dtype, obj))) + " of " +
                      std::to_string(ai->itemsize) + " bytes per element (kernelbridge's " +
                      kb::dtype_long_name(view.dtype) + " has " + std::to_string(view.itemsize()) + ")");
  }
  view.ndim = ai->nd;
  for (int i = 0; i < ai->nd; ++i) {
    view.shape[i] = ai->shape[i];
    view.strides[i] = ai->strides[i];
  }
  view.ptr = reinterpret_cast<uint64_t>(ai->data);
  view.readonly = (ai->flags & kNpyWriteable) == 0;
  view.device_type = kb::DeviceType::cpu;
  view.device_id = 0;
  info.keepalive = py::reinterpret_borrow<py::object>(obj);
}

// ---- DLPack ----------------------------------------------------------------------------------------

constexpr const char* kOwnerVersioned = "kernelbridge.dlpack_owner_versioned";
constexpr const char* kOwnerLegacy = "kernelbridge.dlpack_owner";

// The owner capsules call the producer's deleter when the last view dies (the GIL is held here; the
// DLPack spec lets producers' deleters run with or without it).
void owner_versioned_dtor(PyObject* cap) {
  auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, kOwnerVersioned));
  if (m && m->deleter) m->deleter(m);
  if (!m) PyErr_Clear();
}
void owner_legacy_dtor(PyObject* cap) {
  auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kOwnerLegacy));
  if (m && m->deleter) m->deleter(m);
  if (!m) PyErr_Clear();
}

kb::DeviceType device_from_dlpack(int32_t t) {
  switch (t) {
    case kDLCPU: return kb::DeviceType::cpu;
    case kDLCUDA: return kb::DeviceType::cuda;
    case kDLCUDAHost: return kb::DeviceType::cuda_host;
    case kDLCUDAManaged: return kb::DeviceType::cuda_managed;
    default: return kb::DeviceType::other;
  }
}

void fill_from_dltensor(const DLTensor& t, bool subbyte_padded, kb::ArrayView& view) {
  view = kb::ArrayView{};
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    throw_py(PyExc_ValueError, "DLPack tensor has " + std::to_string(t.ndim) +
                                   " dimensions, kernelbridge supports 0.." + std::to_string(kMaxDims));
  }
  view.dtype = dtype_from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes);
  std::string given = "DLPack dtype (code=" + std::to_string(t.dtype.code) + ", bits=" +
                      std::to_string(t.dtype.bits) + ", lanes=" + std::to_string(t.dtype.lanes) + ")";
  if (view.dtype == kb::DType::invalid) unsupported_dtype(given);
  if (kb::dtype_bits(view.dtype) < 8 && !subbyte_padded) {
    unsupported_dtype(given + " packed below one byte per element (only the padded form, one element "
                              "per byte, is supported)");
  }
  if (t.ndim > 0 && !t.shape) throw_py(PyExc_BufferError, "DLPack tensor has no shape array");
  view.ndim = t.ndim;
  for (int i = 0; i < t.ndim; ++i) view.shape[i] = t.shape[i];
  check_shape(view, "DLPack tensor");
  if (t.strides) {
    int64_t item = view.itemsize();
    for (int i = 0; i < t.ndim; ++i) view.strides[i] = byte_stride(t.strides[i], item);
  } else {
    c_contiguous_strides(view);
  }
  if (__builtin_add_overflow(reinterpret_cast<uint64_t>(t.data), t.byte_offset, &view.ptr))
    raise_bridge_error("LayoutError", "DLPack tensor: data pointer " + std::to_string(reinterpret_cast<uint64_t>(t.data)) +
                                          " + byte_offset " + std::to_string(t.byte_offset) + " overflows 64 bits");
  // A NULL `data` holds nothing, whatever byte_offset says (check_view_extent catches view.ptr == 0).
  if (t.data == nullptr && view.ptr != 0 && !view.overflow_reason() && view.size() != 0)
    raise_null_data(view, "DLPack tensor");
  view.device_type = device_from_dlpack(t.device.device_type);
  view.device_id = t.device.device_id;
}

void parse_capsule(PyObject* cap, kb::ArrayView& view, IntakeInfo& info) {
  if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    auto* m = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(cap, "dltensor_versioned"));
    PyCapsule_SetName(cap, "used_dltensor_versioned");  // we own it now, whatever happens below
    py::object owner = py::reinterpret_steal<py::object>(
        PyCapsule_New(m, kOwnerVersioned, owner_versioned_dtor));
    if (!owner) { if (m->deleter) m->deleter(m); throw py::error_already_set(); }
    if (m->version.major > DLPACK_MAJOR_VERSION) {
      throw_py(PyExc_BufferError, "DLPack producer sent version " + std::to_string(m->version.major) +
                                      "." + std::to_string(m->version.minor) +
                                      ", newer than this consumer understands (" +
                                      std::to_string(DLPACK_MAJOR_VERSION) + ".x)");
    }
    fill_from_dltensor(m->dl_tensor, (m->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0, view);
    view.readonly = (m->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    info.keepalive = std::move(owner);
    return;
  }
  if (PyCapsule_IsValid(cap, "dltensor")) {
    auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
    PyCapsule_SetName(cap, "used_dltensor");
    py::object owner = py::reinterpret_steal<py::object>(PyCapsule_New(m, kOwnerLegacy, owner_legacy_dtor));
    if (!owner) { if (m->deleter) m->deleter(m); throw py::error_already_set(); }
    fill_from_dltensor(m->dl_tensor, false, view);
    info.keepalive = std::move(owner);
    return;
  }
  std::string what = PyCapsule_CheckExact(cap)
                         ? std::string("a capsule named '") + (PyCapsule_GetName(cap) ? PyCapsule_GetName(cap) : "") +
                               "' (already consumed?)"
                         : std::string("a ") + Py_TYPE(cap)->tp_name;
  throw_py(PyExc_TypeError, "__dlpack__() returned " + what +
                                ", expected a 'dltensor_versioned' or 'dltensor' capsule");
}

void from_dlpack(PyObject* obj, PyObject* dlpack, kb::ArrayView& view, IntakeInfo& info,
                 int64_t consumer_stream) {
  KB_NAME(s_dlpack_device, "__dlpack_device__");
  KB_NAME(s_stream, "stream");
  KB_NAME(s_max_version, "max_version");
  int32_t dev_type = kDLCPU;
  py::object devfn = opt_attr(obj, s_dlpack_device);
  if (devfn) {
    py::object d = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(devfn.ptr()));
    if (!d) throw py::error_already_set();
    int64_t pair[kMaxDims];
    if (read_ints(d.ptr(), pair, "__dlpack_device__()") != 2) {
      throw_py(PyExc_TypeError, "__dlpack_device__() must return (device_type, device_id)");
    }
    dev_type = static_cast<int32_t>(pair[0]);
  }
  // The stream argument is only meaningful for CUDA memory; CPU producers require stream=None.
  py::dict kwargs;
  if (dev_type == kDLCUDA || dev_type == kDLCUDAManaged) {
    int64_t s = consumer_stream == 0 ? 1 : consumer_stream;
    kwargs[s_stream] = py::int_(s);
  }
  static PyObject* max_version = py::make_tuple(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION).release().ptr();
  kwargs[s_max_version] = max_version;
  static PyObject* no_args = PyTuple_New(0);
  PyObject* cap = PyObject_Call(dlpack, no_args, kwargs.ptr());
  if (!cap && PyErr_ExceptionMatches(PyExc_TypeError)) {  // legacy producer without max_version
    PyErr_Clear();
    if (PyDict_DelItem(kwargs.ptr(), s_max_version) != 0) throw py::error_already_set();
    cap = PyObject_Call(dlpack, no_args, kwargs.ptr());
  }
  if (!cap) throw py::error_already_set();
  py::object capsule = py::reinterpret_steal<py::object>(cap);
  parse_capsule(capsule.ptr(), view, info);
}

void from_cai(PyObject* dict, kb::ArrayView& view, IntakeInfo& info) {
  if (!PyDict_Check(dict)) {
    throw_py(PyExc_TypeError, std::string("__cuda_array_interface__ must be a dict, got ") +
                                  Py_TYPE(dict)->tp_name);
  }
  auto item = [dict](const char* key, bool required) -> PyObject* {
    PyObject* v = PyDict_GetItemString(dict, key);  // borrowed
    if (!v && required) {
      throw_py(PyExc_ValueError, std::string("__cuda_array_interface__ lacks the required key '") + key + "'");
    }
    return v;
  };
  int64_t version = as_i64(item("version", true), "__cuda_array_interface__['version']");
  if (version < 0 || version > 3) {
    throw_py(PyExc_ValueError, "__cuda_array_interface__ version " + std::to_string(version) +
                                   " is not supported (0..3)");
  }
  PyObject* mask = item("mask", false);
  if (mask && mask != Py_None) {
    throw_py(PyExc_ValueError, "__cuda_array_interface__ with a mask (masked array) is not supported");
  }
  view = kb::ArrayView{};
  PyObject* typestr = item("typestr", true);
  if (!PyUnicode_Check(typestr)) throw_py(PyExc_TypeError, "__cuda_array_interface__['typestr'] must be a str");
  Py_ssize_t ts_len = 0;
  const char* ts = PyUnicode_AsUTF8AndSize(typestr, &ts_len);
  if (!ts || std::strlen(ts) != static_cast<size_t>(ts_len)) {
    // a lone surrogate (not text any dtype could be named by) or a NUL inside: shown escaped, whole
    if (!ts) PyErr_Clear();
    py::object shown = py::reinterpret_steal<py::object>(PyObject_ASCII(typestr));
    if (!shown) throw py::error_already_set();
    unsupported_dtype("CUDA Array Interface typestr " + std::string(PyUnicode_AsUTF8(shown.ptr())) +
                      (ts ? " (a NUL byte inside it)" : " (not valid text)"));
  }
  view.dtype = dtype_from_typestr(ts, static_cast<size_t>(ts_len));
  if (view.dtype == kb::DType::invalid) unsupported_dtype(std::string("CUDA Array Interface typestr '") + ts + "'");
  view.ndim = read_ints(item("shape", true), view.shape, "__cuda_array_interface__['shape']");
  check_shape(view, "__cuda_array_interface__");
  PyObject* strides = item("strides", false);
  if (strides && strides != Py_None) {
    if (read_ints(strides, view.strides, "__cuda_array_interface__['strides']") != view.ndim) {
      throw_py(PyExc_ValueError, "__cuda_array_interface__: strides and shape differ in length");
    }
  } else {
    c_contiguous_strides(view);
  }
  PyObject* data = item("data", true);
  if (!PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) {
    throw_py(PyExc_TypeError, "__cuda_array_interface__['data'] must be a tuple (pointer, read_only)");
  }
  view.ptr = as_u64(PyTuple_GET_ITEM(data, 0), "__cuda_array_interface__['data'][0]");
  view.readonly = truth(PyTuple_GET_ITEM(data, 1), "__cuda_array_interface__['data'][1] (read-only flag)");
  view.device_type = kb::DeviceType::cuda;
  view.device_id = g_pointer_device && view.ptr ? g_pointer_device(view.ptr) : -1;
  PyObject* stream = version >= 3 ? item("stream", false) : nullptr;
  if (stream && stream != Py_None) {
    uint64_t h = as_u64(stream, "__cuda_array_interface__['stream']");
    if (h == 0) {
      throw_py(PyExc_ValueError, "__cuda_array_interface__['stream'] is 0, which the interface (v3) "
                                 "disallows as ambiguous: use 1 (legacy default stream), 2 (per-thread "
                                 "default stream) or a stream handle");
    }
    info.has_producer_stream = true;
    info.producer_stream = h;
  }
}

}  // namespace

// The ArrayBase inside a bridge array (obj passed PyObject_TypeCheck against ArrayBase). A Python
// subclass with ArrayBase as its one pybind11 base has pybind11's simple instance layout: its value
// pointer is read directly, without pybind11's registered-type lookup (a hash-map probe per argument,
// per launch); any other layout, or an instance whose ArrayBase was never constructed, goes through
// the ordinary cast (which refuses the latter with pybind11's error).
ArrayBase& array_base_of(PyObject* obj) {
  auto* inst = reinterpret_cast<py::detail::instance*>(obj);
  if (inst->simple_layout && inst->simple_holder_constructed && inst->simple_value_holder[0] != nullptr)
    return *static_cast<ArrayBase*>(inst->simple_value_holder[0]);
  return py::handle(obj).cast<ArrayBase&>();
}


// ---- public ------------------------------------------------------------------------------------------

void set_pointer_device_resolver(PointerDeviceFn fn) { g_pointer_device = fn; }

[[noreturn]] void raise_bridge_error(const char* cls, const std::string& message) {
  static PyObject* errors = py::module_::import("bridge.errors").release().ptr();
  py::object c = py::handle(errors).attr(cls);
  PyErr_SetObject(c.ptr(), utf8_str(message).ptr());
  throw py::error_already_set();
}

kb::DType dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes) {
  using kb::DType;
  if (lanes != 1) return DType::invalid;
  switch (code) {
    case kDLInt: return bits == 8 ? DType::i8 : bits == 16 ? DType::i16 : bits == 32 ? DType::i32
                      : bits == 64 ? DType::i64 : DType::invalid;
    case kDLUInt: return bits == 8 ? DType::u8 : bits == 16 ? DType::u16 : bits == 32 ? DType::u32
                       : bits == 64 ? DType::u64 : DType::invalid;
    case kDLFloat: return bits == 16 ? DType::f16 : bits == 32 ? DType::f32 : bits == 64 ? DType::f64
                        : DType::invalid;
    case kDLBfloat: return bits == 16 ? DType::bf16 : DType::invalid;
    case kDLComplex: return bits == 64 ? DType::c64 : bits == 128 ? DType::c128 : DType::invalid;
    case kDLBool: return bits == 8 ? DType::bool_ : DType::invalid;
    case kDLFloat8_e3m4: return bits == 8 ? DType::f8e3m4 : DType::invalid;
    case kDLFloat8_e4m3: return bits == 8 ? DType::f8e4m3 : DType::invalid;
    case kDLFloat8_e4m3fn: return bits == 8 ? DType::f8e4m3fn : DType::invalid;
    case kDLFloat8_e4m3fnuz: return bits == 8 ? DType::f8e4m3fnuz : DType::invalid;
    case kDLFloat8_e5m2: return bits == 8 ? DType::f8e5m2 : DType::invalid;
    case kDLFloat8_e5m2fnuz: return bits == 8 ? DType::f8e5m2fnuz : DType::invalid;
    case kDLFloat8_e8m0fnu: return bits == 8 ? DType::f8e8m0fnu : DType::invalid;
    case kDLFloat6_e2m3fn: return bits == 6 ? DType::f6e2m3fn : DType::invalid;
    case kDLFloat6_e3m2fn: return bits == 6 ? DType::f6e3m2fn : DType::invalid;
    case kDLFloat4_e2m1fn: return bits == 4 ? DType::f4e2m1fn : DType::invalid;
    default: return DType::invalid;  // includes kDLFloat8_e4m3b11fnuz and opaque handles
  }
}

bool dtype_to_dlpack(kb::DType t, uint8_t& code, uint8_t& bits) {
  using kb::DType;
  bits = static_cast<uint8_t>(kb::dtype_bits(t));
  switch (t) {
    case DType::bool_: code = kDLBool; return true;
    case DType::i8: case DType::i16: case DType::i32: case DType::i64: code = kDLInt; return true;
    case DType::u8: case DType::u16: case DType::u32: case DType::u64: code = kDLUInt; return true;
    case DType::f16: case DType::f32: case DType::f64: code = kDLFloat; return true;
    case DType::bf16: code = kDLBfloat; return true;
    case DType::c64: case DType::c128: code = kDLComplex; return true;
    case DType::f8e3m4: code = kDLFloat8_e3m4; return true;
    case DType::f8e4m3: code = kDLFloat8_e4m3; return true;
    case DType::f8e4m3fn: code = kDLFloat8_e4m3fn; return true;
    case DType::f8e4m3fnuz: code = kDLFloat8_e4m3fnuz; return true;
    case DType::f8e5m2: code = kDLFloat8_e5m2; return true;
    case DType::f8e5m2fnuz: code = kDLFloat8_e5m2fnuz; return true;
    case DType::f8e8m0fnu: code = kDLFloat8_e8m0fnu; return true;
    case DType::f6e2m3fn: code = kDLFloat6_e2m3fn; return true;
    case DType::f6e3m2fn: code = kDLFloat6_e3m2fn; return true;
    case DType::f4e2m1fn: code = kDLFloat4_e2m1fn; return true;
    default: return false;
  }
}

namespace {
struct TypestrEntry { const char* body; kb::DType t; };
constexpr TypestrEntry kTypestrs[] = {
    {"b1", kb::DType::bool_}, {"i1", kb::DType::i8},   {"i2", kb::DType::i16},  {"i4", kb::DType::i32},
    {"i8", kb::DType::i64},   {"u1", kb::DType::u8},   {"u2", kb::DType::u16},  {"u4", kb::DType::u32},
    {"u8", kb::DType::u64},   {"f2", kb::DType::f16},  {"f4", kb::DType::f32},  {"f8", kb::DType::f64},
    {"c8", kb::DType::c64},   {"c16", kb::DType::c128}};
}  // namespace

kb::DType dtype_from_typestr(const char* s, size_t n) {
  if (!s || n == 0) return kb::DType::invalid;
  char order = s[0];
  bool little = PY_LITTLE_ENDIAN != 0;
  bool native = order == '|' || order == '=' || (order == '<' && little) || (order == '>' && !little);
  if (!native) return kb::DType::invalid;
  for (const auto& e : kTypestrs) {
    const size_t body = std::strlen(e.body);
    if (n - 1 == body && std::memcmp(s + 1, e.body, body) == 0) {   // the whole rest, no byte more
      bool single_byte = kb::dtype_bits(e.t) == 8;
      // NumPy writes '|' only for one-byte types; accept '<'/'=' there too.
      if (order == '|' && !single_byte) return kb::DType::invalid;
      return e.t;
    }
  }
  return kb::DType::invalid;
}

const char* dtype_typestr(kb::DType t) {
  static const char* le[] = {"|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8",
                             "<f2", "<f4", "<f8", "<c8", "<c16"};
  static const char* be[] = {"|b1", "|i1", ">i2", ">i4", ">i8", "|u1", ">u2", ">u4", ">u8",
                             ">f2", ">f4", ">f8", ">c8", ">c16"};
  static const kb::DType order[] = {kb::DType::bool_, kb::DType::i8, kb::DType::i16, kb::DType::i32,
                                    kb::DType::i64, kb::DType::u8, kb::DType::u16, kb::DType::u32,
                                    kb::DType::u64, kb::DType::f16, kb::DType::f32, kb::DType::f64,
                                    kb::DType::c64, kb::DType::c128};
  for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); ++i) {
    if (order[i] == t) return PY_LITTLE_ENDIAN ? le[i] : be[i];
  }
  return nullptr;
}

bool intake(PyObject* obj, kb::ArrayView& view, IntakeInfo& info, int64_t consumer_stream,
            IntakeMemo* memo) {
  info = IntakeInfo{};
  // Scalars first: the common non-array arguments must cost nothing.
  if (PyLong_CheckExact(obj) || PyFloat_CheckExact(obj) || PyBool_Check(obj) || obj == Py_None ||
      PyComplex_CheckExact(obj)) {
    return false;
  }
  PyTypeObject* base = array_base_type();
  if (base && PyObject_TypeCheck(obj, base)) { from_array_base(obj, view, info); return true; }
  if (g_cupy.matches(obj)) {
    from_cupy(obj, view, info, memo);
    check_view_extent(view, "CuPy ndarray");
    return true;
  }
  if (g_torch.matches(obj) && from_torch(obj, view, info, memo)) {
    check_view_extent(view, "torch tensor");
    return true;
  }
  if (g_numpy.matches(obj)) {
    from_numpy(obj, view, info);
    check_view_extent(view, "NumPy ndarray");
    return true;
  }
  KB_NAME(s_dlpack, "__dlpack__");
  py::object dl = opt_attr(obj, s_dlpack);
  if (dl) {
    from_dlpack(obj, dl.ptr(), view, info, consumer_stream);
    check_view_extent(view, "DLPack tensor");
    return true;
  }
  KB_NAME(s_cai, "__cuda_array_interface__");
  py::object cai = opt_attr(obj, s_cai);
  if (cai) {
    from_cai(cai.ptr(), view, info);
    info.keepalive = py::reinterpret_borrow<py::object>(obj);
    check_view_extent(view, "__cuda_array_interface__ array");
    return true;
  }
  return false;
}

}  // namespace kb::native
