// Launch features of a contract (pdl, cooperative, cluster: docs/architecture.md "Launch features") on the
// native launch path: the driver's occupancy answers the ONE validator needs (kb::Occupancy), and the
// cuLaunchKernelEx attributes a launch carries. Only Launchers whose contract uses a feature (or whose
// function has compiled cluster dims) reach this code; every other launch stays on cuLaunchKernel.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "driver_api.hpp"
#include "kernelbridge/contract.hpp"

namespace kb::native {

// The driver's launch configuration of a validated launch (grid, block, dynamic shared memory, stream,
// attributes), shared by the occupancy query and the launch.
inline CUlaunchConfig launch_config(const kb::LaunchConfig& cfg, CUstream stream, CUlaunchAttribute* attrs,
                                    unsigned n) {
  CUlaunchConfig lc{};
  lc.gridDimX = static_cast<unsigned>(cfg.grid[0]);
  lc.gridDimY = static_cast<unsigned>(cfg.grid[1]);
  lc.gridDimZ = static_cast<unsigned>(cfg.grid[2]);
  lc.blockDimX = static_cast<unsigned>(cfg.block[0]);
  lc.blockDimY = static_cast<unsigned>(cfg.block[1]);
  lc.blockDimZ = static_cast<unsigned>(cfg.block[2]);
  lc.sharedMemBytes = static_cast<unsigned>(cfg.smem);
  lc.hStream = stream;
  lc.attrs = attrs;
  lc.numAttrs = n;
  return lc;
}

// Raise bridge.errors.CudaError(call, CUDA_ERROR_NOT_SUPPORTED) for a driver entry point this driver
// lacks, naming the kernel and the feature that needs it (nothing has been launched).
[[noreturn]] inline void throw_missing_entry(const char* call, const std::string& kernel, const char* feature) {
  py::object cls = py::module_::import("bridge.errors").attr("CudaError");
  py::object exc = cls(call, static_cast<int>(CUDA_ERROR_NOT_SUPPORTED), "CUDA_ERROR_NOT_SUPPORTED",
                       kernel + ": the CUDA driver lacks " + call + " (CUDA 12.0 or newer), which " + feature +
                           " needs; nothing was launched");
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

// The driver's occupancy of one function, for the validator. Documented cache: one entry per (block
// dims, dynamic shared memory) asked about — blocks per SM and active clusters, computed once each
// (the answers depend only on the function, which is fixed, and that configuration); at most kMax
// entries, then it starts over. Raises the function's dynamic shared memory limit to the asked amount
// first (the launch would do so next; validated against the device's opt-in limit already), and opts
// in to non-portable cluster sizes when the contract declares them.
class DriverOccupancy final : public kb::Occupancy {
 public:
  DriverOccupancy(CUfunction f, const kb::LaunchContract& c, kb::FuncAttrs& attrs, int device)
      : func_(f), contract_(c), attrs_(attrs), device_(device) {}

  int64_t blocks_per_sm(int threads, int64_t smem) override {
    Entry& e = entry(threads, 1, 1, smem);
    if (e.blocks_per_sm == kUnknown) {
      const kb::drv::Api& a = kb::drv::require();
      if (a.occupancyMaxActiveBlocksPerMultiprocessor == nullptr)
        throw_missing_entry("cuOccupancyMaxActiveBlocksPerMultiprocessor", contract_.kernel, "a cooperative launch");
      kb::drv::ScopedDevice on(device_);
      prepare(smem);
      int n = 0;
      kb::drv::check(a.occupancyMaxActiveBlocksPerMultiprocessor(&n, func_, threads, static_cast<size_t>(smem)),
                     "occupancyMaxActiveBlocksPerMultiprocessor");
      e.blocks_per_sm = n;
    }
    return e.blocks_per_sm;
  }

  int64_t active_clusters(const kb::LaunchConfig& cfg, const int cluster[3]) override {
    Entry& e = entry(cfg.block[0], cfg.block[1], cfg.block[2], cfg.smem);
    if (e.clusters == kUnknown) {
      const kb::drv::Api& a = kb::drv::require();
      if (a.occupancyMaxActiveClusters == nullptr)
        throw_missing_entry("cuOccupancyMaxActiveClusters", contract_.kernel, "a cluster launch");
      kb::drv::ScopedDevice on(device_);
      prepare(cfg.smem);
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attr.value.clusterDim.x = static_cast<unsigned>(cluster[0]);
      attr.value.clusterDim.y = static_cast<unsigned>(cluster[1]);
      attr.value.clusterDim.z = static_cast<unsigned>(cluster[2]);
      CUlaunchConfig lc = launch_config(cfg, nullptr, &attr, 1);
      int n = 0;
      const CUresult r = a.occupancyMaxActiveClusters(&n, func_, &lc);
      if (r == CUDA_ERROR_INVALID_CLUSTER_SIZE) n = 0;   // a cluster this function cannot have: none fit
      else kb::drv::check(r, "occupancyMaxActiveClusters");
      e.clusters = n;
    }
    return e.clusters;
  }

  // Before a launch or an occupancy query: non-portable cluster sizes allowed where declared (once).
  void allow_nonportable() {
    if (!contract_.cluster_nonportable || nonportable_set_) return;
    kb::drv::check(kb::drv::require().funcSetAttribute(func_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                   "funcSetAttribute");
    nonportable_set_ = true;
  }

 private:
  static constexpr int64_t kUnknown = INT64_MIN;
  static constexpr size_t kMax = 32;
  struct Entry {
    int block[3];
    int64_t smem;
    int64_t blocks_per_sm = kUnknown;
    int64_t clusters = kUnknown;
  };

  Entry& entry(int bx, int by, int bz, int64_t smem) {
    for (Entry& e : cache_)
      if (e.block[0] == bx && e.block[1] == by && e.block[2] == bz && e.smem == smem) return e;
    if (cache_.size() >= kMax) cache_.clear();
    cache_.push_back(Entry{{bx, by, bz}, smem});
    return cache_.back();
  }

  void prepare(int64_t smem) {
    allow_nonportable();
    if (smem > attrs_.max_dynamic_smem) {
      kb::drv::check(kb::drv::require().funcSetAttribute(func_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                         static_cast<int>(smem)),
                     "funcSetAttribute");
      attrs_.max_dynamic_smem = smem;
    }
  }

  CUfunction func_;
  const kb::LaunchContract& contract_;
  kb::FuncAttrs& attrs_;
  int device_;
  bool nonportable_set_ = false;
  std::vector<Entry> cache_;
};

// The cuLaunchKernelEx attributes of one validated launch: PDL (sm_90+, unless the launch opted out),
// cooperative, and the contract's cluster dims when the function has none compiled in (compiled dims
// apply by themselves). Returns how many were written to `out` (0: launch with cuLaunchKernel).
inline unsigned launch_attributes(const kb::LaunchContract& c, const kb::LaunchConfig& cfg, const kb::FuncAttrs& fn,
                                  int cc, CUlaunchAttribute out[3]) {
  unsigned n = 0;
  if (c.pdl && !cfg.no_pdl && cc >= 90) {
    out[n] = CUlaunchAttribute{};
    out[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    out[n++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (c.cooperative) {
    out[n] = CUlaunchAttribute{};
    out[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    out[n++].value.cooperative = 1;
  }
  if (c.has_cluster() && fn.required_cluster[0] == 0) {
    out[n] = CUlaunchAttribute{};
    out[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    out[n].value.clusterDim.x = static_cast<unsigned>(c.cluster[0]);
    out[n].value.clusterDim.y = static_cast<unsigned>(c.cluster[1]);
    out[n++].value.clusterDim.z = static_cast<unsigned>(c.cluster[2]);
  }
  return n;
}

// Launch `f` with the parameter buffer `extra` and the attributes of launch_attributes (n > 0) through
// cuLaunchKernelEx: the same parameter passing as cuLaunchKernel, and capturable (PDL inside a graph
// capture becomes a programmatic edge).
inline CUresult launch_ex(const kb::drv::Api& a, CUfunction f, const kb::LaunchConfig& cfg, CUstream stream,
                          CUlaunchAttribute* attrs, unsigned n, void** extra, const std::string& kernel) {
  if (a.launchKernelEx == nullptr) throw_missing_entry("cuLaunchKernelEx", kernel, "a pdl/cooperative/cluster launch");
  CUlaunchConfig lc = launch_config(cfg, stream, attrs, n);
  return a.launchKernelEx(&lc, f, nullptr, extra);
}

}  // namespace kb::native
