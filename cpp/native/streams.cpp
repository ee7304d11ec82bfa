// Streams, events, graphs, the per-thread current stream, the capture registry and the keepalive of
// launch temporaries. See runtime.hpp for why these live in native code.
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "runtime.hpp"

namespace py = pybind11;

namespace kb::rt {
using kb::drv::Api;
using kb::drv::check;
using kb::drv::require;
using kb::drv::throw_cuda_error;

namespace {

thread_local uint64_t t_current_stream = 0;   // 0 = legacy default stream

struct Capture {
  uint64_t stream;
  py::list objects;   // everything the graph uses: kept by the Graph object afterwards
  std::vector<CapturedUse> uses;   // the byte ranges its launches read and write
};
// Heap-allocated and never destroyed on purpose (they hold Python objects; see faults.cpp).
std::vector<Capture>& g_captures = *new std::vector<Capture>();

struct Pending {
  CUevent event;
  int device;
  py::list objects;
};
std::deque<Pending>& g_pending = *new std::deque<Pending>();
std::vector<std::vector<CUevent>> g_event_pool;   // per device: free events (timing disabled)

uint64_t as_int(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

CUevent pooled_event(int device) {
  if (device < 0) device = 0;
  if (g_event_pool.size() <= static_cast<size_t>(device)) g_event_pool.resize(device + 1);
  auto& pool = g_event_pool[device];
  if (!pool.empty()) {
    CUevent e = pool.back();
    pool.pop_back();
    return e;
  }
  CUevent e = nullptr;
  KB_CU(eventCreate, &e, CU_EVENT_DISABLE_TIMING);
  return e;
}

}  // namespace

Py_ssize_t g_temporary_refcount_native = 2;
Py_ssize_t g_temporary_refcount_tuple = 1;
Py_ssize_t g_temporary_refcount_fast = 1;
Py_ssize_t g_temporary_refcount_fast_call = 1;
Py_ssize_t g_temporary_refcount_tuple_call = 1;

uint64_t current_stream() { return t_current_stream; }
void set_current_stream(uint64_t handle) { t_current_stream = handle; }

bool capture_active() { return !g_captures.empty(); }

bool stream_captured(uint64_t stream) {
  for (const Capture& c : g_captures)
    if (c.stream == stream) return true;
  return false;
}

void capture_keep(uint64_t stream, py::handle obj) {
  for (Capture& c : g_captures)
    if (c.stream == stream) {
      c.objects.append(obj);
      return;
    }
}

void capture_use(uint64_t stream, const CapturedUse& use) {
  for (Capture& c : g_captures)
    if (c.stream == stream) {
      c.uses.push_back(use);
      return;
    }
}

void keep_until_complete(uint64_t stream, int device, py::list objs) {
  CUevent e = pooled_event(device);
  CUresult r = require().eventRecord(e, as_stream(stream));
  if (r != CUDA_SUCCESS) {
    g_event_pool[device < 0 ? 0 : device].push_back(e);
    throw_cuda_error("eventRecord", r);
  }
  g_pending.push_back(Pending{e, device < 0 ? 0 : device, std::move(objs)});
}

void poll_keepalive() {
  if (g_pending.empty() || !g_captures.empty()) return;   // no queries while a capture is open
  const Api& a = require();
  while (!g_pending.empty()) {
    Pending& p = g_pending.front();
    CUresult r = a.eventQuery(p.event);
    if (r == CUDA_ERROR_NOT_READY) return;
    // Completed, or the event failed (sticky error): either way the work no longer needs the objects.
    g_event_pool[p.device].push_back(p.event);
    py::list objs = std::move(p.objects);
    g_pending.pop_front();
    objs = py::list();   // drop references only after the queue is consistent (dtors may re-enter)
  }
}

namespace {

// `device` >= 0: that device's context is current for the call (a default-stream handle 0-2 names
// the current context's stream); -1: leave the current context as it is.
struct MaybeOnDevice {
  explicit MaybeOnDevice(int device) {
    if (device >= 0) on.emplace(device);
  }
  std::optional<kb::drv::ScopedDevice> on;
};

void sync_released(CUresult (*fn)(CUstream), CUstream s, const char* name) {
  CUresult r;
  {
    py::gil_scoped_release nogil;
    r = fn(s);
  }
  check(r, name);
}

}  // namespace

void register_streams(py::module_& m) {
  m.def("current_stream_handle", [] { return t_current_stream; },
        "Handle of this thread's current stream for bridge launches (0 = legacy default).");
  m.def("set_current_stream_handle", [](uint64_t h) {
    uint64_t old = t_current_stream;
    t_current_stream = h;
    return old;
  }, py::arg("handle"), "Set this thread's current stream; returns the previous handle.");

  m.def("stream_create", [](int device, bool non_blocking) {
    kb::drv::ScopedDevice on(device);
    CUstream s = nullptr;
    KB_CU(streamCreate, &s, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT);
    stream_created(as_int(s), device);
    return as_int(s);
  }, py::arg("device"), py::arg("non_blocking") = true);
  m.def("stream_destroy", [](uint64_t h) {
    stream_retiring(h);   // later consumers of its work wait on an event, never on the dead handle
    KB_CU(streamDestroy, as_stream(h));
  }, py::arg("handle"));
  m.def("stream_synchronize", [](uint64_t h, int device) {
    {
      MaybeOnDevice on(device);
      sync_released(require().streamSynchronize, as_stream(h), "streamSynchronize");
    }
    poll_keepalive();
  }, py::arg("handle"), py::arg("device") = -1,
     "cuStreamSynchronize with the GIL released (fault records: take_faults); device >= 0: in that "
     "device's context (a default stream 0-2 is that device's).");
  m.def("stream_query", [](uint64_t h, int device) {
    MaybeOnDevice on(device);
    CUresult r = require().streamQuery(as_stream(h));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "streamQuery");
    return true;
  }, py::arg("handle"), py::arg("device") = -1, "cuStreamQuery; device >= 0: in that device's context.");
  m.def("stream_wait_event", [](uint64_t s, uint64_t e, int device) {
    MaybeOnDevice on(device);
    KB_CU(streamWaitEvent, as_stream(s), as_event(e), 0);
  }, py::arg("stream"), py::arg("event"), py::arg("device") = -1,
     "cuStreamWaitEvent; device >= 0: in the stream's device's context (a default stream 0-2 is its).");
  m.def("device_synchronize", [](int device) {
    kb::drv::ScopedDevice on(device);
    CUresult r;
    {
      py::gil_scoped_release nogil;
      r = require().ctxSynchronize();
    }
    check(r, "ctxSynchronize");
    poll_keepalive();
  }, py::arg("device"));

  m.def("event_create", [](int device, bool timing) {
    kb::drv::ScopedDevice on(device);
    CUevent e = nullptr;
    KB_CU(eventCreate, &e, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
    return as_int(e);
  }, py::arg("device"), py::arg("timing") = true);
  m.def("event_destroy", [](uint64_t e) { KB_CU(eventDestroy, as_event(e)); }, py::arg("event"));
  m.def("event_record", [](uint64_t e, uint64_t s, int device) {
    MaybeOnDevice on(device);
    KB_CU(eventRecord, as_event(e), as_stream(s));
  }, py::arg("event"), py::arg("stream"), py::arg("device") = -1,
     "cuEventRecord; device >= 0: in that device's context (event and stream must both be its).");
  m.def("event_query", [](uint64_t e) {
    CUresult r = require().eventQuery(as_event(e));
    if (r == CUDA_ERROR_NOT_READY) return false;
    check(r, "eventQuery");
    return true;
  }, py::arg("event"));
  m.def("event_synchronize", [](uint64_t e) {
    CUresult r;
    {
      py::gil_scoped_release nogil;
      r = require().eventSynchronize(as_event(e));
    }
    check(r, "eventSynchronize");
    poll_keepalive();
  }, py::arg("event"));
  m.def("event_elapsed_ms", [](uint64_t start, uint64_t end) {
    float ms = 0.f;
    KB_CU(eventElapsedTime, &ms, as_event(start), as_event(end));
    return ms;
  }, py::arg("start"), py::arg("end"));

  m.def("capture_begin", [](uint64_t s, int device) {
    if (s == 0) throw py::value_error("the legacy default stream (handle 0) cannot be captured");
    if (stream_captured(s)) throw py::value_error("stream is already being captured");
    MaybeOnDevice on(device);
    reserve_fault_records(256);   // launches inside the capture must not allocate pinned memory
    KB_CU(streamBeginCapture, as_stream(s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    g_captures.push_back(Capture{s, py::list()});
  }, py::arg("stream"), py::arg("device") = -1,
     "cuStreamBeginCapture (thread-local mode) and open the keepalive registry; device >= 0: in that "
     "device's context.");
  m.def("capture_end", [](uint64_t s, bool instantiate) {
    py::list objs;
    py::list uses;
    for (size_t i = 0; i < g_captures.size(); ++i)
      if (g_captures[i].stream == s) {
        objs = g_captures[i].objects;
        for (const CapturedUse& u : g_captures[i].uses) uses.append(py::make_tuple(u.lo, u.hi, u.device, u.write));
        g_captures.erase(g_captures.begin() + static_cast<long>(i));
        break;
      }
    CUgraph graph = nullptr;
    KB_CU(streamEndCapture, as_stream(s), &graph);
    if (!instantiate) {
      if (graph) KB_CU(graphDestroy, graph);
      return py::make_tuple(uint64_t{0}, uint64_t{0}, objs, uses);
    }
    CUgraphExec exec = nullptr;
    // Arrays allocated inside the capture are graph allocations with a fixed address; auto-free lets the
    // graph be replayed again while those arrays (kept by the Graph) still hold the previous launch's.
    CUresult r = require().graphInstantiate(&exec, graph, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
    if (r != CUDA_SUCCESS) {
      require().graphDestroy(graph);
      throw_cuda_error("graphInstantiate", r);
    }
    return py::make_tuple(as_int(graph), as_int(exec), objs, uses);
  }, py::arg("stream"), py::arg("instantiate") = true,
     "End the capture; returns (graph, graph_exec, objects the graph uses, (lo, hi, device, write) of "
     "every byte range its launches use).");
  m.def("stream_is_capturing", [](uint64_t s) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    KB_CU(streamIsCapturing, as_stream(s), &st);
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
  }, py::arg("stream"));
  m.def("graph_launch", [](uint64_t exec, uint64_t s, int device) {
    MaybeOnDevice on(device);
    KB_CU(graphLaunch, reinterpret_cast<CUgraphExec>(static_cast<uintptr_t>(exec)), as_stream(s));
  }, py::arg("graph_exec"), py::arg("stream"), py::arg("device") = -1,
     "cuGraphLaunch; device >= 0: in that device's context (a default stream 0-2 is that device's).");
  m.def("keep_until_complete", [](uint64_t s, int device, py::list objs) {
    kb::drv::ScopedDevice on(device);
    keep_until_complete(s, device, std::move(objs));
  }, py::arg("stream"), py::arg("device"), py::arg("objects"),
     "Keep `objects` alive until the work queued so far on `stream` (of `device`) completes.");
  m.def("graph_destroy", [](uint64_t graph, uint64_t exec) {
    if (exec) KB_CU(graphExecDestroy, reinterpret_cast<CUgraphExec>(static_cast<uintptr_t>(exec)));
    if (graph) KB_CU(graphDestroy, reinterpret_cast<CUgraph>(static_cast<uintptr_t>(graph)));
  }, py::arg("graph"), py::arg("graph_exec"));

  m.def("pending_keepalive_count", [] {
    poll_keepalive();
    size_t n = 0;
    for (const Pending& p : g_pending) n += p.objects.size();
    return n;
  }, "Objects still kept alive for launches that have not completed (polls first).");
  m.def("set_temporary_refcount", [](Py_ssize_t native_call, Py_ssize_t tuple_call, Py_ssize_t fast_call,
                                      Py_ssize_t fast_method, Py_ssize_t tuple_method) {
    g_temporary_refcount_native = native_call;
    g_temporary_refcount_tuple = tuple_call;
    g_temporary_refcount_fast = fast_call;
    g_temporary_refcount_fast_call = fast_method < 0 ? fast_call : fast_method;
    g_temporary_refcount_tuple_call = tuple_method < 0 ? tuple_call : tuple_method;
  }, py::arg("native_call"), py::arg("tuple_call"), py::arg("fast_call") = 1, py::arg("fast_method") = -1,
     py::arg("tuple_method") = -1,
     "Reference counts at or below which a launch argument is a temporary the bridge keeps alive: for "
     "native f(*args) calls, Launcher.launch(args) from a Python *args wrapper, a configured fastcall, and "
     "(fast_method, tuple_method) an unconfigured fastcall or Launcher.launch(..., from_call=True) reached "
     "through an instance __call__(self, *args, **kw) (-1: as the plain-function paths).");
  m.def("refcount_probe", [](py::args args) {
    py::list out;
    for (py::handle a : args) out.append(Py_REFCNT(a.ptr()));
    return out;
  }, "Reference counts of the arguments as a native call sees them (calibrates temporaries).");
  m.def("refcount_probe_tuple", [](py::tuple args) {
    py::list out;
    for (py::handle a : args) out.append(Py_REFCNT(a.ptr()));
    return out;
  }, py::arg("args"), "Reference counts of the items of a tuple given by a Python *args wrapper.");
}

}  // namespace kb::rt
