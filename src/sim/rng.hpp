#pragma once
// Counter-based randomness: every draw is a pure function of (seed, stream, keys), so a
// duration never depends on the order in which tasks run (semantics.md §5).
#include <cmath>
#include <cstdint>

namespace rrfp {

inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline std::uint64_t hash_keys(std::uint64_t seed, std::uint64_t stream, std::uint64_t a = 0,
                               std::uint64_t b = 0, std::uint64_t c = 0, std::uint64_t d = 0) {
  std::uint64_t h = mix64(seed ^ mix64(stream));
  h = mix64(h ^ a);
  h = mix64(h ^ (b + 0x1234567ULL));
  h = mix64(h ^ (c + 0x7654321ULL));
  return mix64(h ^ (d + 0xabcdefULL));
}

// Uniform in (0, 1): never exactly 0 or 1, so logs and inverse CDFs stay finite.
inline double unit_open(std::uint64_t h) {
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

// Standard normal from one 64-bit hash (Box-Muller on two 32-bit halves' worth of mixing).
inline double std_normal(std::uint64_t h) {
  const double u1 = unit_open(h), u2 = unit_open(mix64(h));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace rrfp
