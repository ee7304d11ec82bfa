"""C++ text of an AOT header: typed launch functions for DSL kernels, validated before launching.

Why generated C++ (not a library): a C++ application adopting one DSL kernel should only add one
header and link libcuda. Each launcher builds `kb::ArgValue`s from device pointers + sizes, validates
them with the same `kernelbridge/contract.hpp` the Python runtime uses (`kb::parse_contract` once per
process, after checking each contract text against its FNV-1a 64 checksum; `kb::validate` per launch), packs the DSL's view ABI (pointer, extents, strides in elements,
then the fault record) and calls `cuLaunchKernel` on the caller's stream. Violations return a
`Status` with the validator's error code and message; nothing is launched.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from bridge import dtypes
from bridge.fatbin import contract_checksum

# C type of an element / scalar per DSL dtype (f16/bf16 arrays are raw 16-bit storage) and its
# kb::DType enumerator: columns of the one dtype table, bridge/dtypes.py.
C_TYPES = {row.name: row.c_type for row in dtypes.kernel_rows()}
KB_DTYPES = {row.name: row.cpp_enum for row in dtypes.kernel_rows()}


@dataclass(frozen=True)
class AotParam:
    name: str
    kind: str          # "array" | "scalar"
    dtype: str         # DSL dtype name
    ndim: int = 0
    writable: bool = False


@dataclass(frozen=True)
class AotKernel:
    name: str          # launcher name (the Python function name)
    symbol: str        # entry name in the image
    contract_json: str
    params: tuple[AotParam, ...]
    grid_from: bool    # the contract derives the grid (else the launcher's Grid argument is required)


def identifier(text: str) -> str:
    s = re.sub(r"\W", "_", text)
    return s if s and not s[0].isdigit() else f"_{s}"


def _c_string(text: str) -> str:
    return json.dumps(text)     # JSON string escaping is valid C++ for ASCII text


def _bytes_literal(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 24):
        lines.append("  " + ",".join(f"0x{b:02x}" for b in data[i:i + 24]) + ",")
    return "\n".join(lines)


RUNTIME = r'''
#ifndef KB_AOT_RUNTIME_DEFINED
#define KB_AOT_RUNTIME_DEFINED
namespace kb_aot {

// code: 0 = ok; 1..99 = kb::ErrorCode (contract violation, nothing launched);
// kDriverError + CUresult = a CUDA driver call failed; kKernelFault = a run-time bounds check failed.
constexpr int kDriverError = 1000;
constexpr int kKernelFault = 2000;

// Grid of a launch: all zero = derived from the contract's grid_from (kernels whose grid is not
// derived, e.g. histograms indexed by blockIdx, must give it).
struct Grid {
  int64_t x = 0, y = 0, z = 0;
};

struct Status {
  int code = 0;
  std::string message;       // complete message, e.g. "blur: argument 'out' (#1): expected ..."
  std::string arg_name;      // the argument it is about ("" when none)
  bool ok() const { return code == 0; }
};

inline Status driver_error(CUresult r, const char* call) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "CUDA_ERROR_UNKNOWN";
  return Status{kDriverError + static_cast<int>(r), std::string(call) + " failed: " + name, ""};
}
#define KB_AOT_CU(call) do { CUresult kb_r_ = (call); if (kb_r_ != CUDA_SUCCESS) return ::kb_aot::driver_error(kb_r_, #call); } while (0)

// One loaded image per CUDA context (a module is per context).
template <int N> struct ModuleState {
  CUcontext ctx = nullptr;
  CUmodule module[N] = {};
  CUfunction fn[N] = {};
  kb::FuncAttrs attrs[N];
  kb::DeviceLimits limits;
  CUdeviceptr fault = 0;     // one 24-byte fault record per kernel (site ids are per kernel)
};

inline Status device_limits(CUdevice dev, int ordinal, kb::DeviceLimits& d) {
  auto attr = [&](CUdevice_attribute a, int& out) { return cuDeviceGetAttribute(&out, a, dev); };
  int major = 0, minor = 0, v = 0;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major));
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor));
  d.device_id = ordinal;
  d.cc = major * 10 + minor;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d.max_threads_per_block));
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, d.max_block[0]));
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, d.max_block[1]));
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, d.max_block[2]));
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, v)); d.max_grid[0] = v;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, v)); d.max_grid[1] = v;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, v)); d.max_grid[2] = v;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, v)); d.smem_per_block = v;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, v)); d.smem_per_block_optin = v;
  KB_AOT_CU(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d.sm_count));
  return {};
}

// Load `image` into the current context (the primary context of device 0 when none is current).
template <int N> Status acquire(ModuleState<N>* states, int nstates, std::mutex& mu, const void* const* images,
                                const char* const* symbols, bool need_fault, ModuleState<N>*& out) {
  CUcontext ctx = nullptr;
  KB_AOT_CU(cuInit(0));
  KB_AOT_CU(cuCtxGetCurrent(&ctx));
  if (ctx == nullptr) {
    CUdevice dev0;
    KB_AOT_CU(cuDeviceGet(&dev0, 0));
    KB_AOT_CU(cuDevicePrimaryCtxRetain(&ctx, dev0));
    KB_AOT_CU(cuCtxSetCurrent(ctx));
  }
  std::lock_guard<std::mutex> lock(mu);
  for (int i = 0; i < nstates; ++i) {
    if (states[i].ctx == ctx) { out = &states[i]; return {}; }
  }
  for (int i = 0; i < nstates; ++i) {
    ModuleState<N>& s = states[i];
    if (s.ctx != nullptr) continue;
    CUdevice dev;
    KB_AOT_CU(cuCtxGetDevice(&dev));
    int ordinal = static_cast<int>(dev);
    if (Status e = device_limits(dev, ordinal, s.limits); !e.ok()) return e;
    for (int k = 0; k < N; ++k) {
      KB_AOT_CU(cuModuleLoadData(&s.module[k], images[k]));
      KB_AOT_CU(cuModuleGetFunction(&s.fn[k], s.module[k], symbols[k]));
      int v = 0;
      KB_AOT_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, s.fn[k]));
      s.attrs[k].max_threads_per_block = v;
      KB_AOT_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, s.fn[k]));
      s.attrs[k].static_smem = v;
      KB_AOT_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, s.fn[k]));
      s.attrs[k].num_regs = v;
      KB_AOT_CU(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, s.fn[k]));
      s.attrs[k].max_dynamic_smem = v;
    }
    if (need_fault) {
      KB_AOT_CU(cuMemAlloc(&s.fault, 24 * N));
      KB_AOT_CU(cuMemsetD8(s.fault, 0, 24 * N));
      KB_AOT_CU(cuCtxSynchronize());   // the record is clear before any stream (even non-blocking) uses it
    }
    s.ctx = ctx;
    out = &s;
    return {};
  }
  return Status{kDriverError + static_cast<int>(CUDA_ERROR_OUT_OF_MEMORY),
                "kernelbridge AOT: too many CUDA contexts for one generated module", ""};
}

// A C-contiguous device array of `ndim` extents.
inline void array_arg(kb::ArgValue& a, const void* ptr, kb::DType dtype, int ndim, const int64_t* shape,
                      int device) {
  a.kind = kb::ArgKind::array;
  kb::ArrayView& v = a.array;
  v.ptr = reinterpret_cast<uint64_t>(ptr);
  v.ndim = ndim;
  v.dtype = dtype;
  v.device_type = kb::DeviceType::cuda;
  v.device_id = device;
  int64_t stride = kb::dtype_itemsize(dtype);
  for (int i = ndim - 1; i >= 0; --i) {
    v.shape[i] = shape[i];
    v.strides[i] = stride;
    stride *= shape[i] > 0 ? shape[i] : 1;
  }
}
inline void int_arg(kb::ArgValue& a, int64_t value, kb::DType dtype, const char* type_name) {
  a.kind = kb::ArgKind::scalar;
  a.scalar_kind = dtype == kb::DType::bool_ ? kb::ArgValue::ScalarKind::boolean : kb::ArgValue::ScalarKind::integer;
  a.i = value;
  a.scalar_dtype = dtype;
  a.type_name = type_name;
}
inline void uint64_arg(kb::ArgValue& a, uint64_t value) {
  int_arg(a, static_cast<int64_t>(value), kb::DType::u64, "uint64_t");
  if (value > static_cast<uint64_t>(INT64_MAX)) { a.is_big_unsigned = true; a.u = value; }
}
inline void float_arg(kb::ArgValue& a, double value, kb::DType dtype, const char* type_name) {
  a.kind = kb::ArgKind::scalar;
  a.scalar_kind = kb::ArgValue::ScalarKind::floating;
  a.f = value;
  a.scalar_dtype = dtype;
  a.type_name = type_name;
}

// Validate, pack the view ABI and launch on `stream`.
template <int N> Status launch(const ModuleState<N>& s, int k, const kb::LaunchContract& c,
                               const kb::ArgValue* args, int nargs, kb::LaunchConfig cfg, CUstream stream) {
  if (c.kernel.rfind("<invalid contract", 0) == 0)
    return Status{static_cast<int>(kb::ErrorCode::contract_definition), c.kernel, ""};
  kb::Error e = kb::validate(c, args, nargs, cfg, s.limits, s.attrs[k]);
  if (e) return Status{static_cast<int>(e.code), e.message, e.arg_name};
  if (cfg.skip) return {};
  if (cfg.smem < 0) cfg.smem = 0;
  constexpr int kMaxSlots = 32 * (1 + 2 * kb::kMaxDims) + 1;
  alignas(8) unsigned char storage[kMaxSlots][8];
  void* params[kMaxSlots];
  int n = 0;
  auto slot = [&]() -> unsigned char* { params[n] = storage[n]; return storage[n++]; };
  for (int i = 0; i < nargs; ++i) {
    const kb::ArgValue& a = args[i];
    if (a.kind == kb::ArgKind::array) {
      std::memcpy(slot(), &a.array.ptr, 8);
      for (int d = 0; d < a.array.ndim; ++d) std::memcpy(slot(), &a.array.shape[d], 8);
      for (int d = 0; d < a.array.ndim; ++d) {
        int64_t elems = a.array.strides[d] / a.array.itemsize();
        std::memcpy(slot(), &elems, 8);
      }
    } else if (kb::pack_scalar(a, c.args[i].dtype, slot()) == 0) {
      return Status{static_cast<int>(kb::ErrorCode::argument_kind),
                    c.kernel + ": argument '" + c.args[i].name + "' has a dtype AOT launchers cannot pack",
                    c.args[i].name};
    }
  }
  if (c.has_fault_buffer) {
    const CUdeviceptr rec = s.fault + 24 * static_cast<CUdeviceptr>(k);
    std::memcpy(slot(), &rec, 8);
  }
  if (cfg.smem > 0) {
    KB_AOT_CU(cuFuncSetAttribute(s.fn[k], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(cfg.smem)));
  }
  KB_AOT_CU(cuLaunchKernel(s.fn[k], static_cast<unsigned>(cfg.grid[0]), static_cast<unsigned>(cfg.grid[1]),
                           static_cast<unsigned>(cfg.grid[2]), cfg.block[0], cfg.block[1], cfg.block[2],
                           static_cast<unsigned>(cfg.smem), stream, params, nullptr));
  return {};
}

// Wait for `stream` and report (then clear) the first run-time bounds fault recorded by this module's
// kernels, with the kernel, array, index, extent and source line.
template <int N> Status check_faults(const ModuleState<N>& s, CUstream stream, const kb::LaunchContract* contracts) {
  KB_AOT_CU(cuStreamSynchronize(stream));
  if (s.fault == 0) return {};
  struct Record { uint32_t flag, site; int64_t index, extent; } recs[N];
  static_assert(sizeof(Record) == 24, "fault record layout is part of the kernel ABI");
  KB_AOT_CU(cuMemcpyDtoH(recs, s.fault, sizeof recs));
  for (int k = 0; k < N; ++k) {
    const Record& r = recs[k];
    if (r.flag == 0) continue;
    KB_AOT_CU(cuMemsetD8Async(s.fault, 0, sizeof recs, stream));
    KB_AOT_CU(cuStreamSynchronize(stream));
    const kb::LaunchContract& c = contracts[k];
    std::string where = "site " + std::to_string(r.site);
    std::string array;
    for (const kb::FaultSite& f : c.fault_sites)
      if (f.id == static_cast<int64_t>(r.site)) {
        where = f.file + ":" + std::to_string(f.line) + ": " + f.text;
        array = f.array;
      }
    return Status{kKernelFault, c.kernel + ": index " + std::to_string(r.index) + " out of range for '" + array +
                  "' (extent " + std::to_string(r.extent) + ") at " + where, array};
  }
  return {};
}

}  // namespace kb_aot
#endif  // KB_AOT_RUNTIME_DEFINED
'''


def _launcher(k: AotKernel, index: int) -> str:
    sig: list[str] = []
    body: list[str] = []
    for i, p in enumerate(k.params):
        ctype = C_TYPES[p.dtype]
        kbd = f"kb::DType::{KB_DTYPES[p.dtype]}"
        if p.kind == "array":
            const = "" if p.writable else "const "
            sig.append(f"{const}{ctype}* {p.name}")
            dims = [f"{p.name}_shape{d}" for d in range(p.ndim)]
            sig += [f"int64_t {d}" for d in dims]
            body.append(f"  const int64_t {p.name}_shape[{max(1, p.ndim)}] = {{{', '.join(dims) or '0'}}};")
            body.append(f"  ::kb_aot::array_arg(args[{i}], {p.name}, {kbd}, {p.ndim}, {p.name}_shape, "
                        "st->limits.device_id);")
        else:
            sig.append(f"{ctype} {p.name}")
            if p.dtype in ("f32", "f64"):
                body.append(f"  ::kb_aot::float_arg(args[{i}], {p.name}, {kbd}, \"{ctype}\");")
            elif p.dtype == "u64":
                body.append(f"  ::kb_aot::uint64_arg(args[{i}], {p.name});")
            else:
                body.append(f"  ::kb_aot::int_arg(args[{i}], static_cast<int64_t>({p.name}), {kbd}, \"{ctype}\");")
    if k.grid_from:
        sig += ["CUstream stream = nullptr", "::kb_aot::Grid grid = {}"]
    else:
        sig += ["CUstream stream", "::kb_aot::Grid grid"]
    grid = "  cfg.grid[0] = grid.x; cfg.grid[1] = grid.y; cfg.grid[2] = grid.z;\n"
    args_decl = f"  ::kb::ArgValue args[{max(1, len(k.params))}];"
    return (f"// {k.name}: contract {k.contract_json}\n"
            f"inline ::kb_aot::Status {k.name}({', '.join(sig)}) {{\n"
            f"  detail::State* st = nullptr;\n"
            f"  if (::kb_aot::Status s = detail::state(st); !s.ok()) return s;\n"
            f"{args_decl}\n" + "\n".join(body) + "\n"
            f"  ::kb::LaunchConfig cfg;\n  cfg.smem = -1;\n{grid}"
            f"  return ::kb_aot::launch(*st, {index}, detail::contracts()[{index}], args, {len(k.params)}, cfg, stream);\n"
            f"}}\n")


def render_header(namespace: str, source: str, arch: str, images: list[tuple[bytes, str]],
                  kernels: list[AotKernel]) -> str:
    """The complete header for one module's kernels (one embedded image per kernel)."""
    n = len(kernels)
    defs = []
    for i, (k, (data, kind)) in enumerate(zip(kernels, images)):
        payload = data + (b"\0" if kind == "ptx" else b"")
        defs.append(f"// {kind} image of {k.name} for {arch} ({len(data)} bytes)\n"
                    f"alignas(64) inline const unsigned char kImage{i}[] = {{\n{_bytes_literal(payload)}\n}};")
    image_defs = "\n".join(defs)
    image_list = ", ".join(f"kImage{i}" for i in range(n))
    symbols = ", ".join(_c_string(k.symbol) for k in kernels)
    contracts = ",\n      ".join(_c_string(k.contract_json) for k in kernels)
    sums = ", ".join(f"0x{contract_checksum(k.contract_json):016x}ull" for k in kernels)
    need_fault = "true" if any(json.loads(k.contract_json).get("fault_sites") for k in kernels) else "false"
    launchers = "\n".join(_launcher(k, i) for i, k in enumerate(kernels))
    return f'''// Generated by `python -m dsl.aot {source} --arch {arch}`: do not edit.
// Typed launchers for the DSL kernels of {source}. Each validates its launch contract with
// kernelbridge/contract.hpp before calling cuLaunchKernel on the given stream; a violation returns a
// kb_aot::Status with the error code and message and launches nothing. Link with -lcuda.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/contract_checksum.hpp"
{RUNTIME}
namespace {namespace} {{
using Status = ::kb_aot::Status;
using Grid = ::kb_aot::Grid;
constexpr int kDriverError = ::kb_aot::kDriverError;
constexpr int kKernelFault = ::kb_aot::kKernelFault;

namespace detail {{

{image_defs}
inline const void* const kImages[{n}] = {{{image_list}}};
inline const char* const kSymbols[{n}] = {{{symbols}}};
inline const char* const kContractJson[{n}] = {{
      {contracts}}};
// FNV-1a 64 of each contract text (kernelbridge/contract_checksum.hpp), checked before it is parsed.
inline const uint64_t kContractSum[{n}] = {{{sums}}};
using State = ::kb_aot::ModuleState<{n}>;

// Contracts verified and parsed once per process (kb::parse_contract), shared by every launch; a
// damaged one becomes "<invalid contract: ...>", which every launch of that kernel reports.
inline const ::kb::LaunchContract* contracts() {{
  static const struct Parsed {{
    ::kb::LaunchContract c[{n}];
    Parsed() {{
      for (int k = 0; k < {n}; ++k) {{
        if (::kb::contract_checksum(kContractJson[k]) != kContractSum[k]) {{
          c[k].kernel = std::string("<invalid contract: the contract text of ") + kSymbols[k] +
                        " in this header fails its checksum; regenerate it with python -m dsl.aot>";
          continue;
        }}
        ::kb::Error e = ::kb::parse_contract(kContractJson[k], c[k]);
        if (e) c[k].kernel = std::string("<invalid contract: ") + e.message + ">";
      }}
    }}
  }} parsed;
  return parsed.c;
}}

inline ::kb_aot::Status state(State*& out) {{
  static State states[8];
  static std::mutex mu;
  return ::kb_aot::acquire<{n}>(states, 8, mu, kImages, kSymbols, {need_fault}, out);
}}

}}  // namespace detail

{launchers}
// Wait for `stream`; report (and clear) a run-time bounds fault of this module's kernels.
inline ::kb_aot::Status check_faults(CUstream stream = nullptr) {{
  detail::State* st = nullptr;
  if (::kb_aot::Status s = detail::state(st); !s.ok()) return s;
  return ::kb_aot::check_faults(*st, stream, detail::contracts());
}}

}}  // namespace {namespace}
'''
