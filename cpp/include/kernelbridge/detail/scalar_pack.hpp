// kernelbridge: packing scalar launch arguments into kernel-parameter bytes.
//
// Why here: the validator decides whether a value fits a dtype with the same rounding the packer
// uses, so "fits" and "what the kernel receives" can never disagree.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernelbridge/contract.hpp"

namespace kb {
namespace detail {

// Round a double to an IEEE binary format with `exp_bits`/`man_bits` (f16: 5/10, bf16: 8/7),
// round-to-nearest-even, with subnormals, overflow to inf and NaN kept quiet (sign and top payload bits).
inline uint16_t round_to_small_float(double x, int exp_bits, int man_bits) {
  uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  const uint32_t sign = (b >> 63) ? (1u << (exp_bits + man_bits)) : 0u;
  const int e = static_cast<int>((b >> 52) & 0x7FF);
  const uint64_t m = b & ((uint64_t{1} << 52) - 1);
  const uint32_t exp_all = (1u << exp_bits) - 1;
  if (e == 0x7FF) {
    if (m == 0) return static_cast<uint16_t>(sign | (exp_all << man_bits));
    uint32_t payload = static_cast<uint32_t>(m >> (52 - man_bits)) | (1u << (man_bits - 1));
    return static_cast<uint16_t>(sign | (exp_all << man_bits) | payload);
  }
  if (e == 0 && m == 0) return static_cast<uint16_t>(sign);
  uint64_t sig = e == 0 ? m : (m | (uint64_t{1} << 52));
  const int exp2 = e == 0 ? -1074 : e - 1075;          // x = sig * 2^exp2
  int top = 63;
  while (!((sig >> top) & 1)) --top;
  const int bias = (1 << (exp_bits - 1)) - 1;
  const int emin = 1 - bias;
  const int unbiased = exp2 + top;
  int q = (unbiased < emin ? emin : unbiased) - man_bits;  // exponent of the target's unit in the last place
  const int shift = q - exp2;
  uint64_t r;
  if (shift <= 0) {
    r = sig << (-shift);
  } else if (shift >= 64) {
    r = 0;
  } else {
    r = sig >> shift;
    const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
  }
  if (r >= (uint64_t{2} << man_bits)) { r >>= 1; ++q; }
  if (r < (uint64_t{1} << man_bits)) return static_cast<uint16_t>(sign | r);  // subnormal (or zero)
  const int biased = q + man_bits + bias;
  if (biased >= static_cast<int>(exp_all)) return static_cast<uint16_t>(sign | (exp_all << man_bits));
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(biased) << man_bits) |
                               static_cast<uint32_t>(r - (uint64_t{1} << man_bits)));
}
inline uint16_t to_f16_bits(double x) { return round_to_small_float(x, 5, 10); }
inline uint16_t to_bf16_bits(double x) { return round_to_small_float(x, 8, 7); }

// The scalar's value as a double (integers converted exactly up to 2**53).
inline double scalar_as_double(const ArgValue& v) {
  if (v.scalar_kind == ArgValue::ScalarKind::floating || v.huge_int) return v.f;
  if (v.is_big_unsigned) return static_cast<double>(v.u);
  return static_cast<double>(v.i);
}

// True when a finite value would round to +-inf in `t` (f16, bf16, f32; f64 never overflows).
inline bool float_overflows(const ArgValue& v, DType t) {
  double x = scalar_as_double(v);
  if (!std::isfinite(x)) return v.huge_int;  // inf/nan given as such are representable; a huge int is not  // inf/nan given as such are representable; a huge int is not
  uint16_t bits;
  switch (t) {
    case DType::f16: bits = to_f16_bits(x); return (bits & 0x7FFF) == 0x7C00;
    case DType::bf16: bits = to_bf16_bits(x); return (bits & 0x7FFF) == 0x7F80;
    case DType::f32: {
      float f = v.scalar_kind == ArgValue::ScalarKind::integer && !v.huge_int
                    ? (v.is_big_unsigned ? static_cast<float>(v.u) : static_cast<float>(v.i))
                    : static_cast<float>(x);
      return std::isinf(f);
    }
    default: return false;
  }
}

}  // namespace detail

inline int pack_scalar(const ArgValue& v, DType dtype, unsigned char* out) {
  const bool integer = v.scalar_kind == ArgValue::ScalarKind::integer ||
                       v.scalar_kind == ArgValue::ScalarKind::boolean;
  const uint64_t ibits = v.is_big_unsigned ? v.u : static_cast<uint64_t>(v.i);
  switch (dtype) {
    case DType::bool_: {
      bool truth = integer ? (v.is_big_unsigned || v.i != 0) : v.f != 0.0;
      out[0] = truth ? 1 : 0;
      return 1;
    }
    case DType::i8: case DType::u8: case DType::i16: case DType::u16:
    case DType::i32: case DType::u32: case DType::i64: case DType::u64: {
      int n = static_cast<int>(dtype_itemsize(dtype));
      for (int k = 0; k < n; ++k) out[k] = static_cast<unsigned char>((ibits >> (8 * k)) & 0xFF);
      return n;
    }
    case DType::f16: case DType::bf16: {
      double x = detail::scalar_as_double(v);
      uint16_t h = dtype == DType::f16 ? detail::to_f16_bits(x) : detail::to_bf16_bits(x);
      out[0] = static_cast<unsigned char>(h & 0xFF);
      out[1] = static_cast<unsigned char>(h >> 8);
      return 2;
    }
    case DType::f32: {
      float f;
      if (integer && !v.huge_int) f = v.is_big_unsigned ? static_cast<float>(v.u) : static_cast<float>(v.i);
      else f = static_cast<float>(detail::scalar_as_double(v));
      std::memcpy(out, &f, 4);
      return 4;
    }
    case DType::f64: {
      double d = detail::scalar_as_double(v);
      std::memcpy(out, &d, 8);
      return 8;
    }
    default:
      return 0;
  }
}

}  // namespace kb
