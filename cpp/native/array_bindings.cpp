// bridge._native.ArrayBase (the C++ half of bridge.Array), intake_view and DLPack export bindings.
#include <pybind11/stl.h>

#include <string>

#include "intake.hpp"
#include "native.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace kb::native {
namespace {

PyTypeObject* g_array_base_type = nullptr;
PyTypeObject* g_tiling_type = nullptr;

Tiling make_tiling(py::handle array, py::handle tile_shape) {
  Tiling t;
  IntakeInfo info;
  if (!intake(array.ptr(), t.view, info, -1)) {
    throw py::type_error(std::string("tile.partition: argument 'array': expected an array, got ") +
                         Py_TYPE(array.ptr())->tp_name);
  }
  t.array = py::reinterpret_borrow<py::object>(array);
  t.ndim = t.view.ndim;
  std::vector<int64_t> dims;
  bool ok = true;
  if (PyLong_Check(tile_shape.ptr()) && !PyBool_Check(tile_shape.ptr())) {
    int overflow = 0;
    dims.push_back(PyLong_AsLongLongAndOverflow(tile_shape.ptr(), &overflow));
    ok = overflow == 0;
  } else if (PyTuple_Check(tile_shape.ptr())) {
    for (py::handle d : py::reinterpret_borrow<py::tuple>(tile_shape)) {
      if (!PyLong_Check(d.ptr()) || PyBool_Check(d.ptr())) { ok = false; break; }
      int overflow = 0;
      dims.push_back(PyLong_AsLongLongAndOverflow(d.ptr(), &overflow));
      if (overflow) { ok = false; break; }
    }
  } else {
    ok = false;
  }
  if (ok && static_cast<int>(dims.size()) != t.ndim) ok = false;
  for (int64_t d : dims) if (d <= 0 || (d & (d - 1)) != 0) ok = false;
  if (!ok) {
    throw py::value_error("tile.partition: argument 'tile_shape': expected a tuple of " + std::to_string(t.ndim) +
                          " powers of two (one per array axis), got " + std::string(py::repr(tile_shape)));
  }
  for (int k = 0; k < t.ndim; ++k) t.tile[k] = dims[k];
  return t;
}

py::tuple tiles_per_axis(const Tiling& t) {
  py::tuple g(t.ndim);
  for (int k = 0; k < t.ndim; ++k) g[k] = py::int_((t.view.shape[k] + t.tile[k] - 1) / t.tile[k]);
  return g;
}

ArrayBase from_intake(py::handle source, int64_t consumer_stream) {
  ArrayBase a;
  IntakeInfo info;
  if (!intake(source.ptr(), a.view, info, consumer_stream)) {
    throw py::type_error(std::string("expected an array (bridge.Array, CuPy, PyTorch, a DLPack or CUDA "
                                     "Array Interface producer), got ") + Py_TYPE(source.ptr())->tp_name);
  }
  a.owner = std::move(info.keepalive);
  a.has_stream = info.has_producer_stream;
  a.stream = info.producer_stream;
  if (a.has_stream) a.stream_generation = kb::rt::stream_generation(a.stream);   // the stream living now
  return a;
}

kb::DType parse_dtype(const std::string& name) {
  kb::DType t = kb::dtype_from_name(name);
  if (t == kb::DType::invalid || t == kb::DType::any) {
    raise_bridge_error("DTypeError", "dtype: expected a kernelbridge dtype name such as 'float32' or "
                                     "'bf16', got '" + name + "'");
  }
  return t;
}

ArrayBase from_raw(uint64_t ptr, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                   const std::string& dtype, int device_type, int device_id, bool readonly,
                   py::object owner, py::object stream, py::object stream_generation) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    throw py::value_error("shape: at most " + std::to_string(kMaxDims) + " dimensions are supported, got " +
                          std::to_string(shape.size()));
  }
  if (strides.size() != shape.size()) {
    throw py::value_error("strides: expected " + std::to_string(shape.size()) + " entries (one per axis), got " +
                          std::to_string(strides.size()));
  }
  ArrayBase a;
  a.view.ptr = ptr;
  a.view.ndim = static_cast<int32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw py::value_error("shape: extents must be >= 0, got " + std::to_string(shape[i]));
    a.view.shape[i] = shape[i];
    a.view.strides[i] = strides[i];
  }
  a.view.dtype = parse_dtype(dtype);
  switch (device_type) {
    case 1: case 2: case 3: case 13: a.view.device_type = static_cast<kb::DeviceType>(device_type); break;
    default:
      throw py::value_error("device_type: expected a DLPack device type 1 (CPU), 2 (CUDA), 3 (CUDA host) "
                            "or 13 (CUDA managed), got " + std::to_string(device_type));
  }
  a.view.device_id = device_id;
  a.view.readonly = readonly;
  check_view_extent(a.view, "array");  // LayoutError: element count / byte extent / address range overflow
  a.owner = std::move(owner);
  if (!stream.is_none()) {
    if (!PyLong_Check(stream.ptr()))
      throw py::type_error(std::string("stream: expected an int handle or None, got ") + Py_TYPE(stream.ptr())->tp_name);
    a.has_stream = true;
    a.stream = stream.cast<uint64_t>();
    a.stream_generation = stream_generation.is_none() ? kb::rt::stream_generation(a.stream)
                                                      : stream_generation.cast<uint64_t>();
  }
  return a;
}

py::tuple to_tuple(const int64_t* v, int n) {
  py::tuple t(n);
  for (int i = 0; i < n; ++i) t[i] = py::int_(v[i]);
  return t;
}

}  // namespace

PyTypeObject* array_base_type() { return g_array_base_type; }
PyTypeObject* tiling_type() { return g_tiling_type; }

void register_arrays(py::module_& m) {
  auto cls = py::class_<ArrayBase>(m, "ArrayBase", R"doc(
A zero-copy view of one device (or host) array plus the object that keeps its memory alive.

Native base of bridge.Array. ArrayBase(source, *, consumer_stream=-1) takes a view of any array the
intake path accepts; ArrayBase(*, ptr, shape, strides, dtype, device_type, device_id, readonly, owner,
stream=None) wraps memory described by hand (allocation, slicing). Strides are in bytes.)doc");
  cls.def(py::init(&from_intake), py::arg("source"), py::kw_only(), py::arg("consumer_stream") = -1)
      .def(py::init(&from_raw), py::kw_only(), py::arg("ptr"), py::arg("shape"), py::arg("strides"),
           py::arg("dtype"), py::arg("device_type"), py::arg("device_id"), py::arg("readonly"),
           py::arg("owner"), py::arg("stream") = py::none(), py::arg("stream_generation") = py::none())
      .def_property_readonly("ptr", [](const ArrayBase& a) { return a.view.ptr; })
      .def_property_readonly("shape", [](const ArrayBase& a) { return to_tuple(a.view.shape, a.view.ndim); })
      .def_property_readonly("strides", [](const ArrayBase& a) { return to_tuple(a.view.strides, a.view.ndim); })
      .def_property_readonly("ndim", [](const ArrayBase& a) { return a.view.ndim; })
      .def_property_readonly("size", [](const ArrayBase& a) { return a.view.size(); })
      .def_property_readonly("nbytes", [](const ArrayBase& a) { return a.view.size() * a.view.itemsize(); })
      .def_property_readonly("itemsize", [](const ArrayBase& a) { return a.view.itemsize(); })
      .def_property_readonly("dtype_name", [](const ArrayBase& a) { return kb::dtype_long_name(a.view.dtype); })
      .def_property_readonly("dtype_tag", [](const ArrayBase& a) { return kb::dtype_name(a.view.dtype); },
                             "short contract spelling ('f32', 'bf16', ...)")
      .def_property_readonly("device_type", [](const ArrayBase& a) { return static_cast<int>(a.view.device_type); })
      .def_property_readonly("device_id", [](const ArrayBase& a) { return a.view.device_id; })
      .def_property_readonly("readonly", [](const ArrayBase& a) { return a.view.readonly; })
      .def_property_readonly("owner", [](const ArrayBase& a) { return a.owner ? a.owner : py::none(); })
      .def_property_readonly("is_c_contiguous", [](const ArrayBase& a) { return a.view.is_c_contiguous(); })
      .def_property_readonly("is_f_contiguous", [](const ArrayBase& a) { return a.view.is_f_contiguous(); })
      .def_property_readonly("extent", [](const ArrayBase& a) {
        uint64_t lo = 0, hi = 0;
        a.view.extent(lo, hi);
        return py::make_tuple(lo, hi);
      }, "half-open byte range (lo, hi) the view touches")
      .def_property("_stream",
                    [](const ArrayBase& a) -> py::object {
                      return a.has_stream ? py::object(py::int_(a.stream)) : py::none();
                    },
                    [](ArrayBase& a, py::object s) {
                      a.has_stream = !s.is_none();
                      a.stream = a.has_stream ? s.cast<uint64_t>() : 0;
                      a.stream_generation = a.has_stream ? kb::rt::stream_generation(a.stream) : 0;
                    },
                    "raw handle of a foreign producer's stream to order after (None: none)")
      .def_property_readonly("_stream_generation", [](const ArrayBase& a) { return a.stream_generation; },
                             "which bridge stream of that handle (0: a default or foreign stream)");
  g_array_base_type = reinterpret_cast<PyTypeObject*>(cls.ptr());

  auto tiling = py::class_<Tiling>(m, "Tiling", R"doc(
An array cut into tiles of a static shape (native base of dsl.tile.Partition): Tiling(array, tile_shape).

Launches pass the array itself (read again at every launch) and key specialisations on the tile shape.)doc");
  tiling.def(py::init(&make_tiling), py::arg("array"), py::arg("tile_shape"))
      .def_property_readonly("array", [](const Tiling& t) { return t.array; })
      .def_property_readonly("tile_shape", [](const Tiling& t) { return to_tuple(t.tile, t.ndim); })
      .def_property_readonly("shape", [](const Tiling& t) { return to_tuple(t.view.shape, t.ndim); })
      .def_property_readonly("ndim", [](const Tiling& t) { return t.ndim; })
      .def_property_readonly("dtype_tag", [](const Tiling& t) { return kb::dtype_name(t.view.dtype); })
      .def_property_readonly("grid", &tiles_per_axis, "tiles per axis: ceil(shape[k] / tile_shape[k])")
      .def_property_readonly("num_tiles", [](const Tiling& t) {
        int64_t n = 1;
        for (int k = 0; k < t.ndim; ++k) n *= (t.view.shape[k] + t.tile[k] - 1) / t.tile[k];
        return n;
      });
  g_tiling_type = reinterpret_cast<PyTypeObject*>(tiling.ptr());

  m.def("intake_view", [](py::handle obj, int64_t consumer_stream) { return from_intake(obj, consumer_stream); },
        py::arg("obj"), py::arg("consumer_stream") = -1,
        "View `obj` through the one intake path (zero-copy); TypeError when it is not an array.");
  m.def("make_dlpack_capsule", &make_dlpack_capsule, py::arg("array"), py::arg("versioned"),
        py::arg("readonly_flag"),
        "A 'dltensor_versioned' (versioned=True) or 'dltensor' capsule that keeps `array` alive.");
  m.def("dtype_from_dlpack", [](int code, int bits, int lanes) -> py::object {
          kb::DType t = dtype_from_dlpack(static_cast<uint8_t>(code), static_cast<uint8_t>(bits),
                                          static_cast<uint16_t>(lanes));
          return t == kb::DType::invalid ? py::object(py::none()) : py::object(py::str(kb::dtype_name(t)));
        }, py::arg("code"), py::arg("bits"), py::arg("lanes") = 1);
  m.def("dtype_to_dlpack", [](const std::string& name) -> py::object {
          uint8_t code = 0, bits = 0;
          if (!dtype_to_dlpack(parse_dtype(name), code, bits)) return py::none();
          return py::make_tuple(code, bits);
        }, py::arg("dtype"));
  m.def("dtype_from_typestr", [](const std::string& s) -> py::object {
          kb::DType t = dtype_from_typestr(s.data(), s.size());
          return t == kb::DType::invalid ? py::object(py::none()) : py::object(py::str(kb::dtype_name(t)));
        }, py::arg("typestr"));
  m.def("dtype_typestr", [](const std::string& name) -> py::object {
          const char* s = dtype_typestr(parse_dtype(name));
          return s ? py::object(py::str(s)) : py::object(py::none());
        }, py::arg("dtype"));
  m.def("dtype_itemsize", [](const std::string& name) { return kb::dtype_itemsize(parse_dtype(name)); },
        py::arg("dtype"));
}

}  // namespace kb::native
