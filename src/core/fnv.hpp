#pragma once
// FNV-1a, the one hash the project uses to fingerprint bytes (checkpoints, a corpus, the
// inputs every process of a job must share): cheap, stable across builds and machines.
#include <cstdint>
#include <string_view>

namespace rrfp {

inline constexpr std::uint64_t kFnv1aOffset = 1469598103934665603ULL;

// FNV-1a, continued from `h` over `bytes`.
inline std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) {
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

}  // namespace rrfp
