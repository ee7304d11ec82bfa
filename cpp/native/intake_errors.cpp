// Typed, named errors for what intake and launch configuration parsing refuse (declared in intake.hpp).
//
// Why apart from intake.cpp: the launcher, the contract bindings and intake all raise through these,
// so a producer's odd error, a bad grid or a message quoting user bytes becomes the same typed error
// (bridge/errors.py classes, naming the kernel and argument) wherever it happens.
#include <cstring>
#include <string>

#include "intake.hpp"

namespace py = pybind11;

namespace kb::native {

bool translatable(const py::error_already_set& err) {
  PyObject* t = err.type().ptr();
  return PyErr_GivenExceptionMatches(t, PyExc_Exception) && !PyErr_GivenExceptionMatches(t, PyExc_MemoryError);
}

std::string exception_text(PyObject* exc) {
  std::string out = Py_TYPE(exc)->tp_name;
  PyObject* s = PyObject_Str(exc);
  const char* u = s ? PyUnicode_AsUTF8(s) : nullptr;
  if (u && *u) out += std::string(": ") + u;
  if (!u) PyErr_Clear();
  Py_XDECREF(s);
  return out;
}

py::str utf8_str(const std::string& text) {
  PyObject* s = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

namespace {
// "(4,)" / "(2, 3)": a tuple as Python writes it.
std::string tuple_text(const int64_t* v, int n) {
  std::string out = "(";
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + (n == 1 ? ",)" : ")");
}
}  // namespace

[[noreturn]] void raise_null_data(const kb::ArrayView& view, const char* producer) {
  raise_bridge_error("LayoutError", std::string(producer) + " of shape " + tuple_text(view.shape, view.ndim) +
                                        ": its data pointer is NULL (0) but it has " + std::to_string(view.size()) +
                                        " element(s); only an empty array may come without memory");
}

void check_view_extent(const kb::ArrayView& view, const char* producer) {
  const char* why = view.overflow_reason();
  if (!why) {
    if (view.ptr == 0 && view.size() != 0) raise_null_data(view, producer);  // size() is exact: no overflow
    return;
  }
  raise_bridge_error("LayoutError", std::string(producer) + " of shape " + tuple_text(view.shape, view.ndim) +
                                        " with byte strides " + tuple_text(view.strides, view.ndim) + " at address " +
                                        std::to_string(view.ptr) + ": " + why);
}

[[noreturn]] void raise_for_argument(py::error_already_set& err, const std::string& kernel, int pos,
                                     const std::string& name) {
  if (!translatable(err)) throw err;
  static PyObject* errors = py::module_::import("bridge.errors").release().ptr();
  py::handle mod(errors);
  py::object orig = err.value();
  py::object cls = err.type();
  if (!PyType_Check(cls.ptr()) || PyObject_IsSubclass(cls.ptr(), mod.attr("LaunchContractError").ptr()) != 1) {
    PyErr_Clear();
    cls = mod.attr("ArgumentKindError");
  }
  std::string text;
  if (PyObject* s = PyObject_Str(orig.ptr())) {  // the message, without the class name
    const char* u = PyUnicode_AsUTF8(s);
    text = u ? u : "";
    Py_DECREF(s);
  }
  if (PyErr_Occurred()) PyErr_Clear();
  if (text.empty() || !PyObject_IsInstance(orig.ptr(), mod.attr("LaunchContractError").ptr()))
    text = exception_text(orig.ptr());  // a producer's own error: say which it was
  std::string prefix = kernel + ": argument '" + name + "' (#" + std::to_string(pos) + "): ";
  py::object exc = cls(utf8_str(prefix + text), py::arg("kernel") = utf8_str(kernel), py::arg("arg") = pos,
                       py::arg("arg_name") = utf8_str(name));
  PyException_SetCause(exc.ptr(), orig.release().ptr());  // steals
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

std::string KernelName::get() const {
  if (name) return *name;
  std::string out = "kernel";
  if (!miss_callback) return out;
  PyObject* owner = PyObject_GetAttrString(miss_callback, "__self__");  // a bound method: the DSL kernel
  if (!owner) { PyErr_Clear(); owner = miss_callback; Py_INCREF(owner); }
  PyObject* n = PyObject_GetAttrString(owner, "__name__");
  Py_DECREF(owner);
  const char* u = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : nullptr;
  if (u) out = u;
  Py_XDECREF(n);
  if (PyErr_Occurred()) PyErr_Clear();
  return out;
}

namespace {
// A launch-configuration error of class `cls` (bridge.errors), naming the kernel; a pending Python
// error (a failing __index__) becomes its __cause__.
[[noreturn]] void config_error(const char* cls, const KernelName& kernel, const std::string& what) {
  py::object cause;
  if (PyErr_Occurred()) {
    py::error_already_set err;
    if (!translatable(err)) throw err;
    cause = err.value();
  }
  std::string k = kernel.get();
  std::string msg = k + ": " + what + (cause ? " (" + exception_text(cause.ptr()) + ")" : std::string());
  static PyObject* errors = py::module_::import("bridge.errors").release().ptr();
  py::object exc = py::handle(errors).attr(cls)(utf8_str(msg), py::arg("kernel") = utf8_str(k));
  if (cause) PyException_SetCause(exc.ptr(), cause.release().ptr());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

std::string type_label(PyObject* o) {
  std::string t = Py_TYPE(o)->tp_name;
  if (PyFloat_Check(o) || PyUnicode_Check(o)) {  // short, harmless values: show them
    PyObject* r = PyObject_Repr(o);
    const char* u = r ? PyUnicode_AsUTF8(r) : nullptr;
    if (u && std::strlen(u) <= 40) t += std::string(" ") + u;
    Py_XDECREF(r);
    if (PyErr_Occurred()) PyErr_Clear();
  }
  return t;
}

// One grid/block value; `what` ("grid") and `index` (-1: the value itself) only name it in errors.
int64_t launch_int(PyObject* v, const char* cls, const char* type_cls, const char* what, int index,
                   const KernelName& kernel) {
  if (PyLong_CheckExact(v)) {  // the common case: no __index__ call
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow > 0 ? INT64_MAX : overflow < 0 ? INT64_MIN : x;
  }
  auto name = [&] { return std::string(what) + (index >= 0 ? "[" + std::to_string(index) + "]" : ""); };
  if (!PyLong_Check(v) && !PyIndex_Check(v))
    config_error(type_cls, kernel, std::string(what) + " must be an int or a tuple of 1 to 3 ints, got " +
                                       (index >= 0 ? name() + " = " : std::string()) + type_label(v));
  PyObject* idx = PyNumber_Index(v);
  if (!idx) config_error(cls, kernel, name() + ": " + Py_TYPE(v)->tp_name + ".__index__() failed");
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (overflow > 0) return INT64_MAX;   // out of range either way: the validator reports it
  if (overflow < 0) return INT64_MIN;
  return x;
}
}  // namespace

void parse_launch_dims(PyObject* obj, const char* what, int64_t out[3], const KernelName& kernel) {
  out[0] = out[1] = out[2] = 0;
  if (obj == Py_None) return;
  const bool grid = what[0] == 'g';
  const char* cls = grid ? "GridSizeError" : "BlockSizeError";
  const char* type_cls = grid ? "GridSizeTypeError" : "BlockSizeTypeError";
  if (PyTuple_Check(obj) || PyList_Check(obj)) {
    // A tuple snapshot: an element's __index__ cannot shrink a list under us.
    py::object t = py::reinterpret_steal<py::object>(PyTuple_Check(obj) ? (Py_INCREF(obj), obj) : PyList_AsTuple(obj));
    if (!t) throw py::error_already_set();
    const Py_ssize_t n = PyTuple_GET_SIZE(t.ptr());
    if (n < 1 || n > 3)
      config_error(type_cls, kernel, std::string(what) + " must have 1 to 3 dimensions, got " + std::to_string(n));
    for (Py_ssize_t i = 0; i < 3; ++i)
      out[i] = i >= n ? 1 : launch_int(PyTuple_GET_ITEM(t.ptr(), i), cls, type_cls, what, static_cast<int>(i), kernel);
    return;
  }
  out[0] = launch_int(obj, cls, type_cls, what, -1, kernel);
  out[1] = out[2] = 1;
}

int64_t parse_shared_mem(PyObject* obj, const KernelName& kernel, bool negative_ok) {
  if (obj == Py_None) return -1;
  if (!PyLong_Check(obj) && !PyIndex_Check(obj))
    config_error("SharedMemoryError", kernel, "shared_mem must be an int (bytes), got " + type_label(obj));
  PyObject* idx = PyNumber_Index(obj);
  if (!idx) config_error("SharedMemoryError", kernel, std::string("shared_mem: ") + Py_TYPE(obj)->tp_name +
                                                          ".__index__() failed");
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (overflow > 0) return INT64_MAX;  // the validator reports the limit
  if (negative_ok) return overflow < 0 ? INT64_MIN : x;
  if (overflow < 0 || x < 0)
    config_error("SharedMemoryError", kernel, "shared_mem must be >= 0 bytes, got " +
                                                  (overflow < 0 ? std::string("a value below -2**63") : std::to_string(x)));
  return x;
}

}  // namespace kb::native
