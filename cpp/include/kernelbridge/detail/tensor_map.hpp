// kernelbridge: building the TMA tensor maps of a contract's "tensor_maps" and asking the driver for
// the parameter offsets they need. Shared by the bridge's Launcher (cpp/native/launcher.hpp) and the
// JAX FFI handler (cpp/jax/kb_jax_ffi.cpp), which pack the same parameter buffer (param_pack.hpp).
//
// Needs <cuda.h> (types only: the driver entry points are passed in, both callers dlopen libcuda), so
// unlike the rest of cpp/include it is included only where the CUDA headers are on the path. The view
// was validated first (kb::detail::check_tensor_map), so an encode failure is the driver's own refusal.
#pragma once

#include <cuda.h>

#include <cstring>
#include <vector>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/detail/param_pack.hpp"

namespace kb {

using TensorMapEncodeFn = decltype(&::cuTensorMapEncodeTiled);
using ParamInfoFn = decltype(&::cuFuncGetParamInfo);

static_assert(CU_TENSOR_MAP_DATA_TYPE_UINT8 == 0 && CU_TENSOR_MAP_DATA_TYPE_UINT16 == 1 &&
                  CU_TENSOR_MAP_DATA_TYPE_UINT32 == 2 && CU_TENSOR_MAP_DATA_TYPE_INT32 == 3 &&
                  CU_TENSOR_MAP_DATA_TYPE_UINT64 == 4 && CU_TENSOR_MAP_DATA_TYPE_INT64 == 5 &&
                  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 == 6 && CU_TENSOR_MAP_DATA_TYPE_FLOAT32 == 7 &&
                  CU_TENSOR_MAP_DATA_TYPE_FLOAT64 == 8 && CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 == 9,
              "detail::tma_element_type (validate.hpp) writes the driver API's CUtensorMapDataType values");

// The type `t` is copied as; the validator (detail::tma_dtype_ok) admitted only types TMA moves.
inline CUtensorMapDataType tma_data_type(DType t) {
  return static_cast<CUtensorMapDataType>(detail::tma_element_type(t));
}

// The descriptor of `spec` for view `a` (axis 0 of a tensor map is the array's innermost axis). An
// empty array gets a zero descriptor: its kernel copies nothing through it.
inline CUresult encode_tensor_map(TensorMapEncodeFn encode, const TensorMapSpec& spec, const ArrayView& a,
                                  CUtensorMap* out) {
  std::memset(out, 0, sizeof *out);
  if (a.size() == 0) return CUDA_SUCCESS;
  const int r = a.ndim;
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], step[5];
  int64_t span = a.itemsize();
  for (int d = 0; d < r; ++d) {
    const int ax = r - 1 - d;
    dims[d] = static_cast<cuuint64_t>(a.shape[ax]);
    box[d] = static_cast<cuuint32_t>(spec.box[static_cast<size_t>(ax)]);
    step[d] = 1;
    if (d > 0) {   // an axis of extent 1 is never stepped along: any valid stride describes it
      const int64_t st = a.shape[ax] > 1 ? a.strides[ax] : (span + 15) / 16 * 16;
      strides[d - 1] = static_cast<cuuint64_t>(st);
      span = st * a.shape[ax];
    } else {
      span *= a.shape[ax];
    }
  }
  const CUtensorMapSwizzle sw = spec.swizzle == 128 ? CU_TENSOR_MAP_SWIZZLE_128B
                                : spec.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                : spec.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                     : CU_TENSOR_MAP_SWIZZLE_NONE;
  return encode(out, tma_data_type(a.dtype), static_cast<cuuint32_t>(r), reinterpret_cast<void*>(a.ptr), dims,
                strides, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE, sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

// Offset and size of each of the `count` parameters of `fn` (cuFuncGetParamInfo). Kernels with tensor
// maps are packed at these offsets: ptxas aligns a 64-byte-aligned parameter's address in the constant
// bank, not its offset from the first parameter, so their layout is not the naive one. Only existing
// parameters are asked for (a query past the last one is a driver error the sanitizers report).
inline void param_layout(ParamInfoFn info, CUfunction fn, size_t count, std::vector<size_t>& offsets,
                         std::vector<size_t>& sizes) {
  offsets.clear();
  sizes.clear();
  for (size_t i = 0; i < count; ++i) {
    size_t off = 0, size = 0;
    if (info(fn, i, &off, &size) != CUDA_SUCCESS) break;   // fewer than the contract says: pack refuses
    offsets.push_back(off);
    sizes.push_back(size);
  }
}

}  // namespace kb
