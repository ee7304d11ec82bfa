// kernelbridge: THE launch-contract model and validator.
//
// Header only, no Python and no CUDA dependency, so the same checks run in the Python runtime (bound
// through pybind11 in bridge._native), in AOT-generated C++ launchers and in user C++ code.
// Schema and validation order: docs/architecture.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernelbridge/array_view.hpp"

namespace kb {

enum class ErrorCode : int32_t {
  ok = 0,
  argument_count,
  argument_kind,
  dtype,
  ndim,
  shape_relation,
  layout,
  alignment,
  readonly,
  aliasing,
  device_mismatch,
  scalar_range,
  block_size,
  grid_size,
  shared_memory,
  compute_capability,
  contract_definition,
  missing_contract,
  cooperative_grid,                // a cooperative grid larger than what can be co-resident
  cluster,                         // a thread-block cluster the device or the compiled function refuses
};

enum class ArgKind : uint8_t { array, scalar };
enum class Layout : uint8_t { any, c_contig, f_contig };
enum class Access : uint8_t { read, write, readwrite, atomic };   // atomic: written (and read) only through atomics
enum class Abi : uint8_t { pointer, view };

struct ArgSpec {
  std::string name;
  ArgKind kind = ArgKind::array;
  DType dtype = DType::any;
  int ndim = -1;
  Layout layout = Layout::any;
  int align = 0;                  // bytes; 0 = itemsize
  Access access = Access::read;
  Abi abi = Abi::pointer;
  bool optional = false;          // arrays: None may be passed (null pointer, zero extents)
  bool writable() const { return access != Access::read; }
};

struct Relation;                   // parsed `requires` expression (detail/relations.hpp)

// A TMA tensor map the launcher builds from one array argument (cuTensorMapEncodeTiled) and passes
// after the arguments (128 bytes, 64-byte aligned, in contract order; the kernel reads it as a
// __grid_constant__ parameter). `box` is the tile one bulk copy moves, in the array's axis order.
struct TensorMapSpec {
  int arg = -1;
  std::vector<int64_t> box;
  int swizzle = 0;                 // bytes of the shared-memory swizzle span: 0 (none), 32, 64, 128
};

// One run-time bounds-check site of a kernel (reported by bridge.KernelFault).
struct FaultSite {
  int64_t id = 0;
  std::string array;               // array argument checked at this site
  std::string file;
  int64_t line = 0;
  std::string text;                // the source line
};

struct LaunchContract {
  std::string kernel;
  int domain = 1;
  // The kernel's threads own elements by their domain-dimensional index (a DSL DisjointSlice written at
  // the ThreadIndex or in a chunk loop): the grid and block must have extent 1 on every axis past
  // `domain`, or threads that differ only along those axes would write the same elements.
  bool strict_domain = false;
  bool block_exact = false;
  int block[3] = {0, 0, 0};       // when block_exact
  int max_threads = 0;            // launch bounds; 0 = none
  bool smem_exact = true;
  int64_t smem = 0;               // exact bytes, or max bytes when !smem_exact
  int min_cc = 0;
  std::vector<ArgSpec> args;
  std::vector<std::string> requires_text;
  std::vector<std::shared_ptr<Relation>> relations;  // parsed requires_text (not `requires`: a C++20 keyword)
  std::vector<std::pair<int, int>> inplace;    // arg indices
  bool has_optional = false;                   // some argument is optional (set by the parser)
  bool has_launch_relations = false;           // some relation names grid.* / block.* (set by the parser)
  int grid_from_arg = -1;                      // -1 = grid must be given
  int per_thread[3] = {1, 1, 1};
  // Tile grids (grid_from.tile): one block per tile of grid_from_arg, flattened into grid.x; capped at
  // max_blocks_per_sm * the device's SM count when that is > 0 (persistent kernels loop over tiles).
  std::vector<int64_t> grid_tile;               // empty = one thread per element (per_thread)
  int max_blocks_per_sm = 0;
  bool has_fault_buffer = false;              // true when fault_sites is not empty
  std::vector<TensorMapSpec> tensor_maps;
  int version = 1;
  std::vector<FaultSite> fault_sites;
  // Launch features (launched with cuLaunchKernelEx attributes; docs/architecture.md "Launch features").
  // pdl: the kernel executes griddepcontrol.wait before reading anything a predecessor wrote, so it may
  // be launched with programmatic stream serialization (sm_90+; older devices launch it normally).
  bool pdl = false;
  bool cooperative = false;                    // grid-wide sync: every block must be co-resident
  int cluster[3] = {0, 0, 0};                  // thread-block cluster dims; all 0 = no cluster
  bool cluster_nonportable = false;            // cluster of 9..16 blocks (sm_90's non-portable sizes)
  bool has_cluster() const { return cluster[0] > 0; }
  bool has_launch_features() const { return pdl || cooperative || has_cluster(); }
};

// One launch argument as the validator sees it.
struct ArgValue {
  ArgKind kind = ArgKind::scalar;
  ArrayView array;                 // when kind == array
  bool none = false;               // Python None (kind == array, `array` empty): an absent optional array
  // scalars: the Python value's category and payload (before conversion to the declared dtype)
  enum class ScalarKind : uint8_t { none, boolean, integer, floating } scalar_kind = ScalarKind::none;
  int64_t i = 0;                   // integer (or bool) value when it fits int64
  uint64_t u = 0;                  // for u64 values above INT64_MAX: is_big_unsigned
  bool is_big_unsigned = false;
  double f = 0.0;
  DType scalar_dtype = DType::invalid;  // when the value came typed (NumPy scalar); invalid for Python int/float
  const char* type_name = "";      // Python type name, for messages
  bool huge_int = false;           // integer outside [-2**63, 2**64): fits no kernel integer type
  // Python None: an absent array (the validator allows it where the contract declares it optional)
  static ArgValue absent() {
    ArgValue v;
    v.kind = ArgKind::array;
    v.none = true;
    v.type_name = "None";
    return v;
  }
};

struct DeviceLimits {
  int device_id = 0;
  int cc = 0;                      // major*10+minor
  int max_threads_per_block = 1024;
  int max_block[3] = {1024, 1024, 64};
  int64_t max_grid[3] = {2147483647, 65535, 65535};
  int64_t smem_per_block = 49152;
  int64_t smem_per_block_optin = 49152;
  int sm_count = 0;
  // Blocks a driver-less caller (the CPU simulator) declares it can run at once for a cooperative
  // grid; 0 = not declared. Used only when validate() gets no Occupancy (no driver to ask).
  int64_t sim_max_coresident = 0;
  bool host_memory = false;        // the CPU simulator: host arrays stand in for device memory
  // Bit d set: memory on cuda:d is accepted too (the launch enabled peer access from device_id to d).
  uint64_t peer_mask = 0;
};

struct FuncAttrs {
  int max_threads_per_block = 1024;
  int64_t static_smem = 0;
  int num_regs = 0;
  int64_t max_dynamic_smem = 49152;  // current CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  // Cluster dims compiled into the function (.reqnctapercluster: CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_*);
  // all 0 = none. cluster_must_be_set: compiled with .explicitcluster (launch needs a cluster).
  int required_cluster[3] = {0, 0, 0};
  bool cluster_must_be_set = false;
};

struct LaunchConfig {
  int64_t grid[3] = {0, 0, 0};     // all zero = derive from the contract's grid_from
  int block[3] = {0, 0, 0};        // all zero = exact block, else (min(bounds or device max, fn max, 256), 1, 1)
  int64_t smem = 0;                // -1 = the contract's exact value (0 under a "max" contract)
  bool skip = false;               // set by validate: derived grid is empty (empty output), launch nothing
  bool no_pdl = false;             // this launch opts out of the contract's PDL (launch(..., pdl=False))
};

// What the compiled function can have resident at once, for cooperative grids and clusters (the CUDA
// occupancy API). The native launcher answers from the driver (with a documented cache); validate()
// without one skips the occupancy checks, except a cooperative grid against `sim_max_coresident`.
struct Occupancy {
  virtual ~Occupancy() = default;
  // Blocks of `threads` threads with `smem` dynamic bytes one SM holds at once
  // (cuOccupancyMaxActiveBlocksPerMultiprocessor); < 0 = unknown (the check is skipped).
  virtual int64_t blocks_per_sm(int threads, int64_t smem) = 0;
  // Clusters of `cluster` dims the device can have active at once for this configuration
  // (cuOccupancyMaxActiveClusters); < 0 = unknown.
  virtual int64_t active_clusters(const LaunchConfig& cfg, const int cluster[3]) = 0;
};

struct Error {
  ErrorCode code = ErrorCode::ok;
  int arg = -1;                    // argument position, -1 when not about one argument
  std::string message;             // complete message: "kernel: argument 'x' (#1): expected ..., got ..."
  std::string arg_name;            // name of argument `arg`, empty when arg == -1
  explicit operator bool() const { return code != ErrorCode::ok; }
};

// Parse the JSON text of docs/architecture.md. On failure returns code contract_definition.
inline Error parse_contract(const std::string& json, LaunchContract& out);
inline std::string contract_to_json(const LaunchContract& c);

// Validate a launch in the order of docs/architecture.md. Fills `cfg` in place with the resolved grid,
// block and smem; cfg.skip = true when the derived grid is empty (nothing to launch, not an error).
// `occ`: the function's occupancy (cooperative grids, clusters); nullptr skips those checks.
inline Error validate(const LaunchContract& c, const ArgValue* args, int nargs, LaunchConfig& cfg,
                      const DeviceLimits& dev, const FuncAttrs& fn, Occupancy* occ = nullptr);

// Pack a validated scalar into kernel-parameter bytes of `dtype` (little endian, f16/bf16 rounded to
// nearest even). `out` needs 8 bytes. Returns the byte size (= its alignment), 0 for an unpackable dtype.
inline int pack_scalar(const ArgValue& v, DType dtype, unsigned char* out);

// Position of the argument called `name`, -1 when there is none.
inline int find_arg(const LaunchContract& c, const std::string& name);

}  // namespace kb

#include "kernelbridge/detail/contract_impl.hpp"
