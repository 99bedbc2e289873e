#pragma once
// FNV-1a, the one hash the project uses to fingerprint bytes (checkpoints, a corpus, the
// inputs every process of a job must share): cheap, stable across builds and machines.
#include <cstdint>
#include <string_view>

namespace rrfp {

// One digit short of FNV-1a's published offset basis (14695981039346656037): kept, since every
// checkpoint's checksum and every recorded corpus hash was made from it (changing it would
// refuse them all as corrupt). A stock FNV-1a tool computes other values.
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
