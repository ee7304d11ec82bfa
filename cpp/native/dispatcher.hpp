// The Dispatcher of the native launch path: an argument signature -> the Launcher of that specialisation
// (launcher.hpp), asking the DSL on a miss. Its Python bindings and fastcall: launcher.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher.hpp"

namespace kb::native {

// Maps an argument signature (per argument: type, dtype, ndim, C-contiguity, 16-byte alignment, and
// optionally last extent % 8 == 0) to a Launcher; on a miss asks `miss_callback(args) -> Launcher` (the
// DSL specialises generic kernels). A plan per position lets the tile model use the same path:
// kPartition positions take a Tiling (its array is launched, its tile shape joins the key), kConstant
// positions join the key by value (hash + equality) and are not passed to the kernel.
class Dispatcher {
 public:
  enum Kind : uint8_t { kPass = 0, kPartition = 1, kConstant = 2 };
  static constexpr int kKeyWords = 3;

  Dispatcher(py::object miss, py::object plan, bool key_div8, py::object names, std::string kernel,
             bool pass_device = false)
      : miss_(std::move(miss)), key_div8_(key_div8), pass_device_(pass_device), kernel_(std::move(kernel)) {
    if (!plan.is_none())
      for (py::handle k : plan) {
        int v = k.cast<int>();
        if (v < kPass || v > kConstant) throw py::value_error("Dispatcher plan: kinds are 0, 1 or 2");
        plan_.push_back(static_cast<uint8_t>(v));
      }
    if (!names.is_none())
      for (py::handle n : names) names_.push_back(n.cast<std::string>());
  }

  void launch_tuple(py::handle args, const kb::LaunchConfig& cfg, uint64_t stream, bool peer = false) {
    launch_objs(PySequence_Fast_ITEMS(args.ptr()), static_cast<int>(PyTuple_GET_SIZE(args.ptr())), args, cfg,
                stream, kb::rt::g_temporary_refcount_native, peer);
  }

  // `args`: the arguments as a tuple when the caller has one (the miss callback takes it), else empty.
  // The key ends with the launch device (launch_device), so each device gets its own Launcher.
  void launch_objs(PyObject* const* objs, int n, py::handle args, const kb::LaunchConfig& cfg, uint64_t stream,
                   Py_ssize_t temp_refcount, bool peer = false) {
    // No heap allocation on the hot path for up to kStackArgs arguments.
    kb::ArgValue vals_stack[kStackArgs];
    IntakeInfo infos_stack[kStackArgs];
    uint64_t key_stack[kKeyWords * kStackArgs + 1];
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
      key_heap.resize(kKeyWords * static_cast<size_t>(n) + 1);
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
      call_miss(as_tuple(objs, n, args), launch_device(nullptr, 0, stream, peer));
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
      bool known;
      try {
        known = reader_.read(i, o, v, info, stream, memo);
      } catch (py::error_already_set& e) {
        rethrow_positional(e, i);
      }
      if (!known) {
        k[1] |= 1;
        continue;
      }
      if (v.kind != kb::ArgKind::array || v.none) continue;   // None: its type (k[0]) is the key
      const kb::ArrayView& a = v.array;
      const bool div8 = key_div8_ && a.ndim > 0 && a.shape[a.ndim - 1] % 8 == 0;
      // 16-byte rows of 1-byte elements: only those read it (dsl.tile.types.row_divisor), so other
      // dtypes do not split into twin specialisations (TileKernel.facts gates it the same way)
      const bool div16 = div8 && a.itemsize() == 1 && a.shape[a.ndim - 1] % 16 == 0;
      k[1] |= (uint64_t{1} << 40) | (static_cast<uint64_t>(a.dtype) << 16) |
              (static_cast<uint64_t>(static_cast<uint32_t>(a.ndim)) << 4) | (div8 ? 8u : 0u) | (div16 ? 4u : 0u) |
              (a.is_c_contiguous() ? 2u : 0u) | (a.ptr % 16 == 0 ? 1u : 0u);
    }
    const int device = launch_device(vals, nflat, stream, peer);
    key[kKeyWords * n] = static_cast<uint64_t>(static_cast<uint32_t>(device));
    const size_t klen = kKeyWords * static_cast<size_t>(n) + 1;
    Launcher* target = nullptr;
    if (last_ >= 0 && matches(entries_[last_], key, klen, consts, nconst)) target = entries_[last_].launcher;
    for (size_t j = 0; target == nullptr && j < entries_.size(); ++j)
      if (matches(entries_[j], key, klen, consts, nconst)) {
        target = entries_[j].launcher;
        last_ = static_cast<int>(j);
      }
    if (target == nullptr) {
      py::object l = call_miss(as_tuple(objs, n, args), device);
      target = l.cast<Launcher*>();
      if (pass_device_ && target->device() != device)
        throw py::value_error(kernel_ + ": the specialisation callback returned a Launcher of cuda:" +
                              std::to_string(target->device()) + " for a launch on cuda:" + std::to_string(device));
      py::tuple kept(nconst);
      for (int c = 0; c < nconst; ++c) kept[c] = py::reinterpret_borrow<py::object>(consts[c]);
      entries_.push_back(Entry{std::vector<uint64_t>(key, key + klen), l, target, std::move(kept)});
      last_ = static_cast<int>(entries_.size() - 1);
    }
    target->launch_prepared(flat, nflat, vals, infos, cfg, stream, temp_refcount, inner, peer);
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

  // The miss callback: miss(args), or miss(args, device) for a device-aware one (pass_device).
  py::object call_miss(const py::tuple& args, int device) {
    return pass_device_ ? miss_(args, device) : miss_(args);
  }

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
  ReadPlan reader_;                              // per position: array or scalar, by Python type
  bool key_div8_ = false;
  bool pass_device_ = false;
  std::vector<std::string> names_;
  std::string kernel_;
  std::vector<Entry> entries_;
  int last_ = -1;
};

}  // namespace kb::native
