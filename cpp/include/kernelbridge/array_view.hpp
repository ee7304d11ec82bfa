// kernelbridge: a non-owning view of one device (or host) array, as every launch sees it.
//
// Why a separate header: the Python runtime, the AOT C++ launchers and the validator all read arrays
// the same way, whatever produced them (DLPack, CUDA Array Interface, raw pointer + sizes).
#pragma once

#include <cstdint>
#include <cstddef>
#include <string>

namespace kb {

constexpr int kMaxDims = 8;

// Element types known to the bridge. Order is part of the native ABI of the extension (not of files).
enum class DType : uint8_t {
  invalid = 0,
  bool_, i8, i16, i32, i64, u8, u16, u32, u64,
  f16, bf16, f32, f64, c64, c128,
  f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e3m4, f8e4m3, f8e8m0fnu,
  f6e2m3fn, f6e3m2fn, f4e2m1fn,
  any,  // wildcard, only in contract specs
  count_
};

// DLPack device types we care about (values from dlpack.h).
enum class DeviceType : int32_t { cpu = 1, cuda = 2, cuda_host = 3, cuda_managed = 13, other = -1 };

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";     case DType::i8: return "i8";     case DType::i16: return "i16";
    case DType::i32: return "i32";        case DType::i64: return "i64";   case DType::u8: return "u8";
    case DType::u16: return "u16";        case DType::u32: return "u32";   case DType::u64: return "u64";
    case DType::f16: return "f16";        case DType::bf16: return "bf16"; case DType::f32: return "f32";
    case DType::f64: return "f64";        case DType::c64: return "c64";   case DType::c128: return "c128";
    case DType::f8e4m3fn: return "f8e4m3fn";     case DType::f8e4m3fnuz: return "f8e4m3fnuz";
    case DType::f8e5m2: return "f8e5m2";         case DType::f8e5m2fnuz: return "f8e5m2fnuz";
    case DType::f8e3m4: return "f8e3m4";         case DType::f8e4m3: return "f8e4m3";
    case DType::f8e8m0fnu: return "f8e8m0fnu";   case DType::f6e2m3fn: return "f6e2m3fn";
    case DType::f6e3m2fn: return "f6e3m2fn";     case DType::f4e2m1fn: return "f4e2m1fn";
    case DType::any: return "any";
    default: return "invalid";
  }
}

// Human name used in error messages ("float32", "bfloat16", ...), matching NumPy/torch spelling.
inline const char* dtype_long_name(DType t) {
  switch (t) {
    case DType::bool_: return "bool";      case DType::i8: return "int8";     case DType::i16: return "int16";
    case DType::i32: return "int32";       case DType::i64: return "int64";   case DType::u8: return "uint8";
    case DType::u16: return "uint16";      case DType::u32: return "uint32";  case DType::u64: return "uint64";
    case DType::f16: return "float16";     case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";     case DType::f64: return "float64";
    case DType::c64: return "complex64";   case DType::c128: return "complex128";
    case DType::f8e4m3fn: return "float8_e4m3fn";     case DType::f8e4m3fnuz: return "float8_e4m3fnuz";
    case DType::f8e5m2: return "float8_e5m2";         case DType::f8e5m2fnuz: return "float8_e5m2fnuz";
    case DType::f8e3m4: return "float8_e3m4";         case DType::f8e4m3: return "float8_e4m3";
    case DType::f8e8m0fnu: return "float8_e8m0fnu";   case DType::f6e2m3fn: return "float6_e2m3fn";
    case DType::f6e3m2fn: return "float6_e3m2fn";     case DType::f4e2m1fn: return "float4_e2m1fn";
    default: return dtype_name(t);  // any, invalid
  }
}

inline DType dtype_from_name(const std::string& s) {
  for (int i = 1; i < static_cast<int>(DType::count_); ++i) {
    DType t = static_cast<DType>(i);
    if (s == dtype_name(t) || s == dtype_long_name(t)) return t;
  }
  if (s == "boolean") return DType::bool_;
  return DType::invalid;
}

// Storage size in bits (sub-byte float formats report their packed width).
inline int dtype_bits(DType t) {
  switch (t) {
    case DType::bool_: case DType::i8: case DType::u8: return 8;
    case DType::i16: case DType::u16: case DType::f16: case DType::bf16: return 16;
    case DType::i32: case DType::u32: case DType::f32: return 32;
    case DType::i64: case DType::u64: case DType::f64: case DType::c64: return 64;
    case DType::c128: return 128;
    case DType::f6e2m3fn: case DType::f6e3m2fn: return 6;
    case DType::f4e2m1fn: return 4;
    case DType::f8e4m3fn: case DType::f8e4m3fnuz: case DType::f8e5m2: case DType::f8e5m2fnuz:
    case DType::f8e3m4: case DType::f8e4m3: case DType::f8e8m0fnu: return 8;
    default: return 0;
  }
}
inline int64_t dtype_itemsize(DType t) { int b = dtype_bits(t); return b >= 8 ? b / 8 : 1; }
inline bool dtype_is_float(DType t) {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64 ||
         (t >= DType::f8e4m3fn && t <= DType::f4e2m1fn);
}
inline bool dtype_is_signed_int(DType t) { return t >= DType::i8 && t <= DType::i64; }
inline bool dtype_is_unsigned_int(DType t) { return t >= DType::u8 && t <= DType::u64; }

struct ArrayView {
  uint64_t ptr = 0;                 // address of element [0,...,0] (byte_offset already applied)
  int32_t ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};   // in BYTES (DLPack element strides are converted on intake)
  DType dtype = DType::invalid;
  DeviceType device_type = DeviceType::other;
  int32_t device_id = 0;
  bool readonly = false;

  // Element count. Wraps (defined, unsigned) instead of overflowing: intake and the validator refuse
  // views for which overflow_reason() is not null, so a view in use never wraps.
  int64_t size() const {
    uint64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= static_cast<uint64_t>(shape[i]);
    return static_cast<int64_t>(n);
  }
  int64_t itemsize() const { return dtype_itemsize(dtype); }

  bool is_c_contiguous() const {
    if (size() == 0) return true;
    int64_t expect = itemsize();
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  bool is_f_contiguous() const {
    if (size() == 0) return true;
    int64_t expect = itemsize();
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] != 1 && strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  // nullptr when the view is well formed for 64-bit arithmetic: no negative extent, the product of its
  // non-zero extents fits int64 (as NumPy requires, empty arrays included) and, when it is not empty,
  // its byte extent fits int64 and [lo, hi) fits the address space. Otherwise the reason: a view of
  // shape (2**62, 2**62) must not pass as "size 0" (and so skip the aliasing check).
  const char* overflow_reason() const {
    uint64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] < 0) return "it has a negative extent";
      if (shape[i] == 0) empty = true;
    }
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] == 0) continue;
      if (__builtin_mul_overflow(n, static_cast<uint64_t>(shape[i]), &n) || n > uint64_t{INT64_MAX})
        return "its element count overflows int64";
    }
    if (empty) return nullptr;  // never dereferenced: strides and pointer do not matter
    int64_t neg = 0, pos = 0;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] == 1) continue;
      int64_t span;
      if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span)) return "its byte extent overflows int64";
      if (span < 0 ? __builtin_add_overflow(neg, span, &neg) : __builtin_add_overflow(pos, span, &pos))
        return "its byte extent overflows int64";
    }
    int64_t total;
    if (__builtin_sub_overflow(pos, neg, &total) || __builtin_add_overflow(total, itemsize(), &total))
      return "its byte extent overflows int64";
    uint64_t below = static_cast<uint64_t>(-(neg + 1)) + 1;  // |neg| without overflowing at INT64_MIN
    uint64_t hi;
    if (neg != 0 && below > ptr) return "its address range starts below address 0";
    if (__builtin_add_overflow(ptr, static_cast<uint64_t>(pos) + static_cast<uint64_t>(itemsize()), &hi))
      return "its address range ends beyond the 64-bit address space";
    return nullptr;
  }

  // Half-open byte range [lo, hi) touched by the view; lo == hi for an empty array.
  void extent(uint64_t& lo, uint64_t& hi) const {
    if (size() == 0) { lo = hi = ptr; return; }
    int64_t neg = 0, pos = 0;
    for (int i = 0; i < ndim; ++i) {
      int64_t span = (shape[i] - 1) * strides[i];
      if (span < 0) neg += span; else pos += span;
    }
    lo = ptr + neg;
    hi = ptr + pos + itemsize();
  }
};

}  // namespace kb
