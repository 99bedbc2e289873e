#pragma once
// The positional numbers of the benchmark programs: a word that is no whole number in range
// (`--help`, `abc`) ends the program in a line with its usage, exit 2 (atoi read it as 0, and
// the benchmark died on its own check with an uncaught exception, SIGABRT).
#include <cstdio>
#include <cstdlib>
#include <string>

namespace rrfp::bench {

// argv[at] as a whole number in [low, high], `fallback` where it is not given.
inline int positional(int argc, char** argv, int at, const char* name, int fallback, int low,
                      int high, const char* usage) {
  if (argc <= at) return fallback;
  char* end = nullptr;
  const long v = std::strtol(argv[at], &end, 10);
  if (*argv[at] == '\0' || *end != '\0' || v < low || v > high) {
    std::fprintf(stderr, "%s: %s: expected a whole number from %d to %d, got '%s'\nusage: %s\n",
                 argv[0], name, low, high, argv[at], usage);
    std::exit(2);
  }
  return static_cast<int>(v);
}

}  // namespace rrfp::bench
