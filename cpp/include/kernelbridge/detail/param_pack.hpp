// kernelbridge: the kernel parameter buffer of a validated launch — which parameters a contract's
// arguments become and where each goes. One packer for every launcher that fills a buffer for
// CU_LAUNCH_PARAM_BUFFER_POINTER: the bridge's Launcher (cpp/native/launcher.hpp) and the JAX FFI
// handler (cpp/jax/kb_jax_ffi.cpp); each adds what only it has (tensor maps, the fault record).
// No CUDA headers: the driver's parameter offsets come in as plain vectors (tensor_map.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernelbridge/contract.hpp"

namespace kb {

constexpr size_t kMaxParamBytes = 32764;   // CUDA >= 12.1 kernel parameter limit

// How many kernel parameters a launch of contract `c` packs: per array one pointer (plus ndim extents
// and ndim strides for the view ABI), per scalar one value, then the tensor maps, then the fault record.
inline size_t param_count(const LaunchContract& c) {
  size_t n = 0;
  for (const ArgSpec& a : c.args)
    n += a.kind == ArgKind::array && a.abi == Abi::view ? 1 + 2 * static_cast<size_t>(a.ndim) : 1;
  return n + c.tensor_maps.size() + (c.has_fault_buffer ? 1 : 0);
}

// Where each parameter of one launch goes in the parameter buffer: at the driver's offset when the
// kernel has tensor maps (`offsets`/`sizes` from param_layout), else at the next offset aligned to the
// parameter's alignment. `place` returns false when the compiled kernel has no such parameter (count or
// size differ from what the contract says).
class ParamPlacer {
 public:
  ParamPlacer(const std::vector<size_t>* offsets, const std::vector<size_t>* sizes)
      : offsets_(offsets), sizes_(sizes) {}
  bool place(size_t size, size_t align, size_t& at) {
    if (offsets_ != nullptr) {
      if (index_ >= offsets_->size() || (*sizes_)[index_] != size) return false;
      at = (*offsets_)[index_++];
    } else {
      at = (end_ + align - 1) / align * align;
    }
    end_ = std::max(end_, at + size);
    return true;
  }
  size_t index() const { return index_; }
  size_t end() const { return end_; }   // bytes used so far

 private:
  const std::vector<size_t>* offsets_;
  const std::vector<size_t>* sizes_;
  size_t index_ = 0, end_ = 0;
};

// The parameters of the arguments themselves, in contract order: per array its pointer, and for the
// view ABI its ndim extents and ndim strides in elements; per scalar its value in the contract's dtype
// (or its own for `any`). `put(bytes, size, alignment)` stores one. Returns the position of a scalar
// no kernel dtype can hold (nothing is put for it or after it), or -1.
template <class Put>
inline int pack_arguments(const LaunchContract& c, const ArgValue* vals, int n, Put&& put) {
  for (int i = 0; i < n; ++i) {
    const ArgSpec& spec = c.args[static_cast<size_t>(i)];
    const ArgValue& v = vals[i];
    if (spec.kind == ArgKind::array && v.none) {   // an absent optional array: null pointer, zero extents/strides
      const uint64_t zero = 0;
      put(&zero, 8, 8);
      if (spec.abi == Abi::view)
        for (int d = 0; d < 2 * spec.ndim; ++d) put(&zero, 8, 8);
    } else if (spec.kind == ArgKind::array) {
      put(&v.array.ptr, 8, 8);
      if (spec.abi == Abi::view) {
        const int64_t item = v.array.itemsize();
        for (int d = 0; d < v.array.ndim; ++d) put(&v.array.shape[d], 8, 8);
        for (int d = 0; d < v.array.ndim; ++d) {
          const int64_t s = v.array.strides[d] / item;
          put(&s, 8, 8);
        }
      }
    } else {
      unsigned char tmp[16];
      const DType dt = spec.dtype == DType::any ? v.scalar_dtype : spec.dtype;
      const int size = pack_scalar(v, dt, tmp);
      if (size <= 0) return i;
      put(tmp, static_cast<size_t>(size), static_cast<size_t>(size));
    }
  }
  return -1;
}

// The dtype a scalar argument is packed as (pack_arguments), for messages.
inline DType packed_scalar_dtype(const LaunchContract& c, const ArgValue* vals, int i) {
  const ArgSpec& spec = c.args[static_cast<size_t>(i)];
  return spec.dtype == DType::any ? vals[i].scalar_dtype : spec.dtype;
}

}  // namespace kb
