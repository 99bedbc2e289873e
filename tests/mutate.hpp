#pragma once
// The suite's mutation fuzzer: seeded edits of valid inputs (byte flips, truncation, splices,
// deletions, random runs) and hostile tokens (deep nesting, huge and non-finite numbers, binary
// bytes). Deterministic for a seed and an iteration; RRFP_FUZZ_ITERS runs longer on demand.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "sim/rng.hpp"

namespace rrfp::test {

// How many inputs a fuzz test tries: `standard` in the suite, RRFP_FUZZ_ITERS when set.
inline int fuzz_iterations(int standard) {
  const char* e = std::getenv("RRFP_FUZZ_ITERS");
  const long n = e ? std::strtol(e, nullptr, 10) : 0;
  return n > 0 ? static_cast<int>(n) : standard;
}

// Input `i` of a run seeded with `seed`: 1 to 8 edits of `s`.
inline std::string mutate(std::string s, std::uint64_t seed, int i) {
  static const std::string alphabet = "{}[]\":,.-+0123456789eEFBWstage:# \n\rxrrfp-hint=";
  static const std::string hostile[] = {"1e999",
                                        "-1e999",
                                        "NaN",
                                        "Infinity",
                                        "-Infinity",
                                        "-0",
                                        "18446744073709551616",
                                        "-9223372036854775809",
                                        "1.7976931348623157e309",
                                        "0x7f",
                                        "\"\\u0000\"",
                                        "null",
                                        std::string(200, '['),
                                        std::string(200, '{'),
                                        std::string("\0\xff\xfe", 3)};
  const int edits = 1 + static_cast<int>(hash_keys(seed, i) % 8);
  for (int e = 0; e < edits; ++e) {
    const std::uint64_t r = hash_keys(seed + 1, i, e);
    const size_t pos = s.empty() ? 0 : r % s.size();
    switch ((r >> 20) % 6) {
      case 0:
        if (!s.empty()) s[pos] = static_cast<char>(r >> 32);
        break;
      case 1:
        s.resize(pos);
        break;
      case 2:
        s.insert(pos, 1, alphabet[(r >> 40) % alphabet.size()]);
        break;
      case 3:
        if (!s.empty()) s.erase(pos, 1 + (r >> 44) % 8);
        break;
      case 4:
        s = std::string(1 + (r >> 8) % 64, static_cast<char>(r >> 48));
        break;
      case 5:
        s.insert(pos, hostile[(r >> 40) % (sizeof hostile / sizeof hostile[0])]);
        break;
    }
  }
  return s;
}

// What a fuzz run's inputs came to: each accepted, or refused with the InputError the rules ask
// for; anything else thrown fails the test, naming `what` (the input, or where it came from).
struct FuzzTally {
  int accepted = 0, refused = 0;
  template <class Fn>
  void attempt(const std::string& what, Fn&& fn) {
    try {
      fn();
      ++accepted;
    } catch (const InputError&) {
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": untyped exception '" << e.what() << "'";
    }
  }
};

}  // namespace rrfp::test
