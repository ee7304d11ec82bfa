// Per-device facts the launch path needs: which device a stream belongs to, and peer access between
// devices (explicit: enabled only when a launch or the user asks for it). docs/architecture.md "Devices".
#include <unordered_map>
#include <vector>

#include "runtime.hpp"

namespace py = pybind11;

namespace kb::rt {
namespace {


// Documented test hook: a stream -> device table consulted first, so driver-less tests can stand in
// for streams of other devices (debug_set_stream_device). Empty in normal use.
std::unordered_map<uint64_t, int>& g_stream_device_override = *new std::unordered_map<uint64_t, int>();
// Documented cache: per device, the peers whose memory it may access (bit d = cuda:d enabled).
std::vector<uint64_t>& g_peer_enabled = *new std::vector<uint64_t>();

CUdevice device_handle(int ordinal) {
  CUdevice d = 0;
  KB_CU(deviceGet, &d, ordinal);
  return d;
}

bool can_access_peer(int device, int peer) {
  if (device == peer) return true;
  const int n = kb::drv::device_count();
  if (device < 0 || peer < 0 || device >= n || peer >= n) return false;
  int can = 0;
  KB_CU(deviceCanAccessPeer, &can, device_handle(device), device_handle(peer));
  return can != 0;
}

}  // namespace

int stream_device(uint64_t stream, bool ask_driver) {
  if (stream <= 2) return -1;
  if (!g_stream_device_override.empty()) {
    auto it = g_stream_device_override.find(stream);
    if (it != g_stream_device_override.end()) return it->second;
  }
  const int live = live_stream_device(stream);
  if (live >= 0) return live;
  // A foreign handle: only the driver knows, and only a multi-GPU process needs to ask (with one
  // device every stream is device 0's, and a made-up handle never reaches the driver).
  const kb::drv::Api* a = kb::drv::api();
  if (!ask_driver || a == nullptr || kb::drv::device_count() < 2) return -1;
  CUcontext ctx = nullptr;
  if (a->streamGetCtx(as_stream(stream), &ctx) != CUDA_SUCCESS) return -1;
  return kb::drv::context_device(ctx);
}

bool enable_peer(int device, int peer) {
  if (device == peer) return true;
  if (device < 0 || peer < 0 || device >= 64 || peer >= 64) return false;
  if (g_peer_enabled.size() > static_cast<size_t>(device) && ((g_peer_enabled[device] >> peer) & 1u)) return true;
  if (!can_access_peer(device, peer)) return false;
  kb::drv::ScopedDevice on(device);
  CUresult r = kb::drv::require().ctxEnablePeerAccess(kb::drv::primary_context(peer), 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) kb::drv::throw_cuda_error("ctxEnablePeerAccess", r);
  if (g_peer_enabled.size() <= static_cast<size_t>(device)) g_peer_enabled.resize(device + 1, 0);
  g_peer_enabled[device] |= uint64_t{1} << peer;
  return true;
}

void register_devices(py::module_& m) {
  m.def("stream_device", [](uint64_t stream, bool ask_driver) { return stream_device(stream, ask_driver); },
        py::arg("stream"), py::arg("ask_driver") = false,
        "Device ordinal of a stream handle: a bridge stream's; with ask_driver (multi-GPU only) a foreign "
        "stream's through its context (the handle must be a live stream); -1 for the default streams "
        "0, 1, 2 (each device has its own) and when unknown.");
  m.def("can_access_peer", [](int device, int peer) { return can_access_peer(device, peer); },
        py::arg("device"), py::arg("peer"), "cuDeviceCanAccessPeer (True for the same device).");
  m.def("enable_peer_access", [](int device, int peer) { return enable_peer(device, peer); },
        py::arg("device"), py::arg("peer"),
        "Let kernels on `device` access memory of `peer` (cuCtxEnablePeerAccess, once per pair); False "
        "when the devices cannot access each other.");
  m.def("peer_access_enabled", [](int device, int peer) {
    return device == peer || (device >= 0 && peer >= 0 && peer < 64 && g_peer_enabled.size() > static_cast<size_t>(device) &&
                              ((g_peer_enabled[device] >> peer) & 1u));
  }, py::arg("device"), py::arg("peer"), "True when bridge enabled peer access from `device` to `peer`.");
  m.def("debug_set_stream_device", [](uint64_t stream, py::object device) {
    if (device.is_none()) g_stream_device_override.erase(stream);
    else g_stream_device_override[stream] = device.cast<int>();
  }, py::arg("stream"), py::arg("device"),
     "Tests only: report `stream` as a stream of `device` (None: forget it), so driver-less tests can "
     "stand in for streams of several devices.");
}

}  // namespace kb::rt
