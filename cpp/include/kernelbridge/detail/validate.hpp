// kernelbridge: validating one launch against its contract, the device and the compiled function.
//
// Why one function in a fixed order (docs/architecture.md): every caller (Python runtime, AOT C++
// launcher) refuses the same launches with the same message, before anything is submitted. The
// success path allocates nothing; messages are built only when a check fails.
#pragma once

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernelbridge/contract.hpp"
#include "kernelbridge/detail/relations.hpp"
#include "kernelbridge/detail/scalar_pack.hpp"

// Message builders run only when a check fails: cold and out of line, so the success path of every
// check stays a few dense cache lines (a launch reaches the validator with the driver's previous call
// having evicted it from L1/L2; each line it spans costs a miss).
#if defined(__GNUC__) || defined(__clang__)
#define KB_COLD __attribute__((cold, noinline))
#else
#define KB_COLD
#endif

namespace kb {
namespace detail {

KB_COLD inline std::string tuple_text(const int64_t* v, int n) {
  std::string s = "(";
  for (int k = 0; k < n; ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + (n == 1 ? ",)" : ")");
}
KB_COLD inline std::string dims_text(const int64_t v[3]) { return tuple_text(v, 3); }
KB_COLD inline std::string dims_text(const int v[3]) {
  int64_t w[3] = {v[0], v[1], v[2]};
  return tuple_text(w, 3);
}
inline const char* axis_name(int d) { return d == 0 ? "x" : d == 1 ? "y" : "z"; }

// Shortest decimal that reads back as the same double, spelled like Python's repr().
KB_COLD inline std::string float_text(double x) {
  if (x != x) return "nan";
  if (x - x != 0.0) return x > 0 ? "inf" : "-inf";
  char buf[48];
  int p = 0;
  for (; p < 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string e = buf;                         // [-]d[.ddd]e[+-]XX
  size_t epos = e.find('e');
  int exp10 = std::atoi(e.c_str() + epos + 1);
  std::string sign = e[0] == '-' ? "-" : "";
  std::string digits;
  for (size_t k = sign.size(); k < epos; ++k) if (e[k] != '.') digits += e[k];
  if (exp10 < -4 || exp10 >= 16) {
    std::string m = digits.substr(0, 1) + (digits.size() > 1 ? "." + digits.substr(1) : "");
    char ex[16];
    std::snprintf(ex, sizeof ex, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return sign + m + ex;
  }
  if (exp10 < 0) return sign + "0." + std::string(static_cast<size_t>(-exp10 - 1), '0') + digits;
  size_t int_len = static_cast<size_t>(exp10) + 1;
  if (digits.size() <= int_len) return sign + digits + std::string(int_len - digits.size(), '0') + ".0";
  return sign + digits.substr(0, int_len) + "." + digits.substr(int_len);
}
KB_COLD inline std::string hex_text(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%" PRIx64, v);
  return buf;
}

KB_COLD inline std::string spec_text(const ArgSpec& sp) {
  std::string dt = sp.dtype == DType::any ? "" : std::string(dtype_long_name(sp.dtype)) + " ";
  if (sp.kind == ArgKind::scalar) return dt + "scalar";
  std::string lay = sp.layout == Layout::c_contig ? "C-contiguous " : sp.layout == Layout::f_contig ? "F-contiguous " : "";
  std::string nd = sp.ndim >= 0 ? std::to_string(sp.ndim) + "-D " : "";
  return nd + lay + dt + "array";
}

KB_COLD inline std::string value_text(const ArgValue& v) {
  if (v.none) return "None";
  if (v.kind == ArgKind::array)
    return std::string(dtype_long_name(v.array.dtype)) + " array of shape " + tuple_text(v.array.shape, v.array.ndim);
  std::string tn = v.type_name && *v.type_name ? v.type_name : "";
  switch (v.scalar_kind) {
    case ArgValue::ScalarKind::boolean: return (tn.empty() ? "bool" : tn) + (v.i ? " True" : " False");
    case ArgValue::ScalarKind::integer:
      if (v.huge_int) return (tn.empty() ? "int" : tn) + " outside the 64-bit range";
      return (tn.empty() ? "int" : tn) + " " + (v.is_big_unsigned ? std::to_string(v.u) : std::to_string(v.i));
    case ArgValue::ScalarKind::floating: return (tn.empty() ? "float" : tn) + " " + float_text(v.f);
    default: return tn.empty() ? "an unsupported object" : tn + " object";
  }
}

KB_COLD inline Error arg_error(const LaunchContract& c, int pos, ErrorCode code, const std::string& expected,
                       const std::string& got) {
  Error e;
  e.code = code;
  e.arg = pos;
  e.arg_name = c.args[pos].name;
  e.message = c.kernel + ": argument '" + e.arg_name + "' (#" + std::to_string(pos) + "): expected " + expected +
              ", got " + got;
  return e;
}
KB_COLD inline Error config_error(const LaunchContract& c, ErrorCode code, const std::string& what,
                          const std::string& expected, const std::string& got) {
  Error e;
  e.code = code;
  e.message = c.kernel + ": " + what + ": expected " + expected + ", got " + got;
  return e;
}

KB_COLD inline std::string device_text(const ArrayView& a) {
  switch (a.device_type) {
    case DeviceType::cpu: return "host memory (cpu)";
    case DeviceType::cuda_host: return "pinned host memory (cuda_host)";
    case DeviceType::cuda: return "memory on cuda:" + std::to_string(a.device_id);
    default: return "memory of an unsupported device type";
  }
}

enum class Category : uint8_t { none, boolean, integer, floating };
inline Category dtype_category(DType t) {
  if (t == DType::bool_) return Category::boolean;
  if (dtype_is_signed_int(t) || dtype_is_unsigned_int(t)) return Category::integer;
  if (dtype_is_float(t)) return Category::floating;
  return Category::none;
}

inline Error check_scalar_kind(const LaunchContract& c, int k, const ArgValue& v) {
  const ArgSpec& sp = c.args[k];
  if (v.scalar_kind == ArgValue::ScalarKind::none) {
    ErrorCode code = v.scalar_dtype != DType::invalid ? ErrorCode::dtype : ErrorCode::argument_kind;
    return arg_error(c, k, code, spec_text(sp), value_text(v));
  }
  Category want = dtype_category(sp.dtype);
  Category got = v.scalar_kind == ArgValue::ScalarKind::boolean   ? Category::boolean
                 : v.scalar_kind == ArgValue::ScalarKind::integer ? Category::integer
                                                                  : Category::floating;
  bool ok = want == got || sp.dtype == DType::any;
  // A Python int may feed a float parameter; a NumPy-typed scalar must match the declared kind.
  if (!ok && want == Category::floating && got == Category::integer && v.scalar_dtype == DType::invalid) ok = true;
  if (ok && v.scalar_dtype != DType::invalid && sp.dtype != DType::any && dtype_category(v.scalar_dtype) != want) ok = false;
  if (!ok) return arg_error(c, k, ErrorCode::dtype, spec_text(sp), value_text(v));
  return Error();
}

inline Error check_array(const LaunchContract& c, int k, const ArgValue& v, const DeviceLimits& dev) {
  const ArgSpec& sp = c.args[k];
  const ArrayView& a = v.array;
  if (sp.dtype != DType::any && a.dtype != sp.dtype) return arg_error(c, k, ErrorCode::dtype, spec_text(sp), value_text(v));
  if (sp.ndim >= 0 && a.ndim != sp.ndim) return arg_error(c, k, ErrorCode::ndim, spec_text(sp), value_text(v));
  bool device_ok = dev.host_memory
                       ? (a.device_type == DeviceType::cpu || a.device_type == DeviceType::cuda_host)
                       : a.device_type == DeviceType::cuda_managed ||
                             (a.device_type == DeviceType::cuda &&
                              (a.device_id == dev.device_id ||
                               (a.device_id >= 0 && a.device_id < 64 && ((dev.peer_mask >> a.device_id) & 1u))));
  if (!device_ok)
    return arg_error(c, k, ErrorCode::device_mismatch,
                     dev.host_memory ? std::string("host memory (a NumPy array) for the simulator")
                                     : "device memory on cuda:" + std::to_string(dev.device_id),
                     device_text(a));
  if (const char* why = a.overflow_reason())  // intake refuses these; views built by hand (AOT, ArrayDesc) too
    return arg_error(c, k, ErrorCode::layout, "an array whose element count and byte extent fit in 64 bits",
                     value_text(v) + " with byte strides " + tuple_text(a.strides, a.ndim) + " (" + why + ")");
  if ((sp.layout == Layout::c_contig && !a.is_c_contiguous()) || (sp.layout == Layout::f_contig && !a.is_f_contiguous()))
    return arg_error(c, k, ErrorCode::layout, spec_text(sp),
                     value_text(v) + " with byte strides " + tuple_text(a.strides, a.ndim));
  if (sp.abi == Abi::view && a.size() > 0) {  // the view ABI passes strides in elements
    for (int d = 0; d < a.ndim; ++d)
      if (a.strides[d] % a.itemsize() != 0)
        return arg_error(c, k, ErrorCode::layout, spec_text(sp) + " with strides that are multiples of its itemsize",
                         value_text(v) + " with byte strides " + tuple_text(a.strides, a.ndim));
  }
  uint64_t align = sp.align > 0 ? static_cast<uint64_t>(sp.align) : static_cast<uint64_t>(a.itemsize());
  // align is a power of two (contract parse) or an itemsize (1, 2, 4, 8, 16): mask, no division
  if (align > 1 && (a.ptr & (align - 1)) != 0 && a.size() > 0)  // an empty array is never dereferenced
    return arg_error(c, k, ErrorCode::alignment, "data pointer aligned to " + std::to_string(align) + " bytes",
                     "address " + hex_text(a.ptr));
  if (sp.writable() && a.readonly)
    return arg_error(c, k, ErrorCode::readonly,
                     std::string("writable array (access '") + (sp.access == Access::write ? "write" : sp.access == Access::atomic ? "atomic" : "readwrite") + "')",
                     "a read-only array");
  return Error();
}

// What cuTensorMapEncodeTiled needs of an array (CUDA driver API): rank = box rank, innermost axis
// contiguous, base address and every other byte stride multiples of 16 (strides below 2^40), extents
// below 2^32, an element type TMA moves. Checked here so a bad view is refused naming the argument,
// never a failed encode or a device fault. Empty arrays get no tensor map (nothing is copied).
// The one table of what TMA moves: the CUtensorMapDataType an element type is copied as (the driver
// API's enum values; tensor_map.hpp, which has cuda.h, checks them), or -1 where TMA copies none.
// fp8 is copied as bytes. The validator admits exactly what the encoder encodes.
inline int tma_element_type(DType t) {
  switch (t) {
    case DType::u8: case DType::f8e4m3fn: case DType::f8e5m2: return 0;   // UINT8
    case DType::u16: return 1;     // UINT16
    case DType::u32: return 2;     // UINT32
    case DType::i32: return 3;     // INT32
    case DType::u64: return 4;     // UINT64
    case DType::i64: return 5;     // INT64
    case DType::f16: return 6;     // FLOAT16
    case DType::f32: return 7;     // FLOAT32
    case DType::f64: return 8;     // FLOAT64
    case DType::bf16: return 9;    // BFLOAT16
    default: return -1;
  }
}
inline bool tma_dtype_ok(DType t) { return tma_element_type(t) >= 0; }
// Why a view cannot be a TMA tensor map (check_tensor_map found that it cannot), first reason first.
KB_COLD inline Error tensor_map_error(const LaunchContract& c, const TensorMapSpec& t, const ArgValue& v) {
  const ArrayView& a = v.array;
  const int k = t.arg;
  const std::string what = " (its TMA tensor map, box " + tuple_text(t.box.data(), static_cast<int>(t.box.size())) + ")";
  if (a.ndim != static_cast<int>(t.box.size()))
    return arg_error(c, k, ErrorCode::ndim, std::to_string(t.box.size()) + "-d array" + what, value_text(v));
  if (!tma_dtype_ok(a.dtype))
    return arg_error(c, k, ErrorCode::dtype, "an element type TMA copies" + what, value_text(v));
  const int64_t item = a.itemsize();
  const std::string strides = value_text(v) + " with byte strides " + tuple_text(a.strides, a.ndim);
  if (a.strides[a.ndim - 1] != item && a.shape[a.ndim - 1] > 1)
    return arg_error(c, k, ErrorCode::layout, "a contiguous innermost axis" + what, strides);
  for (int d = 0; d + 1 < a.ndim; ++d) {
    if (a.shape[d] > 1 && (a.strides[d] <= 0 || a.strides[d] % 16 != 0 || a.strides[d] >= (int64_t{1} << 40)))
      return arg_error(c, k, ErrorCode::layout, "positive byte strides that are multiples of 16 and below 2^40 on "
                                                "every axis but the innermost" + what, strides);
  }
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] > (int64_t{1} << 32))
      return arg_error(c, k, ErrorCode::layout, "extents of at most 2^32" + what, value_text(v));
  return arg_error(c, k, ErrorCode::alignment, "data pointer aligned to 16 bytes" + what, "address " + hex_text(a.ptr));
}
inline Error check_tensor_map(const LaunchContract& c, const TensorMapSpec& t, const ArgValue& v) {
  const ArrayView& a = v.array;
  if (a.size() == 0) return Error();
  bool ok = a.ndim == static_cast<int>(t.box.size()) && tma_dtype_ok(a.dtype) &&
            (a.strides[a.ndim - 1] == a.itemsize() || a.shape[a.ndim - 1] <= 1) && (a.ptr & 15u) == 0;
  for (int d = 0; ok && d + 1 < a.ndim; ++d)
    ok = a.shape[d] <= 1 || (a.strides[d] > 0 && a.strides[d] % 16 == 0 && a.strides[d] < (int64_t{1} << 40));
  for (int d = 0; ok && d < a.ndim; ++d) ok = a.shape[d] <= (int64_t{1} << 32);
  return ok ? Error() : tensor_map_error(c, t, v);
}

inline Error check_scalar_range(const LaunchContract& c, int k, const ArgValue& v) {
  DType t = c.args[k].dtype;
  if (dtype_is_signed_int(t) || dtype_is_unsigned_int(t)) {
    int bits = dtype_bits(t);
    bool sign = dtype_is_signed_int(t);
    bool ok;
    if (v.huge_int) ok = false;
    else if (v.is_big_unsigned) ok = !sign && bits == 64;
    else if (sign) ok = bits == 64 || (v.i >= -(INT64_C(1) << (bits - 1)) && v.i < (INT64_C(1) << (bits - 1)));
    else ok = v.i >= 0 && (bits == 64 || v.i < (INT64_C(1) << bits));
    if (!ok) {
      std::string lo = sign ? "-" + std::to_string(uint64_t{1} << (bits - 1)) : "0";
      std::string hi = sign ? std::to_string((uint64_t{1} << (bits - 1)) - 1)
                            : (bits == 64 ? std::to_string(UINT64_MAX) : std::to_string((uint64_t{1} << bits) - 1));
      return arg_error(c, k, ErrorCode::scalar_range,
                       std::string(dtype_long_name(t)) + " scalar in [" + lo + ", " + hi + "]", value_text(v));
    }
  } else if (dtype_is_float(t) && float_overflows(v, t)) {
    const char* max = t == DType::f16 ? "65504" : t == DType::bf16 ? "3.3895314e+38" : t == DType::f32 ? "3.4028235e+38"
                                                                                                      : "1.7976931348623157e+308";
    return arg_error(c, k, ErrorCode::scalar_range,
                     std::string(dtype_long_name(t)) + " scalar of magnitude at most " + max + " (larger overflows to inf)",
                     value_text(v));
  }
  return Error();
}

// Why relation `r` fails for these arguments and launch configuration (check_relation found that it does).
KB_COLD inline Error relation_error(const LaunchContract& c, size_t r, const ArgValue* args, const LaunchConfig* cfg) {
  const Relation& rel = *c.relations[r];
  RelValue out;
  std::string why;
  bool ok = eval_relation(rel, rel.root, args, cfg, out, &why);
  std::vector<int> terms;
  int node = ok ? failing_comparison(rel, rel.root, args, cfg) : rel.root;
  if (node < 0) node = rel.root;
  collect_terms(rel, node, terms);
  int arg = -1;
  for (int t : terms) if (rel.nodes[t].arg > arg) arg = rel.nodes[t].arg;
  std::string got;
  if (!ok) {
    got = why;
  } else {
    for (int t : terms) {
      RelValue v;
      got += (got.empty() ? "" : ", ") + node_text(rel, t) + " = " +
             (eval_relation(rel, t, args, cfg, v, nullptr) ? rel_value_text(v) : std::string("?"));
    }
    if (got.empty()) got = "false";
  }
  std::string cmp = node_text(rel, node);
  std::string expected = ok ? cmp : "requires '" + rel.text + "' to evaluate";
  if (ok && cmp != rel.text) expected += " (requires '" + rel.text + "')";
  if (arg >= 0) return arg_error(c, arg, ErrorCode::shape_relation, expected, got);
  return config_error(c, ErrorCode::shape_relation, "requires '" + rel.text + "'", expected, got);
}

// `cfg`: the resolved launch configuration (relations with grid.* / block.* terms), else nullptr.
inline Error check_relation(const LaunchContract& c, size_t r, const ArgValue* args, const LaunchConfig* cfg) {
  const Relation& rel = *c.relations[r];
  if (c.has_optional && names_absent(rel, args)) return Error();   // names an array passed as None
  RelValue out;
  if (eval_relation(rel, rel.root, args, cfg, out, nullptr) && out.v) return Error();
  return relation_error(c, r, args, cfg);
}

inline bool is_inplace_pair(const LaunchContract& c, int a, int b) {
  for (const auto& p : c.inplace)
    if ((p.first == a && p.second == b) || (p.first == b && p.second == a)) return true;
  return false;
}

// Whether two different elements of `a` share bytes. Fast sufficient test first: with the axes sorted
// by |stride|, each |stride| at least the span of the smaller axes plus the itemsize means every
// element has its own bytes. Otherwise decide exactly: overlap <=> a non-zero integer vector x with
// |x_d| < shape_d and |sum x_d * stride_d| < itemsize, found by a depth-first search that only tries
// the x_d that can still reach the window. `budget` bounds that search; when it runs out the result
// is SelfOverlap::unknown. On overlap, `x` holds such a vector (per axis of `a`).
enum class SelfOverlap : uint8_t { none, overlap, unknown };
__extension__ typedef __int128 OverlapWide;  // GCC/Clang (and nvcc's host compilers); no -pedantic warning

struct OverlapSearch {
  int n = 0;
  int axis[kMaxDims];      // axes with extent > 1, largest |stride| first
  int64_t stride[kMaxDims], count[kMaxDims], rest[kMaxDims];  // |stride|, extent - 1, span of the later axes
  int64_t item = 1;
  int64_t x[kMaxDims];
  int64_t budget = 0;

  // True when x[k..] can complete partial sum p (x[0..k) chosen; nonzero: some x[<k] != 0).
  SelfOverlap run(int k, int64_t p, bool nonzero) {
    if (k == n) return nonzero && p > -item && p < item ? SelfOverlap::overlap : SelfOverlap::none;
    // Keep |p + x s| <= w, or the later axes cannot bring the sum back into the window:
    // x in [ceil((-w - p) / s), floor((w - p) / s)], within [-count, count]. 128-bit: w + |p| may
    // exceed int64 for extents near 2**63; p + x s itself stays within the byte extent.
    const OverlapWide w = static_cast<OverlapWide>(item) - 1 + rest[k];
    const OverlapWide s = stride[k];
    OverlapWide lo = -floor_div(w + p, s);  // ceil((-w - p) / s)
    OverlapWide hi = floor_div(w - p, s);
    if (lo < -count[k]) lo = -count[k];
    if (hi > count[k]) hi = count[k];
    for (int64_t v = static_cast<int64_t>(lo); v <= hi; ++v) {
      if (--budget < 0) return SelfOverlap::unknown;
      x[k] = v;
      SelfOverlap r = run(k + 1, p + v * stride[k], nonzero || v != 0);
      if (r != SelfOverlap::none) return r;
    }
    return SelfOverlap::none;
  }
  static OverlapWide floor_div(OverlapWide a, OverlapWide b) {  // b > 0
    OverlapWide q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
  }
};

// Precondition: a.overflow_reason() is null (check_array refuses other views first).
inline SelfOverlap self_overlap(const ArrayView& a, int64_t x_out[kMaxDims], int64_t budget = int64_t{1} << 20) {
  OverlapSearch q;
  q.item = a.itemsize();
  for (int d = 0; d < a.ndim; ++d) x_out[d] = 0;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] == 0) return SelfOverlap::none;  // no elements: nothing to share (strides unchecked)
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] <= 1) continue;
    int64_t s = a.strides[d] < 0 ? -a.strides[d] : a.strides[d];  // |stride| <= byte extent < 2**63 here
    if (s == 0) { x_out[d] = 1; return SelfOverlap::overlap; }
    int j = q.n++;
    for (; j > 0 && q.stride[j - 1] > s; --j) {  // insertion sort, ascending |stride|
      q.stride[j] = q.stride[j - 1]; q.count[j] = q.count[j - 1]; q.axis[j] = q.axis[j - 1];
    }
    q.stride[j] = s; q.count[j] = a.shape[d] - 1; q.axis[j] = d;
  }
  bool fast_ok = true;
  for (int64_t span = 0, j = 0; j < q.n && fast_ok; ++j) {
    fast_ok = q.stride[j] >= span + q.item;
    span += q.count[j] * q.stride[j];
  }
  if (fast_ok) return SelfOverlap::none;
  for (int j = 0; j < q.n / 2; ++j) {  // largest stride first: the early choices prune the most
    std::swap(q.stride[j], q.stride[q.n - 1 - j]); std::swap(q.count[j], q.count[q.n - 1 - j]);
    std::swap(q.axis[j], q.axis[q.n - 1 - j]);
  }
  for (int64_t r = 0, j = q.n - 1; j >= 0; --j) { q.rest[j] = r; r += q.count[j] * q.stride[j]; }
  q.budget = budget;
  SelfOverlap r = q.run(0, 0, false);
  if (r == SelfOverlap::overlap)
    for (int j = 0; j < q.n; ++j) {  // x was found for |stride|: flip it back on negative strides
      const int d = q.axis[j];
      x_out[d] = a.strides[d] < 0 ? -q.x[j] : q.x[j];
    }
  return r;
}

inline Error check_self_overlap(const LaunchContract& c, int k, const ArrayView& a) {
  int64_t x[kMaxDims];
  SelfOverlap r = self_overlap(a, x);
  if (r == SelfOverlap::none) return Error();
  std::string got = dtype_long_name(a.dtype) + std::string(" array of shape ") + tuple_text(a.shape, a.ndim) +
                    " with byte strides " + tuple_text(a.strides, a.ndim);
  if (r == SelfOverlap::overlap) {
    int64_t i0[kMaxDims], i1[kMaxDims];  // two indices x apart, both in range
    for (int d = 0; d < a.ndim; ++d) { i0[d] = x[d] < 0 ? -x[d] : 0; i1[d] = i0[d] + x[d]; }
    if (std::lexicographical_compare(i1, i1 + a.ndim, i0, i0 + a.ndim)) std::swap(i0, i1);  // smaller first
    got += ", whose elements " + tuple_text(i0, a.ndim) + " and " + tuple_text(i1, a.ndim) + " share bytes";
  } else {
    got += ", for which overlap could not be ruled out within the search bound";
  }
  return arg_error(c, k, ErrorCode::aliasing, "a writable array whose elements do not overlap each other", got);
}

inline Error check_aliasing(const LaunchContract& c, const ArgValue* args, int n) {
  for (int i = 0; i < n; ++i) {
    if (c.args[i].kind != ArgKind::array || !c.args[i].writable() || args[i].none || args[i].array.size() <= 1)
      continue;
    if (Error e = check_self_overlap(c, i, args[i].array)) return e;
  }
  for (int i = 0; i < n; ++i) {
    if (c.args[i].kind != ArgKind::array || !c.args[i].writable() || args[i].none || args[i].array.size() == 0)
      continue;
    uint64_t lo1, hi1;
    args[i].array.extent(lo1, hi1);
    for (int j = 0; j < n; ++j) {
      if (j == i || c.args[j].kind != ArgKind::array || args[j].none || args[j].array.size() == 0) continue;
      uint64_t lo2, hi2;
      args[j].array.extent(lo2, hi2);
      if (lo1 < hi2 && lo2 < hi1 && !is_inplace_pair(c, i, j))
        return arg_error(c, i, ErrorCode::aliasing,
                         "memory disjoint from argument '" + c.args[j].name + "' (#" + std::to_string(j) +
                             ") (declare the pair in inplace to allow it)",
                         "overlapping bytes [" + hex_text(lo1) + ", " + hex_text(hi1) + ") and [" + hex_text(lo2) +
                             ", " + hex_text(hi2) + ")");
    }
  }
  return Error();
}

inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

inline Error check_block(const LaunchContract& c, LaunchConfig& cfg, const DeviceLimits& dev, const FuncAttrs& fn) {
  int* b = cfg.block;
  if (b[0] == 0 && b[1] == 0 && b[2] == 0) {
    if (c.block_exact) {
      for (int d = 0; d < 3; ++d) b[d] = c.block[d];
    } else {
      int x = c.max_threads > 0 ? c.max_threads : dev.max_threads_per_block;
      if (fn.max_threads_per_block > 0 && fn.max_threads_per_block < x) x = fn.max_threads_per_block;
      b[0] = x < 256 ? x : 256;
      b[1] = b[2] = 1;
    }
  }
  auto what = [b] { return "block " + dims_text(b); };  // built only when a check fails
  if (c.block_exact && (b[0] != c.block[0] || b[1] != c.block[1] || b[2] != c.block[2]))
    return config_error(c, ErrorCode::block_size, what(), "exactly " + dims_text(c.block), dims_text(b));
  for (int d = 0; d < 3; ++d)
    if (b[d] < 1)
      return config_error(c, ErrorCode::block_size, what(), "every dimension >= 1",
                          std::to_string(b[d]) + " in " + axis_name(d));
  int64_t total = sat_mul(sat_mul(b[0], b[1]), b[2]);
  if (c.max_threads > 0 && total > c.max_threads)
    return config_error(c, ErrorCode::block_size, what(),
                        "at most " + std::to_string(c.max_threads) + " threads (contract launch bounds)",
                        std::to_string(total));
  if (total > dev.max_threads_per_block)
    return config_error(c, ErrorCode::block_size, what(),
                        "at most " + std::to_string(dev.max_threads_per_block) + " threads (device limit)",
                        std::to_string(total));
  for (int d = 0; d < 3; ++d)
    if (b[d] > dev.max_block[d])
      return config_error(c, ErrorCode::block_size, what(),
                          std::string(axis_name(d)) + " <= " + std::to_string(dev.max_block[d]) + " (device limit)",
                          std::to_string(b[d]));
  return Error();
}

inline Error check_grid(const LaunchContract& c, const ArgValue* args, LaunchConfig& cfg, const DeviceLimits& dev) {
  int64_t* g = cfg.grid;
  bool derived = g[0] == 0 && g[1] == 0 && g[2] == 0;
  if (derived) {
    if (c.grid_from_arg < 0)
      return config_error(c, ErrorCode::grid_size, "grid",
                          "an explicit grid (the contract has no grid_from: the kernel's threads range over no "
                          "argument a grid could be derived from, e.g. it writes through atomics or shared "
                          "memory); pass grid=, e.g. " + c.kernel + "(..., grid=n) or " + c.kernel +
                              "[grid, block](...)",
                          "none");
    const ArrayView& a = args[c.grid_from_arg].array;
    if (!c.grid_tile.empty()) {
      // one block per tile (flattened; axes past the tile list are one tile each), capped for persistent
      // kernels that loop over the tiles
      int64_t tiles = 1;
      for (int k = 0; k < a.ndim && k < static_cast<int>(c.grid_tile.size()); ++k)
        tiles = sat_mul(tiles, (a.shape[k] + c.grid_tile[k] - 1) / c.grid_tile[k]);
      if (c.max_blocks_per_sm > 0 && dev.sm_count > 0)
        tiles = std::min<int64_t>(tiles, sat_mul(c.max_blocks_per_sm, dev.sm_count));
      g[0] = tiles;
      g[1] = g[2] = 1;
    } else {
      for (int d = 0; d < 3; ++d) {
        int axis = a.ndim - 1 - d;
        int64_t ext = d < c.domain && axis >= 0 ? a.shape[axis] : 1;
        int64_t per = sat_mul(cfg.block[d], c.per_thread[d]);
        g[d] = d < c.domain ? (ext + per - 1) / per : 1;
      }
    }
    cfg.skip = a.size() == 0 || g[0] == 0 || g[1] == 0 || g[2] == 0;
  }
  auto what = [g] { return "grid " + dims_text(g); };
  for (int d = 0; d < 3; ++d) {
    if (g[d] < 1 && !(derived && cfg.skip && g[d] == 0))
      return config_error(c, ErrorCode::grid_size, what(), "every dimension >= 1",
                          std::to_string(g[d]) + " in " + axis_name(d));
    if (g[d] > dev.max_grid[d])
      return config_error(c, ErrorCode::grid_size, what(),
                          std::string(axis_name(d)) + " <= " + std::to_string(dev.max_grid[d]) + " (device limit)" +
                              (derived ? " for the grid derived from '" + c.args[c.grid_from_arg].name + "'" : ""),
                          std::to_string(g[d]));
  }
  return Error();
}

// A strict-domain kernel's threads own elements by their domain-dimensional index, so a launch that is
// wider along any other axis would have two threads own (and write) each element: refused.
KB_COLD inline Error strict_axis_error(const LaunchContract& c, bool block, const std::string& dims, int d,
                                       int64_t got) {
  const std::string nd = std::to_string(c.domain);
  return config_error(c, block ? ErrorCode::block_size : ErrorCode::grid_size, (block ? "block " : "grid ") + dims,
                      "extent 1 along " + std::string(axis_name(d)) + " (a " + nd + "-D kernel whose threads own " +
                          "elements by their " + nd + "-D ThreadIndex: threads that differ only along " +
                          axis_name(d) + " would write the same elements)",
                      std::to_string(got) + " along " + axis_name(d));
}

inline Error check_strict_domain(const LaunchContract& c, const LaunchConfig& cfg) {
  if (!c.strict_domain) return Error();
  for (int d = c.domain; d < 3; ++d) {
    if (cfg.block[d] != 1) return strict_axis_error(c, true, dims_text(cfg.block), d, cfg.block[d]);
    if (cfg.grid[d] != 1 && !cfg.skip) return strict_axis_error(c, false, dims_text(cfg.grid), d, cfg.grid[d]);
  }
  return Error();
}

inline Error check_smem(const LaunchContract& c, LaunchConfig& cfg, const DeviceLimits& dev, const FuncAttrs& fn) {
  if (cfg.smem == -1) cfg.smem = c.smem_exact ? c.smem : 0;
  const char* what = "dynamic shared memory";
  if (cfg.smem < 0)
    return config_error(c, ErrorCode::shared_memory, what, ">= 0 bytes", std::to_string(cfg.smem));
  if (c.smem_exact && cfg.smem != c.smem)
    return config_error(c, ErrorCode::shared_memory, what, "exactly " + std::to_string(c.smem) + " bytes",
                        std::to_string(cfg.smem));
  if (!c.smem_exact && cfg.smem > c.smem)
    return config_error(c, ErrorCode::shared_memory, what, "at most " + std::to_string(c.smem) + " bytes (contract max)",
                        std::to_string(cfg.smem));
  int64_t room = dev.smem_per_block_optin - fn.static_smem;
  if (cfg.smem > room)
    return config_error(c, ErrorCode::shared_memory, what,
                        "at most " + std::to_string(room) + " bytes (device opt-in limit " +
                            std::to_string(dev.smem_per_block_optin) + " minus " + std::to_string(fn.static_smem) +
                            " bytes of static shared memory)",
                        std::to_string(cfg.smem));
  return Error();
}

KB_COLD inline std::string sm_text(int cc) { return "sm_" + std::to_string(cc); }

// --- launch features (docs/architecture.md "Launch features") --------------------------------------
inline int64_t grid_blocks(const LaunchConfig& cfg) { return sat_mul(sat_mul(cfg.grid[0], cfg.grid[1]), cfg.grid[2]); }
inline int block_threads(const LaunchConfig& cfg) {
  return static_cast<int>(sat_mul(sat_mul(cfg.block[0], cfg.block[1]), cfg.block[2]));
}

KB_COLD inline Error cluster_grid_error(const LaunchContract& c, const LaunchConfig& cfg, const int cl[3], int d,
                                        bool compiled) {
  return config_error(c, ErrorCode::cluster, "grid " + dims_text(cfg.grid),
                      "every dimension divisible by the " + std::string(compiled ? "compiled " : "") + "cluster " +
                          dims_text(cl),
                      std::to_string(cfg.grid[d]) + " in " + axis_name(d) + ", not a multiple of " +
                          std::to_string(cl[d]));
}

KB_COLD inline Error cooperative_error(const LaunchContract& c, const LaunchConfig& cfg, int64_t limit,
                                       const std::string& why) {
  return config_error(c, ErrorCode::cooperative_grid, "cooperative grid " + dims_text(cfg.grid),
                      "at most " + std::to_string(limit) + " blocks, all co-resident (" + why + ")",
                      std::to_string(grid_blocks(cfg)) + " blocks");
}

KB_COLD inline Error cluster_schedule_error(const LaunchContract& c, const LaunchConfig& cfg, const int cl[3],
                                            const FuncAttrs& fn) {
  const int64_t n = int64_t{cl[0]} * cl[1] * cl[2];
  Error e;
  e.code = ErrorCode::cluster;
  e.message = c.kernel + ": cluster " + dims_text(cl) + " of " + std::to_string(n) + " blocks with " +
              std::to_string(fn.static_smem + cfg.smem) + " bytes shared memory per block (block " +
              dims_text(cfg.block) + ") cannot be scheduled: expected a cluster the device can co-schedule "
              "(cuOccupancyMaxActiveClusters > 0), got 0";
  return e;
}

// Clusters: sm_90+, grid divisible by the cluster, the contract's cluster equal to the one compiled into
// the function, and schedulable (occupancy). A function with compiled dims and no contract cluster is
// still checked for divisibility (the driver would refuse the launch less clearly).
inline Error check_cluster(const LaunchContract& c, const LaunchConfig& cfg, const DeviceLimits& dev,
                           const FuncAttrs& fn, Occupancy* occ) {
  const bool compiled = fn.required_cluster[0] > 0;
  if (!c.has_cluster()) {
    if (fn.cluster_must_be_set && !compiled)
      return config_error(c, ErrorCode::cluster, "cluster",
                          "a cluster in the contract (the function was compiled with .explicitcluster, so it "
                          "must be launched with one; declare cluster=(x, y, z) / KB_CLUSTER(x, y, z))",
                          "none");
    if (!compiled) return Error();
    for (int d = 0; d < 3; ++d)
      if (cfg.grid[d] % fn.required_cluster[d] != 0) return cluster_grid_error(c, cfg, fn.required_cluster, d, true);
    return Error();
  }
  if (dev.cc < 90)
    return config_error(c, ErrorCode::compute_capability, "thread-block cluster " + dims_text(c.cluster),
                        "sm_90 or newer", sm_text(dev.cc));
  if (compiled && (fn.required_cluster[0] != c.cluster[0] || fn.required_cluster[1] != c.cluster[1] ||
                   fn.required_cluster[2] != c.cluster[2]))
    return config_error(c, ErrorCode::cluster, "cluster",
                        dims_text(fn.required_cluster) + " (compiled into the function: __cluster_dims__ / "
                        ".reqnctapercluster)",
                        dims_text(c.cluster) + " (the contract's)");
  for (int d = 0; d < 3; ++d)
    if (cfg.grid[d] % c.cluster[d] != 0) return cluster_grid_error(c, cfg, c.cluster, d, false);
  if (occ != nullptr && occ->active_clusters(cfg, c.cluster) == 0) return cluster_schedule_error(c, cfg, c.cluster, fn);
  return Error();
}

// Cooperative grids: every block co-resident, at most blocks_per_sm(block, smem) x SMs (the occupancy
// API, as cuLaunchCooperativeKernel requires), or the simulator's declared limit without a driver.
inline Error check_cooperative(const LaunchContract& c, const LaunchConfig& cfg, const DeviceLimits& dev,
                               Occupancy* occ) {
  const int64_t blocks = grid_blocks(cfg);
  if (occ != nullptr && dev.sm_count > 0) {
    const int64_t per_sm = occ->blocks_per_sm(block_threads(cfg), cfg.smem);
    if (per_sm < 0) return Error();
    const int64_t limit = sat_mul(per_sm, dev.sm_count);
    if (blocks > limit)
      return cooperative_error(c, cfg, limit,
                               std::to_string(per_sm) + " per SM for a block of " + std::to_string(block_threads(cfg)) +
                                   " threads with " + std::to_string(cfg.smem) + " bytes of dynamic shared memory, x " +
                                   std::to_string(dev.sm_count) + " SMs");
    return Error();
  }
  if (occ == nullptr && dev.sim_max_coresident > 0 && blocks > dev.sim_max_coresident)
    return cooperative_error(c, cfg, dev.sim_max_coresident, "the simulator's declared limit");
  return Error();
}

inline Error check_launch_features(const LaunchContract& c, const LaunchConfig& cfg, const DeviceLimits& dev,
                                   const FuncAttrs& fn, Occupancy* occ) {
  if (cfg.skip) return Error();
  if (Error e = check_cluster(c, cfg, dev, fn, occ)) return e;
  if (c.cooperative)
    if (Error e = check_cooperative(c, cfg, dev, occ)) return e;
  return Error();
}

KB_COLD inline Error argument_count_error(const LaunchContract& c, int nargs) {
  const int n = static_cast<int>(c.args.size());
  std::string names;
  for (int k = 0; k < n; ++k) names += (k ? ", " : "") + c.args[k].name;
  Error e;
  e.code = ErrorCode::argument_count;
  e.message = c.kernel + ": expected " + std::to_string(n) + " argument" + (n == 1 ? "" : "s") + " (" + names +
              "), got " + std::to_string(nargs);
  return e;
}

}  // namespace detail

inline Error validate(const LaunchContract& c, const ArgValue* args, int nargs, LaunchConfig& cfg,
                      const DeviceLimits& dev, const FuncAttrs& fn, Occupancy* occ) {
  using namespace detail;
  cfg.skip = false;
  const int n = static_cast<int>(c.args.size());
  if (nargs != n) return argument_count_error(c, nargs);
  for (int k = 0; k < n; ++k) {
    const ArgSpec& sp = c.args[k];
    const ArgValue& v = args[k];
    if (v.none) {   // None: an absent array, allowed where the contract declares the argument optional
      if (sp.kind == ArgKind::array && sp.optional) continue;
      return arg_error(c, k, ErrorCode::argument_kind,
                       spec_text(sp) + (sp.kind == ArgKind::array ? " (not optional: declare it optional to allow None)"
                                                                  : ""),
                       "None");
    }
    if (sp.kind != v.kind)
      return arg_error(c, k, ErrorCode::argument_kind, spec_text(sp), value_text(v));
    Error e = sp.kind == ArgKind::array ? check_array(c, k, v, dev) : check_scalar_kind(c, k, v);
    if (e) return e;
  }
  for (const TensorMapSpec& t : c.tensor_maps)
    if (Error e = check_tensor_map(c, t, args[t.arg])) return e;
  for (int k = 0; k < n; ++k) {
    if (c.args[k].kind != ArgKind::scalar) continue;
    Error e = check_scalar_range(c, k, args[k]);
    if (e) return e;
  }
  for (size_t r = 0; r < c.relations.size(); ++r) {
    if (c.relations[r]->uses_launch) continue;   // checked once the grid is resolved (below)
    Error e = check_relation(c, r, args, nullptr);
    if (e) return e;
  }
  if (Error e = check_aliasing(c, args, n)) return e;
  if (Error e = check_block(c, cfg, dev, fn)) return e;
  if (Error e = check_grid(c, args, cfg, dev)) return e;
  if (Error e = check_strict_domain(c, cfg)) return e;
  if (c.has_launch_relations && !cfg.skip) {   // grid relations: against the resolved grid and block
                                                // (nothing to check when nothing runs)
    for (size_t r = 0; r < c.relations.size(); ++r) {
      if (!c.relations[r]->uses_launch) continue;
      if (Error e = check_relation(c, r, args, &cfg)) return e;
    }
  }
  if (Error e = check_smem(c, cfg, dev, fn)) return e;
  if (dev.cc < c.min_cc)
    return config_error(c, ErrorCode::compute_capability, "compute capability", sm_text(c.min_cc) + " or newer",
                        sm_text(dev.cc));
  int64_t total = sat_mul(sat_mul(cfg.block[0], cfg.block[1]), cfg.block[2]);
  if (total > fn.max_threads_per_block)
    return config_error(c, ErrorCode::block_size, "block " + dims_text(cfg.block),
                        "at most " + std::to_string(fn.max_threads_per_block) +
                            " threads (max_threads_per_block of the compiled function)",
                        std::to_string(total));
  if ((c.has_launch_features() || fn.required_cluster[0] > 0 || fn.cluster_must_be_set))
    if (Error e = check_launch_features(c, cfg, dev, fn, occ)) return e;
  return Error();
}

}  // namespace kb
