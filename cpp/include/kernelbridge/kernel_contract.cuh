// kernelbridge: declare a CUDA C++ kernel's launch contract beside the kernel — one source of truth.
//
//   extern "C" __global__ void __launch_bounds__(1024)
//   saxpy(float a, const float* __restrict__ x, float* __restrict__ y, int n) { ... }
//
//   KB_CONTRACT(saxpy,
//               KB_BLOCK_MAX(1024),
//               KB_ARGS(KB_SCALAR(a, f32), KB_ARRAY(x, f32, 1, read), KB_ARRAY(y, f32, 1, readwrite),
//                       KB_SCALAR(n, i32)),
//               KB_REQUIRES("len(x) == n", "len(y) == n"),
//               KB_GRID_FROM(y));
//
// KB_CONTRACT does two things:
//  1. Compile-time checks against the kernel's real parameter list (through decltype(&kernel)): the
//     argument count, each scalar's C++ type against its dtype, each array parameter being a pointer
//     to the dtype, `const T*` for `read` arrays and non-const `T*` for `write`/`readwrite` ones. A
//     mismatch fails compilation with a static_assert naming kernel, argument and position. The kernel
//     must also have C linkage (`extern "C"`): the contract is looked up by the unmangled name.
//  2. Emits `extern "C" __device__ const char __kb_contract_<kernel>[]`, the contract as JSON text
//     (schema v1 of docs/architecture.md, arrays with "abi": "pointer"), and beside it
//     `extern "C" __device__ const unsigned long long __kb_checksum_<kernel>`, the FNV-1a 64 checksum
//     of that text computed at compile time (kernelbridge/contract_checksum.hpp). Both travel inside
//     the cubin/fatbin/PTX, where bridge.fatbin.embedded_contracts() and bridge.load_module() find
//     them; a contract whose checksum is missing or differs is refused there, never used.
//
// Clauses (any order, each at most once; omitted ones take the schema defaults):
//   KB_DOMAIN(d)                      1, 2 or 3 (default 1)
//   KB_STRICT_DOMAIN(d)               instead of KB_DOMAIN(d): also "strict_domain": true, so a launch must
//                                     have grid and block extent 1 past axis d (each thread owns its elements)
//   KB_BLOCK(x[, y[, z]])             exact block; use the same numbers in __launch_bounds__
//   KB_BLOCK_MAX(n)                   launch bounds: at most n threads per block
//   KB_SMEM(bytes) / KB_SMEM_MAX(bytes)   dynamic shared memory, exact / at most (default exactly 0)
//   KB_MIN_CC(cc)                     minimum compute capability, major*10+minor
//   KB_ARGS(arg, ...)                 in parameter order; each arg is one of
//       KB_SCALAR(name, dtype)
//       KB_ARRAY(name, dtype, ndim, access)           C-contiguous, aligned to the itemsize
//       KB_ARRAY_EX(name, dtype, ndim, access, layout, align)   layout: C, F or any; align in bytes
//       KB_ARRAY_OPT(name, dtype, ndim, access)       an optional array: a launch may pass None (the
//       KB_ARRAY_OPT_EX(name, dtype, ndim, access, layout, align)   kernel gets a null pointer and must
//                                     test it); relations naming it are skipped when it is None
//     dtype: bool i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64 c64 c128 and the float8/6/4 names
//     of the schema; access: read, write, readwrite.
//   KB_REQUIRES("relation", ...)      relation language of the schema (no quotes or backslashes); the
//                                     launch terms grid.x|y|z and block.x|y|z name the resolved launch
//                                     configuration, e.g. "grid.x == len(partials)"
//   KB_INPLACE((a, b), ...)           pairs of arguments allowed to overlap
//   KB_GRID_FROM(arg[, px[, py[, pz]]])   derive the grid from `arg`'s shape, px.. items per thread
//   KB_PDL()                          programmatic dependent launch: the kernel calls
//                                     cudaGridDependencySynchronize() (griddepcontrol.wait) before reading
//                                     anything a predecessor wrote; launched with programmatic stream
//                                     serialization on sm_90+ (normally on older devices)
//   KB_COOPERATIVE()                  cooperative launch (cooperative_groups::this_grid().sync()); a grid
//                                     larger than what can be co-resident is refused before launch
//   KB_CLUSTER(x[, y[, z]])           thread-block cluster dims (sm_90+), at most 8 blocks; equal to the
//                                     kernel's __cluster_dims__ when it has them
//   KB_CLUSTER_NONPORTABLE(x[, y[, z]])   the same with 9..16 blocks (non-portable cluster sizes)
//
// Numbers (block sizes, ndim, ...) must be decimal integer literals or macros expanding to one: they
// are copied into the JSON text as written (checked at compile time).
// Limits: 32 arguments, 32 relations, 32 in-place pairs, 16 clauses. Header only; needs C++17.
#pragma once

#include <cstddef>
#include <type_traits>

#include "contract_checksum.hpp"

namespace kb {
namespace contract_detail {

enum class dt {
  bool_, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64, c64, c128,
  f8e4m3fn, f8e4m3fnuz, f8e5m2, f8e5m2fnuz, f8e3m4, f8e4m3, f8e8m0fnu, f6e2m3fn, f6e3m2fn, f4e2m1fn,
  any
};
enum class acc { read, write, readwrite };

template <class T> using same_t = T;  // lets KB_CONTRACT redeclare a kernel through its type
struct no_param {};  // stands for a parameter past the end of the kernel's list

template <class F> struct fn_traits;  // only kernels (functions returning void) are accepted
template <class... P> struct fn_traits<void (*)(P...)> {
  static constexpr std::size_t arity = sizeof...(P);
};

template <std::size_t I, class... P> struct nth { using type = no_param; };
template <class H, class... T> struct nth<0, H, T...> { using type = H; };
template <std::size_t I, class H, class... T> struct nth<I, H, T...> { using type = typename nth<I - 1, T...>::type; };

template <class F, std::size_t I> struct param_at;
template <std::size_t I, class... P> struct param_at<void (*)(P...), I> { using type = typename nth<I, P...>::type; };
template <class F, std::size_t I> using param_t = typename param_at<F, I>::type;

template <class F> constexpr std::size_t arity() { return fn_traits<F>::arity; }

// Does C++ type T hold one value of dtype d? Integers by signedness and size (so `long` and
// `long long` both serve i64); f16/bf16/complex/float8 by size for class types (__half, float2, ...).
template <class T> constexpr bool holds(dt d) {
  using U = std::remove_cv_t<T>;
  constexpr bool is_bool = std::is_same<U, bool>::value;
  constexpr bool sint = std::is_integral<U>::value && std::is_signed<U>::value && !is_bool;
  constexpr bool uint = std::is_integral<U>::value && std::is_unsigned<U>::value && !is_bool;
  constexpr bool cls = std::is_class<U>::value;
  switch (d) {
    case dt::bool_: return is_bool;
    case dt::i8: return sint && sizeof(U) == 1;
    case dt::i16: return sint && sizeof(U) == 2;
    case dt::i32: return sint && sizeof(U) == 4;
    case dt::i64: return sint && sizeof(U) == 8;
    case dt::u8: return uint && sizeof(U) == 1;
    case dt::u16: return uint && sizeof(U) == 2;
    case dt::u32: return uint && sizeof(U) == 4;
    case dt::u64: return uint && sizeof(U) == 8;
    case dt::f16: case dt::bf16: return cls && sizeof(U) == 2;
    case dt::f32: return std::is_same<U, float>::value;
    case dt::f64: return std::is_same<U, double>::value;
    case dt::c64: return cls && sizeof(U) == 8;
    case dt::c128: return cls && sizeof(U) == 16;
    case dt::any: return true;
    default: return (cls || uint) && sizeof(U) == 1;  // float8/6/4 storage types
  }
}

// Scalar dtypes the launcher can pack from a Python value (as the validator of contract.hpp accepts).
constexpr bool scalar_dtype(dt d) {
  return d == dt::bool_ || d == dt::i8 || d == dt::i16 || d == dt::i32 || d == dt::i64 || d == dt::u8 ||
         d == dt::u16 || d == dt::u32 || d == dt::u64 || d == dt::f16 || d == dt::bf16 || d == dt::f32 ||
         d == dt::f64;
}

template <class T> constexpr bool scalar_ok(dt d) {
  return std::is_same<T, no_param>::value || (!std::is_pointer<T>::value && holds<T>(d));
}

template <class T> constexpr bool array_ok(dt d, acc a) {
  if (std::is_same<T, no_param>::value) return true;
  if (!std::is_pointer<T>::value) return false;
  using E = std::remove_pointer_t<T>;
  const bool is_const = std::is_const<E>::value;
  return holds<E>(d) && (a == acc::read ? is_const : !is_const);
}

// Numbers are copied into the JSON as written, so they must be plain decimal literals (or macros
// expanding to one): `KB_BLOCK(kThreads)` with a constexpr variable would put "kThreads" in the JSON.
template <std::size_t N> constexpr bool json_int(const char (&s)[N], bool allow_minus = false) {
  std::size_t i = (allow_minus && N > 2 && s[0] == '-') ? 1 : 0;
  if (i + 1 >= N) return false;
  for (; i + 1 < N; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

template <std::size_t N> constexpr bool json_plain(const char (&s)[N]) {
  for (std::size_t i = 0; i + 1 < N; ++i)
    if (s[i] == '"' || s[i] == '\\' || static_cast<unsigned char>(s[i]) < 0x20) return false;
  return true;
}

}  // namespace contract_detail
}  // namespace kb

// ---- public clause macros: each expands to a tagged tuple read by KB_CONTRACT ------------------
#define KB_DOMAIN(d) (KB__C_DOMAIN, d)
#define KB_STRICT_DOMAIN(d) (KB__C_STRICT_DOMAIN, d)   // KB_DOMAIN(d), and a launch must be 1 past d
#define KB_BLOCK(...) (KB__C_BLOCK, KB__PAD3(__VA_ARGS__))
#define KB_BLOCK_MAX(n) (KB__C_BLOCK_MAX, n)
#define KB_SMEM(bytes) (KB__C_SMEM, bytes)
#define KB_SMEM_MAX(bytes) (KB__C_SMEM_MAX, bytes)
#define KB_MIN_CC(cc) (KB__C_MIN_CC, cc)
#define KB_ARGS(...) (KB__C_ARGS, __VA_ARGS__)
#define KB_REQUIRES(...) (KB__C_REQUIRES, __VA_ARGS__)
#define KB_INPLACE(...) (KB__C_INPLACE, __VA_ARGS__)
#define KB_GRID_FROM(...) (KB__C_GRID_FROM, KB__GRID_PAD(__VA_ARGS__))
#define KB_PDL() (KB__C_PDL, 0)
#define KB_COOPERATIVE() (KB__C_COOPERATIVE, 0)
#define KB_CLUSTER(...) (KB__C_CLUSTER, KB__PAD3(__VA_ARGS__))
#define KB_CLUSTER_NONPORTABLE(...) (KB__C_CLUSTER_NONPORTABLE, KB__PAD3(__VA_ARGS__))

#define KB_SCALAR(name, dtype) (KB__A_SCALAR, name, dtype)
#define KB_ARRAY(name, dtype, ndim, access) (KB__A_ARRAY, name, dtype, ndim, access, C, 0)
#define KB_ARRAY_EX(name, dtype, ndim, access, layout, align) \
  (KB__A_ARRAY, name, dtype, ndim, access, layout, align)
#define KB_ARRAY_OPT(name, dtype, ndim, access) (KB__A_ARRAY_OPT, name, dtype, ndim, access, C, 0)
#define KB_ARRAY_OPT_EX(name, dtype, ndim, access, layout, align) \
  (KB__A_ARRAY_OPT, name, dtype, ndim, access, layout, align)

// The `extern "C"` redeclaration through the kernel's own type fails to compile ("linkage
// specification is incompatible with previous ...") when the kernel was declared without C linkage.
// The JSON literal is expanded twice (same tokens, same text): once as the contract's bytes, once as
// the argument of the compile-time checksum stored beside it.
#define KB_CONTRACT(kernel, ...)                                                                   \
  extern "C" {                                                                                     \
  __global__ ::kb::contract_detail::same_t<decltype(kernel)> kernel;                               \
  }                                                                                                \
  KB__FEC(KB__CLAUSE_CHECK, kernel, __VA_ARGS__)                                                   \
  extern "C" __device__ const char __kb_contract_##kernel[] = KB__JSON(kernel, __VA_ARGS__);       \
  extern "C" __device__ const unsigned long long __kb_checksum_##kernel =                          \
      ::std::integral_constant<unsigned long long,                                                 \
                               ::kb::contract_checksum(KB__JSON(kernel, __VA_ARGS__))>::value

#define KB__JSON(kernel, ...) \
  "{\"version\":1,\"kernel\":\"" #kernel "\"" KB__FEC(KB__CLAUSE_JSON, kernel, __VA_ARGS__) "}"

// ---- implementation --------------------------------------------------------------------------
#define KB__STR(x) KB__STR_I(x)
#define KB__STR_I(x) #x
#define KB__CAT(a, b) KB__CAT_I(a, b)
#define KB__CAT_I(a, b) a##b
#define KB__EXPAND(...) __VA_ARGS__
#define KB__NARGS(...) KB__NARGS_I(__VA_ARGS__, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)
#define KB__NARGS_I(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, \
                    n, ...) n

#define KB__PAD3(...) KB__CAT(KB__PAD3_, KB__NARGS(__VA_ARGS__))(__VA_ARGS__)
#define KB__PAD3_1(x) x, 1, 1
#define KB__PAD3_2(x, y) x, y, 1
#define KB__PAD3_3(x, y, z) x, y, z
#define KB__GRID_PAD(...) KB__CAT(KB__GRID_PAD_, KB__NARGS(__VA_ARGS__))(__VA_ARGS__)
#define KB__GRID_PAD_1(a) a, 1, 1, 1
#define KB__GRID_PAD_2(a, x) a, x, 1, 1
#define KB__GRID_PAD_3(a, x, y) a, x, y, 1
#define KB__GRID_PAD_4(a, x, y, z) a, x, y, z

#define KB__DT(d) KB__CAT(KB__DT_, d)
#define KB__DT_bool ::kb::contract_detail::dt::bool_
#define KB__DT_i8 ::kb::contract_detail::dt::i8
#define KB__DT_i16 ::kb::contract_detail::dt::i16
#define KB__DT_i32 ::kb::contract_detail::dt::i32
#define KB__DT_i64 ::kb::contract_detail::dt::i64
#define KB__DT_u8 ::kb::contract_detail::dt::u8
#define KB__DT_u16 ::kb::contract_detail::dt::u16
#define KB__DT_u32 ::kb::contract_detail::dt::u32
#define KB__DT_u64 ::kb::contract_detail::dt::u64
#define KB__DT_f16 ::kb::contract_detail::dt::f16
#define KB__DT_bf16 ::kb::contract_detail::dt::bf16
#define KB__DT_f32 ::kb::contract_detail::dt::f32
#define KB__DT_f64 ::kb::contract_detail::dt::f64
#define KB__DT_c64 ::kb::contract_detail::dt::c64
#define KB__DT_c128 ::kb::contract_detail::dt::c128
#define KB__DT_f8e4m3fn ::kb::contract_detail::dt::f8e4m3fn
#define KB__DT_f8e4m3fnuz ::kb::contract_detail::dt::f8e4m3fnuz
#define KB__DT_f8e5m2 ::kb::contract_detail::dt::f8e5m2
#define KB__DT_f8e5m2fnuz ::kb::contract_detail::dt::f8e5m2fnuz
#define KB__DT_f8e3m4 ::kb::contract_detail::dt::f8e3m4
#define KB__DT_f8e4m3 ::kb::contract_detail::dt::f8e4m3
#define KB__DT_f8e8m0fnu ::kb::contract_detail::dt::f8e8m0fnu
#define KB__DT_f6e2m3fn ::kb::contract_detail::dt::f6e2m3fn
#define KB__DT_f6e3m2fn ::kb::contract_detail::dt::f6e3m2fn
#define KB__DT_f4e2m1fn ::kb::contract_detail::dt::f4e2m1fn
#define KB__DT_any ::kb::contract_detail::dt::any
#define KB__ACC(a) KB__CAT(KB__ACC_, a)
#define KB__ACC_read ::kb::contract_detail::acc::read
#define KB__ACC_write ::kb::contract_detail::acc::write
#define KB__ACC_readwrite ::kb::contract_detail::acc::readwrite
#define KB__LAYOUT(l) KB__CAT(KB__LAYOUT_, l)
#define KB__LAYOUT_C "C"
#define KB__LAYOUT_F "F"
#define KB__LAYOUT_any "any"

// A clause tuple (TAG, payload...) dispatches to TAG_JSON / TAG_CHECK.
#define KB__CLAUSE_JSON(k, i, c) KB__CLAUSE_JSON_I(k, KB__EXPAND c)
#define KB__CLAUSE_JSON_I(k, ...) KB__CLAUSE_JSON_II(k, __VA_ARGS__)
#define KB__CLAUSE_JSON_II(k, tag, ...) tag##_JSON(k, __VA_ARGS__)
#define KB__CLAUSE_CHECK(k, i, c) KB__CLAUSE_CHECK_I(k, KB__EXPAND c)
#define KB__CLAUSE_CHECK_I(k, ...) KB__CLAUSE_CHECK_II(k, __VA_ARGS__)
#define KB__CLAUSE_CHECK_II(k, tag, ...) tag##_CHECK(k, __VA_ARGS__)

#define KB__LITERAL(k, clause, x)                                                                  \
  static_assert(::kb::contract_detail::json_int(#x), #k ": " clause " takes decimal integer literals " \
                "(they are copied into the contract JSON), got '" #x "'");
#define KB__C_DOMAIN_JSON(k, d) ",\"domain\":" #d
#define KB__C_DOMAIN_CHECK(k, d) \
  KB__LITERAL(k, "KB_DOMAIN", d) static_assert((d) >= 1 && (d) <= 3, #k ": KB_DOMAIN must be 1, 2 or 3");
#define KB__C_STRICT_DOMAIN_JSON(k, d) ",\"domain\":" #d ",\"strict_domain\":true"
#define KB__C_STRICT_DOMAIN_CHECK(k, d) \
  KB__LITERAL(k, "KB_STRICT_DOMAIN", d) static_assert((d) >= 1 && (d) <= 3, #k ": KB_STRICT_DOMAIN must be 1, 2 or 3");
#define KB__C_BLOCK_JSON(k, x, y, z) ",\"block\":{\"exact\":[" #x "," #y "," #z "]}"
#define KB__C_BLOCK_CHECK(k, x, y, z)                                                              \
  KB__LITERAL(k, "KB_BLOCK", x) KB__LITERAL(k, "KB_BLOCK", y) KB__LITERAL(k, "KB_BLOCK", z)         \
  static_assert((x) > 0 && (y) > 0 && (z) > 0 && (x) * (y) * (z) <= 1024, #k ": KB_BLOCK needs 1..1024 threads");
#define KB__C_BLOCK_MAX_JSON(k, n) ",\"block\":{\"max_threads\":" #n "}"
#define KB__C_BLOCK_MAX_CHECK(k, n) \
  KB__LITERAL(k, "KB_BLOCK_MAX", n) static_assert((n) > 0 && (n) <= 1024, #k ": KB_BLOCK_MAX must be 1..1024");
#define KB__C_SMEM_JSON(k, n) ",\"dynamic_smem\":{\"exact\":" #n "}"
#define KB__C_SMEM_CHECK(k, n) KB__LITERAL(k, "KB_SMEM", n)
#define KB__C_SMEM_MAX_JSON(k, n) ",\"dynamic_smem\":{\"max\":" #n "}"
#define KB__C_SMEM_MAX_CHECK(k, n) KB__LITERAL(k, "KB_SMEM_MAX", n)
#define KB__C_MIN_CC_JSON(k, cc) ",\"min_cc\":" #cc
#define KB__C_MIN_CC_CHECK(k, cc) KB__LITERAL(k, "KB_MIN_CC", cc)
#define KB__C_GRID_FROM_JSON(k, a, x, y, z) \
  ",\"grid_from\":{\"arg\":\"" #a "\",\"per_thread\":[" #x "," #y "," #z "]}"
#define KB__C_GRID_FROM_CHECK(k, a, x, y, z)                                                       \
  KB__LITERAL(k, "KB_GRID_FROM", x) KB__LITERAL(k, "KB_GRID_FROM", y) KB__LITERAL(k, "KB_GRID_FROM", z) \
  static_assert((x) > 0 && (y) > 0 && (z) > 0, #k ": KB_GRID_FROM items per thread must be > 0");

#define KB__C_PDL_JSON(k, unused) ",\"pdl\":true"
#define KB__C_PDL_CHECK(k, unused)
#define KB__C_COOPERATIVE_JSON(k, unused) ",\"cooperative\":true"
#define KB__C_COOPERATIVE_CHECK(k, unused)
#define KB__C_CLUSTER_JSON(k, x, y, z) ",\"cluster\":[" #x "," #y "," #z "]"
#define KB__C_CLUSTER_CHECK(k, x, y, z)                                                            \
  KB__LITERAL(k, "KB_CLUSTER", x) KB__LITERAL(k, "KB_CLUSTER", y) KB__LITERAL(k, "KB_CLUSTER", z)   \
  static_assert((x) > 0 && (y) > 0 && (z) > 0 && (x) * (y) * (z) <= 8,                              \
                #k ": KB_CLUSTER needs 1..8 blocks (KB_CLUSTER_NONPORTABLE for up to 16)");
#define KB__C_CLUSTER_NONPORTABLE_JSON(k, x, y, z) \
  ",\"cluster\":[" #x "," #y "," #z "],\"cluster_nonportable\":true"
#define KB__C_CLUSTER_NONPORTABLE_CHECK(k, x, y, z)                                                \
  KB__LITERAL(k, "KB_CLUSTER_NONPORTABLE", x) KB__LITERAL(k, "KB_CLUSTER_NONPORTABLE", y)          \
  KB__LITERAL(k, "KB_CLUSTER_NONPORTABLE", z)                                                       \
  static_assert((x) > 0 && (y) > 0 && (z) > 0 && (x) * (y) * (z) <= 16,                             \
                #k ": KB_CLUSTER_NONPORTABLE needs 1..16 blocks");

#define KB__C_ARGS_JSON(k, ...) ",\"args\":[" KB__FE(KB__ARG_JSON, k, __VA_ARGS__) "]"
#define KB__C_ARGS_CHECK(k, ...)                                                                   \
  static_assert(::kb::contract_detail::arity<decltype(&k)>() == KB__NARGS(__VA_ARGS__),             \
                #k ": KB_ARGS declares " KB__STR(KB__NARGS(__VA_ARGS__))                           \
                " argument(s) but the kernel's parameter list has a different count");              \
  KB__FE(KB__ARG_CHECK, k, __VA_ARGS__)
#define KB__ARG_JSON(k, i, a) KB__SEP_##i KB__ARG_JSON_I(k, i, KB__EXPAND a)
#define KB__ARG_JSON_I(k, i, ...) KB__ARG_JSON_II(k, i, __VA_ARGS__)
#define KB__ARG_JSON_II(k, i, tag, ...) tag##_JSON(k, i, __VA_ARGS__)
#define KB__ARG_CHECK(k, i, a) KB__ARG_CHECK_I(k, i, KB__EXPAND a)
#define KB__ARG_CHECK_I(k, i, ...) KB__ARG_CHECK_II(k, i, __VA_ARGS__)
#define KB__ARG_CHECK_II(k, i, tag, ...) tag##_CHECK(k, i, __VA_ARGS__)

#define KB__A_SCALAR_JSON(k, i, name, dtype) \
  "{\"name\":\"" #name "\",\"kind\":\"scalar\",\"dtype\":\"" #dtype "\"}"
#define KB__A_SCALAR_CHECK(k, i, name, dtype)                                                      \
  static_assert(::kb::contract_detail::scalar_dtype(KB__DT(dtype)), #k ": argument '" #name "' (#" #i \
                ") KB_SCALAR dtype must be bool, an integer, f16, bf16, f32 or f64, not " #dtype);   \
  static_assert(::kb::contract_detail::scalar_ok<::kb::contract_detail::param_t<decltype(&k), i>>( \
                    KB__DT(dtype)),                                                                \
                #k ": argument '" #name "' (#" #i ") is declared KB_SCALAR(" #name ", " #dtype      \
                ") but the kernel parameter is not a " #dtype " value");
#define KB__A_ARRAY_JSON(k, i, name, dtype, ndim, access, layout, align)                           \
  "{\"name\":\"" #name "\",\"kind\":\"array\",\"dtype\":\"" #dtype "\",\"ndim\":" #ndim            \
  ",\"layout\":\"" KB__LAYOUT(layout) "\",\"align\":" #align ",\"access\":\"" #access              \
  "\",\"abi\":\"pointer\"}"
#define KB__A_ARRAY_CHECK(k, i, name, dtype, ndim, access, layout, align)                          \
  static_assert(::kb::contract_detail::array_ok<::kb::contract_detail::param_t<decltype(&k), i>>(  \
                    KB__DT(dtype), KB__ACC(access)),                                               \
                #k ": argument '" #name "' (#" #i ") is declared a " #access " " #dtype            \
                " array, so the kernel parameter must be " KB__PTR_HINT_##access(dtype));          \
  static_assert(::kb::contract_detail::json_int(#ndim, true) && ((ndim) == -1 || ((ndim) >= 1 && (ndim) <= 8)), \
                #k ": argument '" #name "' (#" #i ") ndim must be a literal -1 or 1..8, got '" #ndim "'");  \
  KB__LITERAL(k, "KB_ARRAY_EX align", align)
#define KB__A_ARRAY_OPT_JSON(k, i, name, dtype, ndim, access, layout, align)                       \
  "{\"name\":\"" #name "\",\"kind\":\"array\",\"dtype\":\"" #dtype "\",\"ndim\":" #ndim            \
  ",\"layout\":\"" KB__LAYOUT(layout) "\",\"align\":" #align ",\"access\":\"" #access              \
  "\",\"abi\":\"pointer\",\"optional\":true}"
#define KB__A_ARRAY_OPT_CHECK(k, i, name, dtype, ndim, access, layout, align) \
  KB__A_ARRAY_CHECK(k, i, name, dtype, ndim, access, layout, align)
#define KB__PTR_HINT_read(dtype) "a pointer to const " #dtype " (const T*)"
#define KB__PTR_HINT_write(dtype) "a pointer to non-const " #dtype " (T*)"
#define KB__PTR_HINT_readwrite(dtype) "a pointer to non-const " #dtype " (T*)"

#define KB__C_REQUIRES_JSON(k, ...) ",\"requires\":[" KB__FE(KB__REL_JSON, k, __VA_ARGS__) "]"
#define KB__C_REQUIRES_CHECK(k, ...) KB__FE(KB__REL_CHECK, k, __VA_ARGS__)
#define KB__REL_JSON(k, i, s) KB__SEP_##i "\"" s "\""
#define KB__REL_CHECK(k, i, s) \
  static_assert(::kb::contract_detail::json_plain(s), #k ": KB_REQUIRES relation #" #i " contains a quote, backslash or control character");

#define KB__C_INPLACE_JSON(k, ...) ",\"inplace\":[" KB__FE(KB__PAIR_JSON, k, __VA_ARGS__) "]"
#define KB__C_INPLACE_CHECK(k, ...)
#define KB__PAIR_JSON(k, i, p) KB__SEP_##i KB__PAIR_JSON_I(KB__EXPAND p)
#define KB__PAIR_JSON_I(...) KB__PAIR_JSON_II(__VA_ARGS__)
#define KB__PAIR_JSON_II(a, b) "[\"" #a "\",\"" #b "\"]"

// KB__FE(m, d, x0, x1, ...) -> m(d, 0, x0) m(d, 1, x1) ...; KB__FEC is a second copy for clauses
// (a macro cannot expand itself, and clause lists contain argument lists).
#define KB__FE(m, d, ...) KB__CAT(KB__FE_, KB__NARGS(__VA_ARGS__))(m, d, __VA_ARGS__)
#define KB__FEC(m, d, ...) KB__CAT(KB__FEC_, KB__NARGS(__VA_ARGS__))(m, d, __VA_ARGS__)
#define KB__SEP_0
#define KB__SEP_1 ","
#define KB__SEP_2 ","
#define KB__SEP_3 ","
#define KB__SEP_4 ","
#define KB__SEP_5 ","
#define KB__SEP_6 ","
#define KB__SEP_7 ","
#define KB__SEP_8 ","
#define KB__SEP_9 ","
#define KB__SEP_10 ","
#define KB__SEP_11 ","
#define KB__SEP_12 ","
#define KB__SEP_13 ","
#define KB__SEP_14 ","
#define KB__SEP_15 ","
#define KB__SEP_16 ","
#define KB__SEP_17 ","
#define KB__SEP_18 ","
#define KB__SEP_19 ","
#define KB__SEP_20 ","
#define KB__SEP_21 ","
#define KB__SEP_22 ","
#define KB__SEP_23 ","
#define KB__SEP_24 ","
#define KB__SEP_25 ","
#define KB__SEP_26 ","
#define KB__SEP_27 ","
#define KB__SEP_28 ","
#define KB__SEP_29 ","
#define KB__SEP_30 ","
#define KB__SEP_31 ","
#define KB__FEC_1(m, d, a0) m(d, 0, a0)
#define KB__FEC_2(m, d, a0, a1) \
  KB__FEC_1(m, d, a0) m(d, 1, a1)
#define KB__FEC_3(m, d, a0, a1, a2) \
  KB__FEC_2(m, d, a0, a1) m(d, 2, a2)
#define KB__FEC_4(m, d, a0, a1, a2, a3) \
  KB__FEC_3(m, d, a0, a1, a2) m(d, 3, a3)
#define KB__FEC_5(m, d, a0, a1, a2, a3, a4) \
  KB__FEC_4(m, d, a0, a1, a2, a3) m(d, 4, a4)
#define KB__FEC_6(m, d, a0, a1, a2, a3, a4, a5) \
  KB__FEC_5(m, d, a0, a1, a2, a3, a4) m(d, 5, a5)
#define KB__FEC_7(m, d, a0, a1, a2, a3, a4, a5, a6) \
  KB__FEC_6(m, d, a0, a1, a2, a3, a4, a5) m(d, 6, a6)
#define KB__FEC_8(m, d, a0, a1, a2, a3, a4, a5, a6, a7) \
  KB__FEC_7(m, d, a0, a1, a2, a3, a4, a5, a6) m(d, 7, a7)
#define KB__FEC_9(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  KB__FEC_8(m, d, a0, a1, a2, a3, a4, a5, a6, a7) m(d, 8, a8)
#define KB__FEC_10(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  KB__FEC_9(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8) m(d, 9, a9)
#define KB__FEC_11(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  KB__FEC_10(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) m(d, 10, a10)
#define KB__FEC_12(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  KB__FEC_11(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) m(d, 11, a11)
#define KB__FEC_13(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  KB__FEC_12(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) m(d, 12, a12)
#define KB__FEC_14(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  KB__FEC_13(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) m(d, 13, a13)
#define KB__FEC_15(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  KB__FEC_14(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) m(d, 14, a14)
#define KB__FEC_16(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  KB__FEC_15(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) m(d, 15, a15)
#define KB__FE_1(m, d, a0) m(d, 0, a0)
#define KB__FE_2(m, d, a0, a1) \
  KB__FE_1(m, d, a0) m(d, 1, a1)
#define KB__FE_3(m, d, a0, a1, a2) \
  KB__FE_2(m, d, a0, a1) m(d, 2, a2)
#define KB__FE_4(m, d, a0, a1, a2, a3) \
  KB__FE_3(m, d, a0, a1, a2) m(d, 3, a3)
#define KB__FE_5(m, d, a0, a1, a2, a3, a4) \
  KB__FE_4(m, d, a0, a1, a2, a3) m(d, 4, a4)
#define KB__FE_6(m, d, a0, a1, a2, a3, a4, a5) \
  KB__FE_5(m, d, a0, a1, a2, a3, a4) m(d, 5, a5)
#define KB__FE_7(m, d, a0, a1, a2, a3, a4, a5, a6) \
  KB__FE_6(m, d, a0, a1, a2, a3, a4, a5) m(d, 6, a6)
#define KB__FE_8(m, d, a0, a1, a2, a3, a4, a5, a6, a7) \
  KB__FE_7(m, d, a0, a1, a2, a3, a4, a5, a6) m(d, 7, a7)
#define KB__FE_9(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8) \
  KB__FE_8(m, d, a0, a1, a2, a3, a4, a5, a6, a7) m(d, 8, a8)
#define KB__FE_10(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) \
  KB__FE_9(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8) m(d, 9, a9)
#define KB__FE_11(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) \
  KB__FE_10(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9) m(d, 10, a10)
#define KB__FE_12(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) \
  KB__FE_11(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10) m(d, 11, a11)
#define KB__FE_13(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) \
  KB__FE_12(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11) m(d, 12, a12)
#define KB__FE_14(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) \
  KB__FE_13(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12) m(d, 13, a13)
#define KB__FE_15(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) \
  KB__FE_14(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13) m(d, 14, a14)
#define KB__FE_16(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
  KB__FE_15(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14) m(d, 15, a15)
#define KB__FE_17(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16) \
  KB__FE_16(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) m(d, 16, a16)
#define KB__FE_18(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17) \
  KB__FE_17(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16) m(d, 17, a17)
#define KB__FE_19(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18) \
  KB__FE_18(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17) m(d, 18, a18)
#define KB__FE_20(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19) \
  KB__FE_19(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18) m(d, 19, a19)
#define KB__FE_21(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20) \
  KB__FE_20(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19) m(d, 20, a20)
#define KB__FE_22(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21) \
  KB__FE_21(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20) m(d, 21, a21)
#define KB__FE_23(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22) \
  KB__FE_22(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21) m(d, 22, a22)
#define KB__FE_24(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23) \
  KB__FE_23(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22) m(d, 23, a23)
#define KB__FE_25(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24) \
  KB__FE_24(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23) m(d, 24, a24)
#define KB__FE_26(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25) \
  KB__FE_25(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24) m(d, 25, a25)
#define KB__FE_27(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26) \
  KB__FE_26(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25) m(d, 26, a26)
#define KB__FE_28(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27) \
  KB__FE_27(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26) m(d, 27, a27)
#define KB__FE_29(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28) \
  KB__FE_28(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27) m(d, 28, a28)
#define KB__FE_30(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29) \
  KB__FE_29(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28) m(d, 29, a29)
#define KB__FE_31(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30) \
  KB__FE_30(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29) m(d, 30, a30)
#define KB__FE_32(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30, a31) \
  KB__FE_31(m, d, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, a22, a23, a24, a25, a26, a27, a28, a29, a30) m(d, 31, a31)
