#pragma once
// How many seeds a property test runs: the suite's 500, or RRFP_TEST_SEEDS (sanitizer builds run
// fewer).
#include <algorithm>
#include <cstdlib>

namespace rrfp::test {

inline int suite_seeds() {
  const char* e = std::getenv("RRFP_TEST_SEEDS");
  return e ? std::max(1, std::atoi(e)) : 500;
}

// A twenty-fifth of them, at least 4, for tests whose every run takes real milliseconds (the
// runtime's threads): ThreadSanitizer's run, with 20 seeds, keeps the 4 of AddressSanitizer's.
inline int runtime_seeds() {
  return std::max(4, suite_seeds() / 25);
}

}  // namespace rrfp::test
