// Ordering by memory: the process-wide MemoryLog (memory_log.hpp) driven by launches, exports, host
// copies, frees and graph replays, and the event waits that make a consumer stream order after the
// streams that wrote (or read) the same bytes. Never a host block.
//
// Streams that can die behind our back (foreign streams: torch, CuPy, raw handles) get an event
// recorded right after each use; bridge-created streams and the default streams are recorded lazily,
// when a consumer needs them. A bridge stream records a "retired" event just before it is destroyed,
// so a later consumer waits on that event instead of touching a dead handle. The driver reuses
// handles, so a bridge stream is named by (handle, generation): a use of a destroyed stream never
// reaches whatever stream (ours or a foreign one) got its handle afterwards.
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memory_log.hpp"
#include "runtime.hpp"

namespace py = pybind11;

namespace kb::rt {
namespace {


// Heap-allocated and never destroyed: static destructors must not call into a torn-down driver.
MemoryLog& g_log = *new MemoryLog();
struct Live {
  int device;
  uint64_t generation;
};
std::unordered_map<uint64_t, Live>& g_live = *new std::unordered_map<uint64_t, Live>();   // bridge streams
struct GenHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& k) const { return std::hash<uint64_t>()(k.first ^ (k.second << 40)); }
};
// (handle, generation) of destroyed bridge streams -> the event recorded just before the destroy
std::unordered_map<std::pair<uint64_t, uint64_t>, EventPtr, GenHash>& g_retired =
    *new std::unordered_map<std::pair<uint64_t, uint64_t>, EventPtr, GenHash>();
uint64_t g_next_generation = 1;
std::vector<std::vector<uint64_t>>& g_free_events = *new std::vector<std::vector<uint64_t>>();
std::vector<CUevent>& g_lazy_event = *new std::vector<CUevent>();   // per device, record + wait only

// The primary context of `device` current for a scope, the caller's restored after.
using OnDevice = kb::drv::ScopedDevice;

void release_event(int device, uint64_t e) {
  if (g_free_events.size() <= static_cast<size_t>(device)) g_free_events.resize(device + 1);
  g_free_events[device].push_back(e);
}

// An event from the pool of `device` (whose context must be current), recorded on `stream`.
EventPtr record_new(uint64_t stream, int device) {
  if (device < 0) device = 0;
  if (g_free_events.size() <= static_cast<size_t>(device)) g_free_events.resize(device + 1);
  uint64_t h = 0;
  if (!g_free_events[device].empty()) {
    h = g_free_events[device].back();
    g_free_events[device].pop_back();
  } else {
    CUevent e = nullptr;
    KB_CU(eventCreate, &e, CU_EVENT_DISABLE_TIMING);
    h = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(e));
  }
  CUresult r = kb::drv::require().eventRecord(as_event(h), as_stream(stream));
  if (r != CUDA_SUCCESS) {
    release_event(device, h);
    kb::drv::throw_cuda_error("eventRecord", r);
  }
  auto ref = std::make_shared<EventRef>();
  ref->handle = h;
  ref->release = [device](uint64_t ev) { release_event(device, ev); };
  return ref;
}

bool lazy_safe(uint64_t stream) { return stream <= 2 || g_live.count(stream) != 0; }

// Generation of the live bridge stream `stream` (0: a default stream or a foreign one).
uint64_t generation_of(uint64_t stream) {
  auto it = g_live.find(stream);
  return it == g_live.end() ? 0 : it->second.generation;
}

// Make `consumer` (a stream of the device whose context is current) wait for everything submitted so
// far on the live stream `producer` of `device`: the event is recorded in the producer's context, the
// wait is queued in the caller's (a default-stream handle means that context's own stream).
void wait_live(uint64_t producer, int device, uint64_t consumer) {
  if (device < 0) device = 0;
  if (g_lazy_event.size() <= static_cast<size_t>(device)) g_lazy_event.resize(device + 1, nullptr);
  CUevent& e = g_lazy_event[device];
  {
    OnDevice on(device);
    if (e == nullptr) KB_CU(eventCreate, &e, CU_EVENT_DISABLE_TIMING);
    // cuStreamWaitEvent waits for the record current at call time: one event per device serves all.
    KB_CU(eventRecord, e, as_stream(producer));
  }
  KB_CU(streamWaitEvent, as_stream(consumer), e, 0);
}

// The incarnation `u` names is still the live stream of that handle (or a stream that never dies).
bool current(const Use& u) {
  if (u.stream <= 2 || u.generation == 0) return true;
  auto it = g_live.find(u.stream);
  return it != g_live.end() && it->second.generation == u.generation;
}

void wait_for(const Use& u, uint64_t consumer) {
  if (u.event) {
    KB_CU(streamWaitEvent, as_stream(consumer), as_event(u.event->handle), 0);
    return;
  }
  if (!current(u)) {   // destroyed: its retired event covers its work (dropped once it completed)
    auto r = g_retired.find({u.stream, u.generation});
    if (r != g_retired.end()) KB_CU(streamWaitEvent, as_stream(consumer), as_event(r->second->handle), 0);
    return;
  }
  if (stream_captured(u.stream)) return;   // capture work does not run now
  wait_live(u.stream, u.device, consumer);
}

// True when the work of `u` has completed (queries never block; errors count as "not known done").
bool use_done_or_throw(const Use& u);
bool use_done(const Use& u) {
  try {
    return use_done_or_throw(u);
  } catch (py::error_already_set&) {   // e.g. a context switch failed: not known done, keep the entry
    return false;
  }
}

bool use_done_or_throw(const Use& u) {
  const kb::drv::Api* a = kb::drv::api();
  if (a == nullptr) return false;
  if (u.event) return a->eventQuery(as_event(u.event->handle)) == CUDA_SUCCESS;
  if (!current(u)) {
    auto r = g_retired.find({u.stream, u.generation});
    return r == g_retired.end() || a->eventQuery(as_event(r->second->handle)) == CUDA_SUCCESS;
  }
  if (u.stream <= 2) {   // a default stream: the one of u's device, not of whichever device is current
    CUcontext cur = nullptr;
    if (a->ctxGetCurrent(&cur) != CUDA_SUCCESS || cur != kb::drv::primary_context(u.device)) {
      OnDevice on(u.device);
      return a->streamQuery(as_stream(u.stream)) == CUDA_SUCCESS;
    }
  }
  return a->streamQuery(as_stream(u.stream)) == CUDA_SUCCESS;
}

void install_pruner() {
  static bool done = false;
  if (done) return;
  done = true;
  g_log.set_pruner([](const Use& u) {
    if (capture_active()) return false;   // no queries while a capture is open
    return use_done(u);
  });
}

}  // namespace

void order_use(uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write) {
  if (g_log.size() == 0) return;
  if (capture_active() && stream_captured(stream)) return;   // graph replays order themselves
  std::vector<Use> waits;
  g_log.hazards(lo, hi, stream, device < 0 ? 0 : device, write, waits);
  if (waits.empty()) return;
  OnDevice on(device < 0 ? 0 : device);
  for (const Use& u : waits) wait_for(u, stream);
}

void note_use(uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write) {
  if (lo >= hi) return;
  if (!write && !g_log.read_matters(lo, hi, stream, device < 0 ? 0 : device)) return;
  if (capture_active() && stream_captured(stream)) return;   // nothing runs yet
  install_pruner();
  Use u;
  u.stream = stream;
  u.device = device < 0 ? 0 : device;
  u.generation = generation_of(stream);
  if (!lazy_safe(stream)) {   // the event belongs to the stream's device, whichever device is current
    OnDevice on(u.device);
    u.event = record_new(stream, u.device);
  }
  g_log.record(lo, hi, u, write);
}

void forget_range(uint64_t lo, uint64_t hi) { g_log.forget(lo, hi); }

void order_after(uint64_t producer, uint64_t consumer, int device, uint64_t generation, int consumer_device) {
  if (device < 0) device = 0;
  if (same_stream(producer, device, consumer, consumer_device < 0 ? device : consumer_device)) return;
  if (capture_active() && stream_captured(consumer)) return;
  Use u;
  u.stream = producer;
  u.device = device < 0 ? 0 : device;
  u.generation = generation == kLiveNow ? generation_of(producer) : generation;
  if (consumer <= 2 && consumer_device >= 0) {   // a default stream: the consumer device's own
    OnDevice on(consumer_device);
    wait_for(u, consumer);
    return;
  }
  wait_for(u, consumer);
}

uint64_t stream_generation(uint64_t stream) { return generation_of(stream); }

int live_stream_device(uint64_t stream) {
  auto it = g_live.find(stream);
  return it == g_live.end() ? -1 : it->second.device;
}

void stream_created(uint64_t stream, int device) { g_live[stream] = Live{device, g_next_generation++}; }

void stream_retiring(uint64_t stream) {
  auto it = g_live.find(stream);
  if (it == g_live.end()) return;
  const Live live = it->second;
  g_live.erase(it);
  OnDevice on(live.device);
  g_retired[{stream, live.generation}] = record_new(stream, live.device);
  // Keep the map small: a retired event that completed says nothing the stream's uses still need.
  const kb::drv::Api* a = kb::drv::api();
  for (auto r = g_retired.begin(); r != g_retired.end();) {
    if (r->first.first != stream && a && a->eventQuery(as_event(r->second->handle)) == CUDA_SUCCESS)
      r = g_retired.erase(r);
    else
      ++r;
  }
}

bool stream_alive(uint64_t stream, uint64_t generation) {
  return generation == 0 || generation_of(stream) == generation;
}

namespace {

py::list spans_of(const MemoryLog& log) {
  py::list out;
  for (const auto& kv : log.spans()) {
    py::list readers;
    for (const Use& r : kv.second.readers) readers.append(r.stream);
    out.append(py::make_tuple(kv.first, kv.second.hi, kv.second.writer.stream, readers));
  }
  return out;
}

Use fake_use(uint64_t stream, py::object event, int device) {
  Use u;
  u.stream = stream;
  u.device = device;
  if (!event.is_none()) {
    u.event = std::make_shared<EventRef>();
    u.event->handle = event.cast<uint64_t>();
  }
  return u;
}

}  // namespace

void register_memory_order(py::module_& m) {
  // The bookkeeping alone, with made-up stream and event numbers: what CPU tests check.
  py::class_<MemoryLog>(m, "MemoryLog", "The memory-ordering bookkeeping without a driver (for tests).")
      .def(py::init<>())
      .def("hazards", [](const MemoryLog& log, uint64_t lo, uint64_t hi, uint64_t stream, bool write, int device,
                         bool with_device) {
             std::vector<Use> out;
             log.hazards(lo, hi, stream, device, write, out);
             py::list res;
             for (const Use& u : out) {
               py::object ev = u.event ? py::object(py::int_(u.event->handle)) : py::object(py::none());
               if (with_device) res.append(py::make_tuple(u.stream, ev, u.device));
               else res.append(py::make_tuple(u.stream, ev));
             }
             return res;
           }, py::arg("lo"), py::arg("hi"), py::arg("stream"), py::arg("write"), py::arg("device") = 0,
           py::arg("with_device") = false,
           "[(stream, event or None)] that work on `stream` of `device` touching [lo, hi) must wait for "
           "(with_device: (stream, event, device)).")
      .def("record", [](MemoryLog& log, uint64_t lo, uint64_t hi, uint64_t stream, bool write, py::object event,
                        int device) {
             log.record(lo, hi, fake_use(stream, event, device), write);
           }, py::arg("lo"), py::arg("hi"), py::arg("stream"), py::arg("write"), py::arg("event") = py::none(),
           py::arg("device") = 0)
      .def("forget", &MemoryLog::forget, py::arg("lo"), py::arg("hi"))
      .def("prune", [](MemoryLog& log, py::set done) {
             std::unordered_set<uint64_t> d;
             for (py::handle h : done) d.insert(h.cast<uint64_t>());
             log.prune([&d](const Use& u) { return d.count(u.stream) != 0; });
           }, py::arg("done_streams"), "Drop uses on the streams given as completed.")
      .def("spans", &spans_of, "[(lo, hi, writer stream, [reader streams])] in address order.")
      .def("__len__", &MemoryLog::size);

  m.def("order_use", [](uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write) {
    order_use(lo, hi, stream, device, write);
  }, py::arg("lo"), py::arg("hi"), py::arg("stream"), py::arg("device"), py::arg("write"),
     "Make `stream` wait (events, no host block) for bridge work on other streams that wrote the bytes "
     "[lo, hi) (write=True: also that read them).");
  m.def("note_use", [](uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write) {
    note_use(lo, hi, stream, device, write);
  }, py::arg("lo"), py::arg("hi"), py::arg("stream"), py::arg("device"), py::arg("write"),
     "Record that work just submitted on `stream` wrote (or read) the bytes [lo, hi).");
  m.def("order_after", [](uint64_t producer, uint64_t consumer, int device, py::object generation,
                          int consumer_device) {
          order_after(producer, consumer, device, generation.is_none() ? kLiveNow : generation.cast<uint64_t>(),
                      consumer_device);
        }, py::arg("producer"), py::arg("consumer"), py::arg("device"), py::arg("generation") = py::none(),
        py::arg("consumer_device") = -1,
        "Make `consumer` wait for the work submitted so far on `producer`. generation: which bridge "
        "stream of that handle (stream_generation at the time the handle was taken; None = the stream "
        "living now); a destroyed one is waited for through the event it recorded when destroyed.");
  m.def("stream_generation", &stream_generation, py::arg("stream"),
        "Generation of the live bridge stream `stream` (0 for default and foreign streams).");
  m.def("forget_range", &forget_range, py::arg("lo"), py::arg("hi"),
        "Forget the history of [lo, hi) (the memory was freed).");
  m.def("memory_log_size", [] { return g_log.size(); }, "Number of byte ranges with a known history.");
  m.def("memory_log_spans", [] { return spans_of(g_log); },
        "(lo, hi, writer stream, reader streams) of every tracked range (for tests and debugging).");
  m.def("stream_alive", &stream_alive, py::arg("stream"), py::arg("generation"),
        "False when the bridge stream (stream, generation) has been destroyed.");
}

}  // namespace kb::rt
