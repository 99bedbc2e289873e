#pragma once
// Contiguous ranges of a loop on threads of their own, for work whose every item is a pure
// function of its index (the workload's draws, sim/rng.hpp): the result is the serial loop's.
#include <algorithm>
#include <exception>
#include <system_error>
#include <thread>
#include <vector>

#include "core/cores.hpp"

namespace rrfp {

// Tasks a thread takes at least, drawn or bounded: a thread's start costs about as much as a
// few hundred draws, and a range of this size takes milliseconds.
inline constexpr int kMinTasksPerThread = 1 << 15;

// The cores this process may run on (at least 1), asked once: a sweep of small points asks 8
// times a point.
inline int cores() {
  static const int n = usable_cores();
  return n;
}

// Into how many contiguous ranges to split n items: one per core (at most 8), each of at least
// `grain` items; 1, the calling thread alone, below 2 * grain, where a thread's start costs more
// than the work.
inline int parallel_parts(int n, int grain) {
  return std::clamp(n / std::max(grain, 1), 1, std::min(cores(), 8));
}

// Runs f(part, begin, end) for each of `parts` contiguous ranges of [0, n), part 0 on the
// calling thread and each other on a thread of its own. f must be safe to run on disjoint
// ranges at once. An exception from a range is rethrown here, the lowest range's first: the one
// the serial loop would have met first.
template <class F>
void parallel_ranges(int n, int parts, F&& f) {
  auto range = [&](int k) {
    f(k, static_cast<int>(static_cast<long long>(n) * k / parts),
      static_cast<int>(static_cast<long long>(n) * (k + 1) / parts));
  };
  if (parts <= 1) return range(0);
  std::vector<std::exception_ptr> error(parts);
  auto run = [&](int k) {
    try {
      range(k);
    } catch (...) {
      error[k] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(parts - 1);
  for (int k = 1; k < parts; ++k) {
    try {
      threads.emplace_back(run, k);
    } catch (const std::system_error&) {
      run(k);  // no thread to be had (a process limit): the range runs here instead
    }
  }
  run(0);
  for (std::thread& t : threads)
    t.join();
  for (const std::exception_ptr& e : error)
    if (e) std::rethrow_exception(e);
}

}  // namespace rrfp
