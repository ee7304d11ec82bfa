// kernelbridge: the checksum stored next to every contract a module carries.
//
// Contracts are data the launch validator trusts, so a module stores, next to the contract JSON
// `__kb_contract_<k>`, its FNV-1a 64 checksum `__kb_checksum_<k>` (a u64). A reader recomputes it over
// the JSON bytes (without the terminating NUL) and refuses a contract whose checksum is missing or
// differs (bridge/fatbin.py; the AOT headers of `python -m dsl.aot`). FNV-1a 64 changes for every
// single-byte change of its input (each step is a bijection of the state), which is what bit rot and
// truncation look like; it is not a defence against a deliberate forger, who can rewrite both.
//
// `constexpr`, C++17, no includes beyond <cstdint>: KB_CONTRACT evaluates it at compile time over the
// JSON string literal it builds.
#pragma once

#include <cstdint>

namespace kb {

constexpr std::uint64_t kContractChecksumBasis = 14695981039346656037ull;  // FNV-1a 64 offset basis
constexpr std::uint64_t kContractChecksumPrime = 1099511628211ull;         // FNV 64 prime

// FNV-1a 64 of the NUL-terminated string `s`.
constexpr std::uint64_t contract_checksum(const char* s) noexcept {
  std::uint64_t h = kContractChecksumBasis;
  for (; *s != '\0'; ++s) {
    h ^= static_cast<unsigned char>(*s);
    h *= kContractChecksumPrime;
  }
  return h;
}

}  // namespace kb
