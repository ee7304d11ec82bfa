// kernelbridge runtime state shared by the launch hot path (launcher.cpp), streams/events/graphs
// (streams.cpp) and device-side fault records (faults.cpp).
//
// Why native: the launcher reads the per-thread current stream, the active captures and the fault
// record of (stream, launcher) on every launch, without calling back into Python. All of it is guarded
// by the GIL (every entry point holds it; long driver waits release it and touch no state meanwhile).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "driver_api.hpp"

namespace kb::rt {

// Stream and event handles travel as integers (Python ints, the memory log); the driver takes pointers.
inline CUstream as_stream(uint64_t h) { return reinterpret_cast<CUstream>(static_cast<uintptr_t>(h)); }
inline CUevent as_event(uint64_t h) { return reinterpret_cast<CUevent>(static_cast<uintptr_t>(h)); }

// --- per-thread current stream (bridge.current_stream / use_stream) --------------------------------
uint64_t current_stream();
void set_current_stream(uint64_t handle);

// --- capture registry: streams being captured into a graph -----------------------------------------
// True when some stream is being captured (a cheap check the launcher does on every launch).
bool capture_active();
// Keep `obj` referenced by the graph being captured on `stream` (no-op when `stream` is not captured).
void capture_keep(uint64_t stream, pybind11::handle obj);
bool stream_captured(uint64_t stream);

// --- temporaries kept alive until the launch that uses them completes -------------------------------
// Records an event on `stream` and keeps `objs` until it completes (polled by later launches/syncs).
void keep_until_complete(uint64_t stream, int device, pybind11::list objs);
// Release everything whose event has completed. Cheap when nothing is pending.
void poll_keepalive();
// Reference count at or below which a launch argument is a temporary (only the call holds it), not
// counting the launcher's own keepalive reference. Calibrated at import per call path: arguments that
// arrive through a native `f(*args)` call, and a tuple handed over by a Python `def f(*args)` wrapper.
extern Py_ssize_t g_temporary_refcount_native;
extern Py_ssize_t g_temporary_refcount_tuple;
// ... and for a `fastcall` reached through a Python `def f(*args): fastcall(*args)` wrapper.
extern Py_ssize_t g_temporary_refcount_fast;
// The same two paths reached through an instance's `__call__(self, *args, **kw)` (Kernel.__call__ and the
// DSL kernels' __call__): type slot dispatch adds references of its own, so a temporary counts more.
// Unconfigured fastcalls are only handed to such wrappers; configured ones are called by user code.
extern Py_ssize_t g_temporary_refcount_fast_call;
extern Py_ssize_t g_temporary_refcount_tuple_call;

// --- cross-stream ordering ---------------------------------------------------------------------------
// Make `consumer` wait (device side) for the work submitted so far on `producer` (event record + wait).
// `generation`: which bridge stream of that handle (stream_generation when the handle was taken);
// kLiveNow for a handle the caller got just now (the stream living under it).
constexpr uint64_t kLiveNow = ~uint64_t{0};
// `device`: the producer's; `consumer_device`: the consumer's (-1: the same as the producer's, and a
// default-stream consumer 0-2 means the current context's; >= 0: that device's).
void order_after(uint64_t producer, uint64_t consumer, int device, uint64_t generation = kLiveNow,
                 int consumer_device = -1);
uint64_t stream_generation(uint64_t stream);

// --- ordering by memory (memory_order.cpp; docs/architecture.md "Memory ordering") ----------------
// Make `stream` wait for bridge work on other streams that wrote [lo, hi) (write: or read it).
void order_use(uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write);
// Work just submitted on `stream` wrote (or read) [lo, hi).
void note_use(uint64_t lo, uint64_t hi, uint64_t stream, int device, bool write);
// [lo, hi) was freed: forget its history.
void forget_range(uint64_t lo, uint64_t hi);
// A bridge stream was created / is about to be destroyed (its pending work gets a retired event).
void stream_created(uint64_t stream, int device);
void stream_retiring(uint64_t stream);
// False when the bridge stream (stream, generation) has been destroyed.
bool stream_alive(uint64_t stream, uint64_t generation);

// A byte range one captured launch used (Graph.replay orders and records it like a launch).
struct CapturedUse {
  uint64_t lo, hi;
  int device;
  bool write;
};
// Record a use of the launch being captured on `stream` (no-op when `stream` is not captured).
void capture_use(uint64_t stream, const CapturedUse& use);

// --- device-side fault records (docs/architecture.md "fault_sites") -------------------------------
struct FaultRecord {
  volatile uint32_t flag;
  volatile uint32_t site;
  volatile int64_t index;
  volatile int64_t extent;
};
static_assert(sizeof(FaultRecord) == 24, "fault record layout is part of the kernel ABI");

// Device address of the record of (stream, launcher_id), allocated from the pinned pool on first use.
// `info` (kept) and `kernel` describe the launcher for the KernelFault message.
uint64_t fault_record(uint64_t stream, uint64_t launcher_id, int device, const std::string& kernel,
                      pybind11::handle info);
// Make sure `n` records are free without allocating (pinned allocations are not allowed in a capture).
void reserve_fault_records(size_t n);
// The launcher is gone: its records are checked once more at the next sync, then returned to the pool.
void forget_launcher(uint64_t launcher_id);

// --- devices (devices.cpp; docs/architecture.md "Devices") ---------------------------------------
// Device of `stream`: a bridge stream's own, a foreign stream's through its context (ask_driver, and
// only with several devices); -1 for the default streams (0, 1, 2: every device has its own, named by
// whichever context is current) and when it cannot be known (no driver).
int stream_device(uint64_t stream, bool ask_driver = true);
// memory_order.cpp: the device of a live bridge stream, -1 for any other handle.
int live_stream_device(uint64_t stream);
// Peer access from `device` to memory of `peer` (enabled once per pair, explicitly asked for by a
// launch or bridge.Device.enable_peer_access); false when the two devices cannot access each other.
bool enable_peer(int device, int peer);

void register_streams(pybind11::module_& m);
void register_devices(pybind11::module_& m);
void register_faults(pybind11::module_& m);
void register_modules(pybind11::module_& m);
void register_memory_order(pybind11::module_& m);

}  // namespace kb::rt
