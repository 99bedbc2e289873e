#pragma once
// Threads that must all exist before any starts its work (peers that wait for one another, or
// a probe of how many the machine gives): where one cannot be started, none runs, and the
// refusal names it.
#include <atomic>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace rrfp {

// Runs body(i) for each i in [0, n) on a thread of its own once all n threads are started, and
// joins them. Where one cannot be started (a thread or memory limit: std::system_error, or
// std::bad_alloc for its state), those started run nothing, and thread_refused(name(i), why)
// is thrown: a peer started alone waited for the missing one (at a barrier, then
// std::terminate as its thread was destroyed unjoined). `body` must not throw.
template <class Body, class Name>
void run_together(int n, Body&& body, Name&& name) {
  std::atomic<bool> go{false}, abandoned{false};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  auto join_all = [&] {
    go.store(true);
    go.notify_all();
    for (auto& t : threads)
      t.join();
  };
  for (int i = 0; i < n; ++i) {
    try {
      threads.emplace_back([&, i] {
        go.wait(false);
        if (!abandoned.load()) body(i);
      });
    } catch (const std::exception& e) {
      abandoned.store(true);
      join_all();
      throw thread_refused(name(i), e.what());
    }
  }
  join_all();
}

}  // namespace rrfp
