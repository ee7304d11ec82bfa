// Python bindings of the launch path (Launcher: launcher.hpp, Dispatcher: dispatcher.hpp) and their fastcalls.
//
// Per launch, all in C++: intake every argument (plan cache by Python type), validate with the ONE
// validator (kb::validate), order after producer streams, pack the parameter buffer per `abi`, append
// the fault-record pointer, cuLaunchKernel, keep temporaries alive until the launch completes.
#include <chrono>

#include "dispatcher.hpp"
#include "launcher.hpp"

namespace py = pybind11;

namespace kb::native {

// `launcher.fastcall` / `dispatcher.fastcall`: a plain CPython METH_FASTCALL function bound to the
// target, for the hot path of `k(*args)` (no keyword arguments: the derived grid and block, the
// contract's shared memory, the current stream). It skips pybind11's argument conversion, which costs
// more than the rest of a cached launch's Python-side work.
namespace {

struct FastTarget {
  PyObject* owner;         // strong reference: the Launcher or Dispatcher Python object
  Launcher* launcher;
  Dispatcher* dispatcher;
  Given given;             // `k[grid, block(, stream(, smem))]`; default: derived, current stream
  bool configured = false;
};
constexpr const char* kFastCapsule = "kernelbridge.fastcall";

void fast_target_free(PyObject* cap) {
  auto* t = static_cast<FastTarget*>(PyCapsule_GetPointer(cap, kFastCapsule));
  if (t) {
    Py_XDECREF(t->owner);
    delete t;
  }
}

PyObject* fastcall_impl(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  KB_PHASE_BEGIN();
  auto* t = static_cast<FastTarget*>(PyCapsule_GetPointer(self, kFastCapsule));
  if (t == nullptr) return nullptr;
  try {
    kb::LaunchConfig cfg;
    cfg.smem = -1;                                  // the contract's exact dynamic shared memory
    uint64_t stream;
    // a temporary is referenced by the caller's value stack only, whether the user calls `cfg(*args)`
    // or a Python `*args` wrapper hands its tuple over (bridge/kernel.py calibrates it)
    // (unconfigured fastcalls are handed to instance __call__ wrappers only: their own calibration)
    const Py_ssize_t temp = t->configured ? kb::rt::g_temporary_refcount_fast : kb::rt::g_temporary_refcount_fast_call;
    if (t->configured) {
      cfg = t->given.cfg;
      stream = resolve_stream(t->given.stream.ptr());
    } else {
      stream = kb::rt::current_stream();
    }
    const int n = static_cast<int>(nargs);
    if (t->launcher) t->launcher->launch_objs(args, n, cfg, stream, temp);
    else t->dispatcher->launch_objs(args, n, py::handle(), cfg, stream, temp);
    KB_PHASE(7);
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const py::builtin_exception& e) {
    e.set_error();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
  Py_RETURN_NONE;
}

PyMethodDef g_fastcall_def = {"fastcall", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fastcall_impl)),
                              METH_FASTCALL, "Launch with derived grid and block on the current stream."};
PyMethodDef g_configured_def = {"configured",
                                reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(fastcall_impl)),
                                METH_FASTCALL, "kernel[grid, block, ...]: call with the kernel's arguments."};

py::object make_fastcall(py::handle owner, Launcher* l, Dispatcher* d, const Given* given = nullptr) {
  auto* t = new FastTarget{owner.inc_ref().ptr(), l, d, given ? *given : Given{}, given != nullptr};
  PyObject* cap = PyCapsule_New(t, kFastCapsule, fast_target_free);
  if (cap == nullptr) {
    Py_DECREF(t->owner);
    delete t;
    throw py::error_already_set();
  }
  PyObject* fn = PyCFunction_New(given ? &g_configured_def : &g_fastcall_def, cap);
  Py_DECREF(cap);
  if (fn == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fn);
}

Launcher* launcher_or_null(py::handle h) {
  return py::isinstance<Launcher>(h) ? h.cast<Launcher*>() : nullptr;
}
Dispatcher* dispatcher_or_null(py::handle h) {
  return py::isinstance<Dispatcher>(h) ? h.cast<Dispatcher*>() : nullptr;
}

PyObject* refcount_probe_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  PyObject* out = PyList_New(nargs);
  if (out == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyList_SET_ITEM(out, i, PyLong_FromSsize_t(Py_REFCNT(args[i])));
  return out;
}
PyMethodDef g_probe_fast_def = {"refcount_probe_fast",
                                reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(refcount_probe_fast)),
                                METH_FASTCALL, "Reference counts of the arguments as a fastcall launch sees them."};

}  // namespace

// kernel[grid, block], kernel[grid, block, stream], kernel[grid, block, stream, shared_mem]
Given given_from_item(py::handle item, const KernelName& kernel) {
  if (!PyTuple_Check(item.ptr()) || PyTuple_GET_SIZE(item.ptr()) < 2 || PyTuple_GET_SIZE(item.ptr()) > 4)
    throw py::type_error(kernel.get() + ": use kernel[grid, block], kernel[grid, block, stream] or "
                         "kernel[grid, block, stream, shared_mem]");
  py::tuple t = py::reinterpret_borrow<py::tuple>(item);
  py::object none = py::none();
  return make_given(t[0], t[1], t.size() > 3 ? py::object(t[3]) : none,
                    t.size() > 2 ? py::object(t[2]) : none, kernel);
}

// The kernel a configuration error names: a Launcher's contract, or a Dispatcher's miss-callback owner.
KernelName name_of(const Launcher& l) { KernelName k; k.name = &l.contract().kernel; return k; }
KernelName name_of(const Dispatcher& d) { KernelName k; k.miss_callback = d.miss_callback().ptr(); return k; }
KernelName name_of(py::handle self) {
  if (py::isinstance<Launcher>(self)) return name_of(self.cast<const Launcher&>());
  return name_of(self.cast<const Dispatcher&>());
}

void register_launch(py::module_& m) {
  kb::rt::register_streams(m);
  kb::rt::register_faults(m);
  kb::rt::register_modules(m);
  kb::rt::register_memory_order(m);
  kb::rt::register_devices(m);

  py::class_<Launcher>(m, "Launcher",
                       "One compiled function + its contract: validated launches, all in C++.")
      .def(py::init<uint64_t, py::object, py::object, py::object, int, py::object>(),
           py::arg("func_handle"), py::arg("contract"), py::arg("limits"), py::arg("attrs"),
           py::arg("device_id"), py::arg("fault_info") = py::none())
      .def("launch", [](Launcher& l, py::tuple args, py::object grid, py::object block, py::object smem,
                        py::object stream, bool keep_all, bool peer_access, bool from_call, py::object pdl) {
             Given g = make_given(grid, block, smem, stream, name_of(l));
             set_pdl(g, pdl, name_of(l));
             const Py_ssize_t temp = from_call ? kb::rt::g_temporary_refcount_tuple_call
                                               : kb::rt::g_temporary_refcount_tuple;
             l.launch_tuple(args, g.cfg, resolve_stream(g.stream.ptr()), keep_all ? PY_SSIZE_T_MAX : temp,
                            peer_access);
           }, py::arg("args"), py::arg("grid") = py::none(), py::arg("block") = py::none(),
           py::arg("smem") = py::none(), py::arg("stream") = py::none(), py::arg("keep_all") = false,
           py::arg("peer_access") = false, py::arg("from_call") = false, py::arg("pdl") = py::none(),
           "Validate and launch `args` (the tuple of a Python *args wrapper); stream None = this thread's "
           "current stream. keep_all: keep every array argument alive until the launch completes. "
           "peer_access: arrays of other devices are accepted (peer access is enabled for them). from_call: "
           "`args` is the tuple of an instance __call__(self, *args, **kw) (Kernel.__call__). pdl=False: "
           "launch a PDL kernel without programmatic stream serialization.")
      .def("__call__", [](Launcher& l, py::args args, py::object grid, py::object block,
                          py::object shared_mem, py::object stream, bool peer_access, py::object pdl) {
             Given g = make_given(grid, block, shared_mem, stream, name_of(l));
             set_pdl(g, pdl, name_of(l));
             l.launch_tuple(args, g.cfg, resolve_stream(g.stream.ptr()), kb::rt::g_temporary_refcount_native,
                            peer_access);
           }, py::kw_only(), py::arg("grid") = py::none(), py::arg("block") = py::none(),
           py::arg("shared_mem") = py::none(), py::arg("stream") = py::none(), py::arg("peer_access") = false,
           py::arg("pdl") = py::none())
      .def("configure", [](py::object self, py::object grid, py::object block, py::object stream,
                           py::object shared_mem) {
             Given g = make_given(grid, block, shared_mem, stream, name_of(self));
             return make_fastcall(self, launcher_or_null(self), dispatcher_or_null(self), &g);
           }, py::arg("grid"), py::arg("block"), py::arg("stream") = py::none(),
           py::arg("shared_mem") = py::none())
      .def("validate_only", [](Launcher& l, py::tuple args, py::object grid, py::object block,
                               py::object shared_mem) {
             return l.validate_only(args, make_given(grid, block, shared_mem, py::none(), name_of(l)).cfg);
           }, py::arg("args"), py::arg("grid") = py::none(), py::arg("block") = py::none(),
           py::arg("shared_mem") = py::none(),
           "Intake + validation without the driver -> (grid, block, shared_mem, skip); for the simulator.")
      .def("__getitem__", [](py::object self, py::object item) {
             Given g = given_from_item(item, name_of(self));
             return make_fastcall(self, launcher_or_null(self), dispatcher_or_null(self), &g);
           })
      .def_property_readonly("kernel_name", [](const Launcher& l) { return l.contract().kernel; })
      .def_property_readonly("contract", &Launcher::contract_obj)
      .def_property_readonly("device_id", &Launcher::device)
      .def_property("router", &Launcher::router, &Launcher::set_router,
                    "None, or a callable device -> Launcher of this kernel on that device: a launch whose "
                    "device (docs/architecture.md \"Devices\") is another goes to that Launcher.")
      .def_property_readonly("launcher_id", &Launcher::id)
      .def_property_readonly("max_dynamic_smem", [](const Launcher& l) { return l.attrs().max_dynamic_smem; })
      .def_property_readonly("launch_features", &Launcher::launch_features,
                             "True when launches go through cuLaunchKernelEx attributes (the contract has pdl, "
                             "cooperative or a cluster) or cluster checks (compiled cluster dims).")
      .def_property_readonly("accepted_again", &Launcher::accepted_hits,
                             "Launches accepted as equal to the validator's last acceptance (launcher.hpp, "
                             "AcceptedLaunch): the validator had already answered them.")
      .def_property_readonly("fastcall", [](py::object self) {
             return make_fastcall(self, self.cast<Launcher*>(), nullptr);
           }, "A plain C function launching positional arguments with the derived configuration on the "
              "current stream (what `Kernel.__call__` uses when no keyword is given).");

  py::class_<Dispatcher>(m, "Dispatcher",
                         "Argument signature -> Launcher, computed in C++; miss_callback(args) on a miss.")
      .def(py::init<py::object, py::object, bool, py::object, std::string, bool>(), py::arg("miss_callback"),
           py::arg("plan") = py::none(), py::arg("key_div8") = false, py::arg("names") = py::none(),
           py::arg("kernel") = std::string("kernel"), py::arg("pass_device") = false,
           "plan: per position 0 (pass), 1 (a Tiling: launch its array, key on its tile shape) or 2 (a "
           "constant: key by value, not passed); key_div8: also key arrays on last extent % 8 == 0 (and % 16 == 0 for 1-byte elements); "
           "names/kernel: for messages about arguments no Launcher has seen yet. The key includes the "
           "launch device; pass_device: the callback is miss_callback(args, device) and must return a "
           "Launcher of that device.")
      .def("__call__", [](Dispatcher& d, py::args args, py::object grid, py::object block,
                          py::object shared_mem, py::object stream, bool peer_access, py::object pdl) {
             Given g = make_given(grid, block, shared_mem, stream, name_of(d));
             set_pdl(g, pdl, name_of(d));
             d.launch_tuple(args, g.cfg, resolve_stream(g.stream.ptr()), peer_access);  // native call path
           }, py::kw_only(), py::arg("grid") = py::none(), py::arg("block") = py::none(),
           py::arg("shared_mem") = py::none(), py::arg("stream") = py::none(), py::arg("peer_access") = false,
           py::arg("pdl") = py::none())
      .def("configure", [](py::object self, py::object grid, py::object block, py::object stream,
                           py::object shared_mem) {
             Given g = make_given(grid, block, shared_mem, stream, name_of(self));
             return make_fastcall(self, launcher_or_null(self), dispatcher_or_null(self), &g);
           }, py::arg("grid"), py::arg("block"), py::arg("stream") = py::none(),
           py::arg("shared_mem") = py::none())
      .def("__getitem__", [](py::object self, py::object item) {
             Given g = given_from_item(item, name_of(self));
             return make_fastcall(self, launcher_or_null(self), dispatcher_or_null(self), &g);
           })
      .def_property_readonly("fastcall", [](py::object self) {
             return make_fastcall(self, nullptr, self.cast<Dispatcher*>());
           }, "A plain C function launching positional arguments with the derived configuration on the "
              "current stream (what DSL kernels' `__call__` uses when no keyword is given).")
      .def("__len__", &Dispatcher::size)
      .def("clear", &Dispatcher::clear);


  m.def("set_nvtx", [](bool on) {
#ifdef KB_HAVE_NVTX
    g_nvtx = on;
#else
    if (on) throw py::value_error("NVTX ranges: this build of bridge._native has no NVTX headers (nvtx3)");
#endif
  }, py::arg("on"), "Opt in to (or out of) an NVTX range per launch, named after the kernel.");
  m.def("nvtx_status", [] {
#ifdef KB_HAVE_NVTX
    return py::make_tuple(true, g_nvtx, g_nvtx_ranges);
#else
    return py::make_tuple(false, false, uint64_t{0});
#endif
  }, "(NVTX compiled in, ranges on, ranges pushed so far).");
  m.def("launch_phases", []() -> py::object {
#ifdef KB_PHASES_ON
    // TSC ticks to ns: measured against steady_clock over ~20 ms now
    const auto c0 = std::chrono::steady_clock::now();
    const uint64_t t0 = __builtin_ia32_rdtsc();
    while (std::chrono::steady_clock::now() - c0 < std::chrono::milliseconds(20)) {
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - c0).count();
    const double per_tick = ns / static_cast<double>(__builtin_ia32_rdtsc() - t0);
    py::dict d;
    for (int i = 0; i < kPhases; ++i) d[kPhaseNames[i]] = static_cast<double>(g_phase_ticks[i]) * per_tick;
    d["calls"] = g_phase_calls;
    return std::move(d);
#else
    return py::none();
#endif
  }, "Total ns per launch phase since the last reset (builds with -DKB_LAUNCH_PHASES=ON; else None).");
  m.def("reset_launch_phases", [] {
#ifdef KB_PHASES_ON
    for (uint64_t& t : g_phase_ticks) t = 0;
    g_phase_calls = 0;
#endif
  }, "Zero the launch phase totals.");
  m.add_object("refcount_probe_fast", py::reinterpret_steal<py::object>(PyCFunction_New(&g_probe_fast_def, nullptr)));
  m.def("resolve_stream", [](py::object s) { return resolve_stream(s.ptr()); }, py::arg("stream"),
        "Raw handle of a stream argument (None: this thread's current stream).");
}

}  // namespace kb::native
