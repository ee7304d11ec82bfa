// Device-side fault records: host-mapped pinned memory, one 24-byte record per (stream, launcher).
//
// Why host-mapped: the host reads a record right after a stream synchronisation without a copy, and a
// kernel that sets one returns normally (no trap), so the context survives and the next launch works.
#include <cstring>
#include <utility>
#include <vector>

#include "runtime.hpp"

namespace py = pybind11;

namespace kb::rt {
namespace {

constexpr size_t kChunkBytes = 64 * 1024;   // pinned memory per pool chunk

struct Slot {
  FaultRecord* host;
  uint64_t dev;
};

struct Entry {
  uint64_t stream;
  uint64_t launcher;
  int device;
  bool orphan;             // its launcher is gone: check once more, then free the slot
  Slot slot;
  std::string kernel;
  py::object info;         // the launcher's fault-site table (Python object), for messages
};

// Heap-allocated and never destroyed on purpose: entries hold Python objects, which must not be
// released by static destructors after the interpreter has finalised.
std::vector<Slot>& g_free = *new std::vector<Slot>();      // free records (mapped memory is portable)
std::vector<Entry>& g_entries = *new std::vector<Entry>();

void grow_pool() {
  const kb::drv::Api& a = kb::drv::require();
  void* host = nullptr;
  kb::drv::check(a.memHostAlloc(&host, kChunkBytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
                 "memHostAlloc");
  CUdeviceptr dev = 0;
  CUresult r = a.memHostGetDevicePointer(&dev, host, 0);
  if (r != CUDA_SUCCESS) {
    a.memFreeHost(host);
    kb::drv::throw_cuda_error("memHostGetDevicePointer", r);
  }
  std::memset(host, 0, kChunkBytes);
  auto* recs = static_cast<FaultRecord*>(host);
  const size_t n = kChunkBytes / sizeof(FaultRecord);
  for (size_t i = n; i-- > 0;)
    g_free.push_back(Slot{recs + i, static_cast<uint64_t>(dev) + i * sizeof(FaultRecord)});
}

void clear(FaultRecord* r) {
  r->site = 0;
  r->index = 0;
  r->extent = 0;
  r->flag = 0;
}

}  // namespace

uint64_t fault_record(uint64_t stream, uint64_t launcher_id, int device, const std::string& kernel,
                      py::handle info) {
  for (const Entry& e : g_entries)
    if (e.stream == stream && e.launcher == launcher_id) return e.slot.dev;
  if (g_free.empty()) grow_pool();
  Slot s = g_free.back();
  g_free.pop_back();
  clear(s.host);
  g_entries.push_back(Entry{stream, launcher_id, device, false, s, kernel,
                            py::reinterpret_borrow<py::object>(info)});
  return s.dev;
}

void reserve_fault_records(size_t n) {
  while (g_free.size() < n) grow_pool();
}

void forget_launcher(uint64_t launcher_id) {
  for (Entry& e : g_entries)
    if (e.launcher == launcher_id) e.orphan = true;
}

void register_faults(py::module_& m) {
  m.def("take_faults", [](py::object stream, int device) {
    // Called right after a synchronisation of `stream` (None: every stream of `device`). The default
    // streams (0, 1, 2) exist once per device: there the device tells whose records these are.
    const bool all = stream.is_none();
    const uint64_t h = all ? 0 : stream.cast<uint64_t>();
    py::list out;
    std::vector<Entry> keep;
    keep.reserve(g_entries.size());
    for (Entry& e : g_entries) {
      const bool mine = all ? e.device == device : e.stream == h && (h > 2 || e.device == device);
      if (!mine) {
        keep.push_back(std::move(e));
        continue;
      }
      if (e.slot.host->flag != 0) {
        out.append(py::make_tuple(e.kernel, e.info, static_cast<uint32_t>(e.slot.host->site),
                                  static_cast<int64_t>(e.slot.host->index),
                                  static_cast<int64_t>(e.slot.host->extent), e.stream));
        clear(e.slot.host);
      }
      if (e.orphan) g_free.push_back(e.slot);
      else keep.push_back(std::move(e));
    }
    g_entries.swap(keep);
    return out;
  }, py::arg("stream"), py::arg("device") = 0,
     "Read and clear the set fault records of `stream` (None: all of `device`; a default stream 0-2: "
     "the one of `device`): a list of (kernel, fault_info, site, index, extent, stream).");
  m.def("fault_record_devices", [] {
    py::list out;
    for (const Entry& e : g_entries) out.append(py::make_tuple(e.stream, e.device, e.kernel));
    return out;
  }, "(stream, device, kernel) of every fault record in use (for tests and debugging).");
  m.def("fault_record_count", [] { return g_entries.size(); },
        "Number of (stream, launcher) fault records in use.");
}

}  // namespace kb::rt
