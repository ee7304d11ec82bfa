// bridge._native: the launch-contract validator (cpp/include/kernelbridge/contract.hpp) bound into Python.
//
// Why here and not in Python: the launcher validates in C++ on the hot path; this file gives Python
// the same objects (Contract, DeviceLimits, FuncAttrs, ArrayDesc) and the same errors for tests,
// the DSL and user-written contracts.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "errors.hpp"
#include "intake.hpp"
#include "native.hpp"
#include "kernelbridge/detail/tensor_map.hpp"
#include "scalars.hpp"

namespace py = pybind11;

namespace kb::native {

[[noreturn]] void throw_contract_error(const kb::Error& e, const std::string& kernel) {
  py::object make = py::module_::import("bridge.errors").attr("contract_error");
  // utf8_str: the message quotes contract text and must never become a UnicodeDecodeError
  py::object arg = e.arg >= 0 ? py::object(py::int_(e.arg)) : py::object(py::none());
  py::object name = e.arg_name.empty() ? py::object(py::none()) : py::object(utf8_str(e.arg_name));
  py::object kern = kernel.empty() ? py::object(py::none()) : py::object(utf8_str(kernel));
  py::object exc = make(static_cast<int>(e.code), utf8_str(e.message), kern, arg, name);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw py::error_already_set();
}

namespace {

// Python int → integer ArgValue (int64, big unsigned, or huge with its double value).
void from_pylong(PyObject* o, kb::ArgValue& v) {
  v.scalar_kind = kb::ArgValue::ScalarKind::integer;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow == 0 && !(x == -1 && PyErr_Occurred())) {
    v.i = x;
    v.f = static_cast<double>(x);
    return;
  }
  PyErr_Clear();
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (!PyErr_Occurred()) {
      v.is_big_unsigned = true;
      v.u = u;
      v.f = static_cast<double>(u);
      return;
    }
    PyErr_Clear();
  }
  v.huge_int = true;
  v.f = PyLong_AsDouble(o);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    v.f = overflow > 0 ? HUGE_VAL : -HUGE_VAL;
  }
}

bool numpy_like_scalar_type(PyTypeObject* tp) {
  const char* n = tp->tp_name;
  if (std::strncmp(n, "numpy.", 6) == 0) {
    return std::strcmp(n, "numpy.ndarray") != 0 && std::strcmp(n, "numpy.matrix") != 0 &&
           std::strcmp(n, "numpy.memmap") != 0 && std::strcmp(n, "numpy.recarray") != 0;
  }
  return std::strncmp(n, "ml_dtypes.", 10) == 0;
}

// Documented cache: NumPy / ml_dtypes scalar type -> its dtype, looked up once per type (the launch
// hot path sees the same few types). Guarded by the GIL; each cached type holds a reference, so its
// address is never reused by another type.
struct ScalarTypeEntry {
  PyTypeObject* type;
  kb::DType dtype;
};
ScalarTypeEntry g_scalar_types[64];
int g_n_scalar_types = 0;

kb::DType numpy_scalar_dtype(PyObject* o) {
  PyTypeObject* tp = Py_TYPE(o);
  for (int k = 0; k < g_n_scalar_types; ++k)
    if (g_scalar_types[k].type == tp) return g_scalar_types[k].dtype;
  py::handle h(o);
  std::string name;
  try {
    if (!py::hasattr(h, "dtype")) return kb::DType::invalid;
    name = py::str(h.attr("dtype").attr("name"));
  } catch (py::error_already_set&) {
    PyErr_Clear();
    return kb::DType::invalid;
  }
  std::string plain = name;
  for (const char* family : {"float8_", "float6_", "float4_"})
    if (name.rfind(family, 0) == 0) plain = std::string("f") + family[5] + name.substr(7);
  kb::DType t = kb::dtype_from_name(plain);
  if (g_n_scalar_types < 64) {
    Py_INCREF(reinterpret_cast<PyObject*>(tp));
    g_scalar_types[g_n_scalar_types++] = {tp, t};
  }
  return t;
}

// NumPy / ml_dtypes scalar: its dtype gives the typed dtype, its value goes through __float__,
// __index__ or truth. Returns false when it is not a numeric scalar.
bool from_numpy_scalar(PyObject* o, kb::ArgValue& v) {
  kb::DType t = numpy_scalar_dtype(o);
  if (t == kb::DType::invalid) return false;
  v.scalar_dtype = t;
  if (t == kb::DType::bool_) {
    v.scalar_kind = kb::ArgValue::ScalarKind::boolean;
    int truth = PyObject_IsTrue(o);
    if (truth < 0) { PyErr_Clear(); v.scalar_kind = kb::ArgValue::ScalarKind::none; }
    v.i = truth > 0;
  } else if (kb::dtype_is_signed_int(t) || kb::dtype_is_unsigned_int(t)) {
    PyObject* idx = PyNumber_Index(o);
    if (!idx) { PyErr_Clear(); return true; }
    from_pylong(idx, v);
    Py_DECREF(idx);
  } else if (kb::dtype_is_float(t)) {
    double d = PyFloat_AsDouble(o);
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return true; }
    v.scalar_kind = kb::ArgValue::ScalarKind::floating;
    v.f = d;
  }
  return true;
}

}  // namespace

bool argvalue_from_scalar(PyObject* o, kb::ArgValue& v) {
  v = kb::ArgValue();
  PyTypeObject* tp = Py_TYPE(o);
  v.type_name = tp->tp_name;
  if (tp == &PyBool_Type) {
    v.scalar_kind = kb::ArgValue::ScalarKind::boolean;
    v.i = o == Py_True;
    return true;
  }
  if (tp == &PyLong_Type) { from_pylong(o, v); return true; }
  if (tp == &PyFloat_Type) {
    v.scalar_kind = kb::ArgValue::ScalarKind::floating;
    v.f = PyFloat_AS_DOUBLE(o);
    return true;
  }
  if (numpy_like_scalar_type(tp)) return from_numpy_scalar(o, v);
  if (PyLong_Check(o)) { from_pylong(o, v); return true; }
  if (PyFloat_Check(o)) {
    v.scalar_kind = kb::ArgValue::ScalarKind::floating;
    v.f = PyFloat_AsDouble(o);
    return true;
  }
  if (PyComplex_Check(o)) { v.scalar_dtype = kb::DType::c128; return true; }
  return false;
}

namespace {

// A described array, for tests and callers that know pointer and sizes (no intake needed).
struct ArrayDesc {
  kb::ArrayView view;
};

ArrayDesc make_desc(uint64_t ptr, const std::vector<int64_t>& shape, py::object strides, const std::string& dtype,
                    int device_type, int device_id, bool readonly) {
  ArrayDesc d;
  kb::ArrayView& a = d.view;
  if (shape.size() > static_cast<size_t>(kb::kMaxDims))
    throw py::value_error("ArrayDesc: shape: expected at most 8 dimensions, got " + std::to_string(shape.size()));
  a.dtype = kb::dtype_from_name(dtype);
  if (a.dtype == kb::DType::invalid || a.dtype == kb::DType::any)
    throw py::value_error("ArrayDesc: dtype: unknown dtype '" + dtype + "'");
  a.ptr = ptr;
  a.ndim = static_cast<int32_t>(shape.size());
  for (int k = 0; k < a.ndim; ++k) {
    if (shape[k] < 0) throw py::value_error("ArrayDesc: shape: expected non-negative extents");
    a.shape[k] = shape[k];
  }
  if (strides.is_none()) {
    int64_t s = a.itemsize();
    for (int k = a.ndim - 1; k >= 0; --k) {  // saturating: the validator refuses such extents (LayoutError)
      a.strides[k] = s;
      if (__builtin_mul_overflow(s, a.shape[k], &s)) s = INT64_MAX;
    }
  } else {
    auto st = strides.cast<std::vector<int64_t>>();
    if (st.size() != shape.size())
      throw py::value_error("ArrayDesc: strides_bytes: expected " + std::to_string(shape.size()) + " strides, got " +
                            std::to_string(st.size()));
    for (int k = 0; k < a.ndim; ++k) a.strides[k] = st[k];
  }
  a.device_type = static_cast<kb::DeviceType>(device_type);
  if (device_type != 1 && device_type != 2 && device_type != 3 && device_type != 13) a.device_type = kb::DeviceType::other;
  a.device_id = device_id;
  a.readonly = readonly;
  return d;
}

py::tuple int_tuple(const int64_t* v, int n) {
  py::tuple t(n);
  for (int k = 0; k < n; ++k) t[k] = py::int_(v[k]);
  return t;
}

// None → zeros; int → (n, 1, 1); sequence of 1..3 ints → padded with 1.
template <class T>
void read_dims(py::handle o, T out[3], const char* what) {
  out[0] = out[1] = out[2] = 0;
  if (o.is_none()) return;
  if (PyLong_Check(o.ptr())) { out[0] = o.cast<T>(); out[1] = out[2] = 1; return; }
  std::vector<int64_t> v;
  try {
    v = o.cast<std::vector<int64_t>>();
  } catch (py::cast_error&) {
    throw py::type_error(std::string(what) + ": expected an int or a tuple of 1 to 3 ints, got " +
                         std::string(py::str(py::type::of(o).attr("__name__"))));
  }
  if (v.empty() || v.size() > 3)
    throw py::value_error(std::string(what) + ": expected 1 to 3 dimensions, got " + std::to_string(v.size()));
  for (int d = 0; d < 3; ++d) out[d] = d < static_cast<int>(v.size()) ? static_cast<T>(v[d]) : 1;
}

py::dict arg_dict(const kb::ArgSpec& a) {
  py::dict d;
  d["name"] = a.name;
  d["kind"] = a.kind == kb::ArgKind::array ? "array" : "scalar";
  d["dtype"] = kb::dtype_name(a.dtype);
  if (a.kind == kb::ArgKind::array) {
    d["ndim"] = a.ndim;
    d["layout"] = kb::detail::layout_name(a.layout);
    d["align"] = a.align;
    d["access"] = kb::detail::access_name(a.access);
    d["abi"] = kb::detail::abi_name(a.abi);
    if (a.optional) d["optional"] = true;   // as in the JSON: only when set
  }
  return d;
}

std::shared_ptr<kb::LaunchContract> contract_from_json(const std::string& text) {
  auto c = std::make_shared<kb::LaunchContract>();
  kb::Error e = kb::parse_contract(text, *c);
  if (e) throw_contract_error(e, c->kernel);
  return c;
}

// Contract(json): text (str, or UTF-8 bytes). A str that cannot be encoded as UTF-8 (a lone
// surrogate) is a malformed contract like any other, not a pybind11 argument-type error.
std::shared_ptr<kb::LaunchContract> contract_from_object(py::handle obj) {
  if (PyUnicode_Check(obj.ptr())) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(obj.ptr(), &n);
    if (s == nullptr) {
      PyErr_Clear();
      Py_ssize_t len = PyUnicode_GetLength(obj.ptr()), at = 0;
      for (; at < len; ++at) {
        Py_UCS4 ch = PyUnicode_ReadChar(obj.ptr(), at);
        if (ch >= 0xD800 && ch <= 0xDFFF) break;
      }
      kb::Error e;
      e.code = kb::ErrorCode::contract_definition;
      e.message = "invalid contract: the JSON text cannot be encoded as UTF-8 (a lone surrogate at "
                  "character " + std::to_string(at) + ")";
      throw_contract_error(e, "");
    }
    return contract_from_json(std::string(s, static_cast<size_t>(n)));
  }
  if (PyBytes_Check(obj.ptr())) return contract_from_json(obj.cast<std::string>());
  throw py::type_error(std::string("Contract(json): expected the contract's JSON text (str), got ") +
                       Py_TYPE(obj.ptr())->tp_name);
}

void register_limits(py::module_& m) {
  py::class_<kb::DeviceLimits>(m, "DeviceLimits", "Live limits of one device, as the validator uses them.")
      .def(py::init<>())
      .def_readwrite("device_id", &kb::DeviceLimits::device_id)
      .def_readwrite("cc", &kb::DeviceLimits::cc)
      .def_readwrite("max_threads_per_block", &kb::DeviceLimits::max_threads_per_block)
      .def_property("max_block",
          [](const kb::DeviceLimits& d) { return py::make_tuple(d.max_block[0], d.max_block[1], d.max_block[2]); },
          [](kb::DeviceLimits& d, py::handle v) { read_dims<int>(v, d.max_block, "max_block"); })
      .def_property("max_grid", [](const kb::DeviceLimits& d) { return int_tuple(d.max_grid, 3); },
          [](kb::DeviceLimits& d, py::handle v) { read_dims<int64_t>(v, d.max_grid, "max_grid"); })
      .def_readwrite("smem_per_block", &kb::DeviceLimits::smem_per_block)
      .def_readwrite("smem_per_block_optin", &kb::DeviceLimits::smem_per_block_optin)
      .def_readwrite("sm_count", &kb::DeviceLimits::sm_count)
      .def_readwrite("sim_max_coresident", &kb::DeviceLimits::sim_max_coresident,
                     "Blocks a driver-less caller (the CPU simulator) declares it runs at once for a "
                     "cooperative grid; 0 = not declared (without a driver the check is then skipped).")
      .def_readwrite("peer_mask", &kb::DeviceLimits::peer_mask,
                     "Bit d set: arrays on cuda:d are accepted too (peer access enabled for the launch).")
      .def_readwrite("host_memory", &kb::DeviceLimits::host_memory,
                     "True for the CPU simulator: arrays must be host memory instead of device memory.");
  py::class_<kb::FuncAttrs>(m, "FuncAttrs", "Attributes of one compiled function (cuFuncGetAttribute).")
      .def(py::init<>())
      .def_readwrite("max_threads_per_block", &kb::FuncAttrs::max_threads_per_block)
      .def_readwrite("static_smem", &kb::FuncAttrs::static_smem)
      .def_readwrite("num_regs", &kb::FuncAttrs::num_regs)
      .def_readwrite("max_dynamic_smem", &kb::FuncAttrs::max_dynamic_smem)
      .def_property("required_cluster",
          [](const kb::FuncAttrs& f) {
            return py::make_tuple(f.required_cluster[0], f.required_cluster[1], f.required_cluster[2]);
          },
          [](kb::FuncAttrs& f, py::handle v) {
            read_dims<int>(v, f.required_cluster, "required_cluster");
            if (f.required_cluster[0] <= 0 || f.required_cluster[1] <= 0 || f.required_cluster[2] <= 0)
              f.required_cluster[0] = f.required_cluster[1] = f.required_cluster[2] = 0;
          },
          "Cluster dims compiled into the function (.reqnctapercluster), (0, 0, 0) when none.")
      .def_readwrite("cluster_must_be_set", &kb::FuncAttrs::cluster_must_be_set,
                     "The function was compiled with .explicitcluster: it must be launched with a cluster.");
}

void register_array_desc(py::module_& m) {
  py::class_<ArrayDesc>(m, "ArrayDesc", "An array described by pointer, shape, byte strides and dtype.")
      .def(py::init(&make_desc), py::arg("ptr"), py::arg("shape"), py::arg("strides_bytes") = py::none(),
           py::arg("dtype_name") = "f32", py::arg("device_type") = 2, py::arg("device_id") = 0,
           py::arg("readonly") = false)
      .def_property_readonly("ptr", [](const ArrayDesc& d) { return d.view.ptr; })
      .def_property_readonly("shape", [](const ArrayDesc& d) { return int_tuple(d.view.shape, d.view.ndim); })
      .def_property_readonly("strides_bytes", [](const ArrayDesc& d) { return int_tuple(d.view.strides, d.view.ndim); })
      .def_property_readonly("dtype", [](const ArrayDesc& d) { return kb::dtype_name(d.view.dtype); })
      .def_property_readonly("device_type", [](const ArrayDesc& d) { return static_cast<int>(d.view.device_type); })
      .def_property_readonly("device_id", [](const ArrayDesc& d) { return d.view.device_id; })
      .def_property_readonly("readonly", [](const ArrayDesc& d) { return d.view.readonly; })
      .def("extent", [](const ArrayDesc& d) {
             uint64_t lo, hi;
             d.view.extent(lo, hi);
             return py::make_tuple(lo, hi);
           }, "Half-open byte range [lo, hi) the view touches (the aliasing check uses it).")
      .def("__repr__", [](const ArrayDesc& d) {
        return "ArrayDesc(ptr=" + kb::detail::hex_text(d.view.ptr) + ", shape=" +
               kb::detail::tuple_text(d.view.shape, d.view.ndim) + ", dtype=" + kb::dtype_name(d.view.dtype) + ")";
      });
}

// One parsed `requires` node as a nested dict (the ONE relation parser's tree, for tools such as
// bridge.testing that solve relations for sizes): {"op", "text", ...operands}. Terms name their
// argument; "cmp" lists its operands and the operators between them.
py::dict relation_node(const kb::LaunchContract& c, const kb::Relation& r, int i) {
  using Op = kb::RelNode::Op;
  static const char* names[] = {"lit", "len", "shape_k", "shape", "size", "ndim", "scalar", "grid", "block",
                                "tuple", "neg", "add", "sub", "mul", "floordiv", "mod", "cmp", "and"};
  const kb::RelNode& n = r.nodes[i];
  py::dict d;
  d["op"] = names[static_cast<int>(n.op)];
  d["text"] = kb::detail::node_text(r, i);
  if (n.op == Op::lit) d["value"] = n.k;
  if (n.is_term() && !n.is_launch()) d["arg"] = c.args[n.arg].name;
  if (n.op == Op::shape_k || n.is_launch()) d["axis"] = n.k;   // launch terms: 0 x, 1 y, 2 z
  if (!n.kids.empty()) {
    py::list kids;
    for (int k : n.kids) kids.append(relation_node(c, r, k));
    d["operands"] = kids;
  }
  if (n.op == Op::cmp) {
    py::list ops;
    for (uint8_t o : n.cmp_ops) ops.append(kb::detail::cmp_text(o));
    d["ops"] = ops;
  }
  return d;
}

void register_contract_class(py::module_& m) {
  using C = kb::LaunchContract;
  py::class_<C, std::shared_ptr<C>>(m, "Contract", "A parsed launch contract (schema v1, docs/architecture.md).")
      .def(py::init(&contract_from_object), py::arg("json"))
      .def_property_readonly("kernel", [](const C& c) { return c.kernel; })
      .def_property_readonly("domain", [](const C& c) { return c.domain; })
      .def_property_readonly("strict_domain", [](const C& c) { return c.strict_domain; })
      .def_property_readonly("block_exact", [](const C& c) -> py::object {
        if (!c.block_exact) return py::none();
        return py::make_tuple(c.block[0], c.block[1], c.block[2]);
      })
      .def_property_readonly("max_threads", [](const C& c) { return c.max_threads; })
      .def_property_readonly("dynamic_smem", [](const C& c) {
        return py::make_tuple(c.smem_exact ? "exact" : "max", c.smem);
      })
      .def_property_readonly("min_cc", [](const C& c) { return c.min_cc; })
      .def_property_readonly("args", [](const C& c) {
        py::list l;
        for (const auto& a : c.args) l.append(arg_dict(a));
        return l;
      })
      .def_property_readonly("requires", [](const C& c) { return c.requires_text; })
      .def_property_readonly("relation_trees", [](const C& c) {
        py::list l;
        for (const auto& r : c.relations) l.append(relation_node(c, *r, r->root));
        return l;
      }, "The parsed `requires` relations, one nested dict per relation (same order as `requires`).")
      .def_property_readonly("inplace", [](const C& c) {
        py::list l;
        for (const auto& p : c.inplace) l.append(py::make_tuple(c.args[p.first].name, c.args[p.second].name));
        return l;
      })
      .def_property_readonly("grid_from", [](const C& c) -> py::object {
        if (c.grid_from_arg < 0) return py::none();
        return py::str(c.args[c.grid_from_arg].name);
      })
      .def_property_readonly("grid_tile", [](const C& c) -> py::object {
        if (c.grid_tile.empty()) return py::none();
        py::tuple t(c.grid_tile.size());
        for (size_t k = 0; k < c.grid_tile.size(); ++k) t[k] = py::int_(c.grid_tile[k]);
        return t;
      }, "tile shape of a tile grid (one block per tile of grid_from), or None")
      .def_property_readonly("max_blocks_per_sm", [](const C& c) { return c.max_blocks_per_sm; })
      .def_property_readonly("per_thread", [](const C& c) {
        return py::make_tuple(c.per_thread[0], c.per_thread[1], c.per_thread[2]);
      })
      .def_property_readonly("has_fault_buffer", [](const C& c) { return c.has_fault_buffer; })
      .def_property_readonly("param_count", [](const C& c) { return kb::param_count(c); },
                             "Kernel parameters a launch packs (arguments per abi, tensor maps, fault record)")
      .def_property_readonly("pdl", [](const C& c) { return c.pdl; },
                             "Launched with programmatic stream serialization (sm_90+)")
      .def_property_readonly("cooperative", [](const C& c) { return c.cooperative; },
                             "Launched cooperatively (grid-wide sync; grid limited to co-resident blocks)")
      .def_property_readonly("cluster", [](const C& c) -> py::object {
        if (!c.has_cluster()) return py::none();
        return py::make_tuple(c.cluster[0], c.cluster[1], c.cluster[2]);
      }, "Thread-block cluster dims (x, y, z), or None")
      .def_property_readonly("cluster_nonportable", [](const C& c) { return c.cluster_nonportable; })
      .def_property_readonly("fault_sites", [](const C& c) {
        py::list l;
        for (const auto& f : c.fault_sites) {
          py::dict d;
          d["id"] = f.id; d["array"] = f.array; d["file"] = f.file; d["line"] = f.line; d["text"] = f.text;
          l.append(d);
        }
        return l;
      })
      .def("to_json", [](const C& c) { return kb::contract_to_json(c); })
      .def("__eq__", [](const C& a, const C& b) { return kb::contract_to_json(a) == kb::contract_to_json(b); })
      .def("__hash__", [](const C& c) { return py::hash(py::str(kb::contract_to_json(c))); })
      .def("__repr__", [](const C& c) { return "Contract(" + kb::contract_to_json(c) + ")"; })
      .def(py::pickle([](const C& c) { return py::make_tuple(kb::contract_to_json(c)); },
                      [](py::tuple t) { return contract_from_json(t[0].cast<std::string>()); }));
}

// Python value → ArgValue: ArrayDesc, then scalars, then the one array intake (no stream sync);
// anything else stays an unusable scalar so the validator reports a kind error naming its type.
void arg_from_python(py::handle o, kb::ArgValue& v, IntakeInfo& info) {
  if (o.is_none()) {   // an absent array (allowed where the contract declares it optional)
    v = kb::ArgValue::absent();
    return;
  }
  if (py::isinstance<ArrayDesc>(o)) {
    v = kb::ArgValue();
    v.kind = kb::ArgKind::array;
    v.array = o.cast<const ArrayDesc&>().view;
    v.type_name = "ArrayDesc";
    return;
  }
  if (argvalue_from_scalar(o.ptr(), v)) return;
  if (intake(o.ptr(), v.array, info, -1)) {
    v.kind = kb::ArgKind::array;
    return;
  }
  v = kb::ArgValue();
  v.type_name = Py_TYPE(o.ptr())->tp_name;
}

// A Python stand-in for the driver's occupancy answers (tests of the validator's cooperative and cluster
// checks without a GPU): `blocks_per_sm(threads, smem)` and `active_clusters(grid, block, smem, cluster)`.
struct PyOccupancy final : kb::Occupancy {
  py::object obj;
  explicit PyOccupancy(py::object o) : obj(std::move(o)) {}
  int64_t blocks_per_sm(int threads, int64_t smem) override {
    return obj.attr("blocks_per_sm")(threads, smem).cast<int64_t>();
  }
  int64_t active_clusters(const kb::LaunchConfig& cfg, const int cluster[3]) override {
    int64_t b[3] = {cfg.block[0], cfg.block[1], cfg.block[2]};
    int64_t cl[3] = {cluster[0], cluster[1], cluster[2]};
    return obj.attr("active_clusters")(int_tuple(cfg.grid, 3), int_tuple(b, 3), cfg.smem, int_tuple(cl, 3))
        .cast<int64_t>();
  }
};

py::tuple validate_py(const kb::LaunchContract& c, py::sequence args, py::object grid, py::object block,
                      py::object smem, const kb::DeviceLimits* limits, const kb::FuncAttrs* attrs,
                      py::object occupancy) {
  kb::DeviceLimits dev = limits ? *limits : kb::DeviceLimits();
  kb::FuncAttrs fn = attrs ? *attrs : kb::FuncAttrs();
  std::vector<py::object> keep;
  std::vector<kb::ArgValue> vals(py::len(args));
  std::vector<IntakeInfo> infos(vals.size());
  for (size_t k = 0; k < vals.size(); ++k) {
    keep.push_back(args[k]);
    const int pos = static_cast<int>(k);
    const std::string name = k < c.args.size() ? c.args[k].name : std::string("?");
    try {
      arg_from_python(keep.back(), vals[k], infos[k]);
    } catch (py::error_already_set& e) {  // as in a launch: named, typed, the producer's error as __cause__
      raise_for_argument(e, c.kernel, pos, name);
    } catch (py::builtin_exception& e) {
      e.set_error();
      py::error_already_set err;
      raise_for_argument(err, c.kernel, pos, name);
    }
  }
  kb::LaunchConfig cfg;
  KernelName kname;
  kname.name = &c.kernel;
  int64_t given_block[3];
  parse_launch_dims(grid.ptr(), "grid", cfg.grid, kname);
  parse_launch_dims(block.ptr(), "block", given_block, kname);
  for (int d = 0; d < 3; ++d) {
    const int64_t v = given_block[d];
    cfg.block[d] = static_cast<int>(v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : v);
  }
  cfg.smem = parse_shared_mem(smem.ptr(), kname, /*negative_ok=*/true);  // -1: the contract's, as None
  std::unique_ptr<PyOccupancy> occ;
  if (!occupancy.is_none()) occ = std::make_unique<PyOccupancy>(occupancy);
  kb::Error e = kb::validate(c, vals.data(), static_cast<int>(vals.size()), cfg, dev, fn, occ.get());
  if (e) throw_contract_error(e, c.kernel);
  int64_t b[3] = {cfg.block[0], cfg.block[1], cfg.block[2]};
  return py::make_tuple(int_tuple(cfg.grid, 3), int_tuple(b, 3));
}

py::bytes pack_scalar_py(py::handle value, const std::string& dtype) {
  kb::LaunchContract c;
  c.kernel = "pack_scalar";
  kb::ArgSpec sp;
  sp.name = "value";
  sp.kind = kb::ArgKind::scalar;
  sp.dtype = kb::detail::dtype_from_short_name(dtype);
  if (sp.dtype == kb::DType::invalid) sp.dtype = kb::dtype_from_name(dtype);
  if (!kb::detail::scalar_dtype_ok(sp.dtype))
    throw py::value_error("pack_scalar: dtype: expected bool, an integer, f16, bf16, f32 or f64, got '" + dtype + "'");
  c.args.push_back(sp);
  kb::ArgValue v;
  if (!argvalue_from_scalar(value.ptr(), v)) v.scalar_kind = kb::ArgValue::ScalarKind::none;
  kb::Error e = kb::detail::check_scalar_kind(c, 0, v);
  if (!e) e = kb::detail::check_scalar_range(c, 0, v);
  if (e) throw_contract_error(e, c.kernel);
  unsigned char buf[8];
  int n = kb::pack_scalar(v, sp.dtype, buf);
  return py::bytes(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

void register_contract(py::module_& m) {
  static const char* code_names[] = {"ok", "argument_count", "argument_kind", "dtype", "ndim", "shape_relation",
                                     "layout", "alignment", "readonly", "aliasing", "device_mismatch",
                                     "scalar_range", "block_size", "grid_size", "shared_memory",
                                     "compute_capability", "contract_definition", "missing_contract",
                                     "cooperative_grid", "cluster"};
  static_assert(sizeof code_names / sizeof *code_names == static_cast<size_t>(kb::ErrorCode::cluster) + 1,
                "ERROR_CODES must list every kb::ErrorCode");
  py::dict codes;
  for (size_t k = 0; k < sizeof code_names / sizeof *code_names; ++k) codes[code_names[k]] = static_cast<int>(k);
  m.attr("ERROR_CODES") = codes;  // kb::ErrorCode name -> value (bridge.errors.ERROR_CLASSES is indexed by it)
  register_limits(m);
  register_array_desc(m);
  register_contract_class(m);
  m.def("validate", &validate_py, py::arg("contract"), py::arg("args"), py::arg("grid") = py::none(),
        py::arg("block") = py::none(), py::arg("smem") = py::none(), py::arg("limits") = nullptr,
        py::arg("attrs") = nullptr, py::arg("occupancy") = py::none(),
        "Validate a launch; returns the resolved (grid, block) or raises the bridge.errors class. "
        "occupancy: None (skip the occupancy checks) or an object with blocks_per_sm(threads, smem) and "
        "active_clusters(grid, block, smem, cluster), standing in for the driver. "
        "A derived grid with a 0 dimension (empty grid_from array) means: launch nothing. smem=None means the contract's.");
  m.def("pack_scalar", &pack_scalar_py, py::arg("value"), py::arg("dtype"),
        "Kernel-parameter bytes of a scalar in `dtype`, after the validator's kind and range checks.");
}

}  // namespace kb::native
