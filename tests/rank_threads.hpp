#pragma once
// Threads standing in for the ranks of a job (with dist/local_job.hpp): runs fn(rank) on
// `world` threads and joins them all. A bad-input error is rethrown as it is (every rank hits the
// same one); any other ends in one Error naming every failed rank's message, in rank order.
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace rrfp::test {

inline void on_every_rank(int world, const std::function<void(int rank)>& fn) {
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> th;
  for (int r = 0; r < world; ++r)
    th.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : th)
    t.join();
  std::string all;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    if (!first) first = errors[r];
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      all += " [rank " + std::to_string(r) + ": " + e.what() + "]";
    }
  }
  if (!first) return;
  try {
    std::rethrow_exception(first);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception&) {
    throw Error("local job failed:" + all);
  }
}

}  // namespace rrfp::test
