#pragma once
// Gloo process groups for ranks that are threads of one process, over loopback, met through an
// in-process store: for the c10d transport's tests.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>
#include <thread>
#include <vector>

namespace rrfp::test {

// Rank `rank` of a Gloo group of `size` over loopback, met through `store` (its constructor
// waits for the group's other members).
inline c10::intrusive_ptr<c10d::ProcessGroup> gloo_group(c10::intrusive_ptr<c10d::Store> store,
                                                         int rank, int size) {
  auto opt = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
  opt->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(std::move(store), rank, size, opt);
}

// n Gloo groups, one a rank, met through an in-process store.
inline std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> make_groups(int n) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> out(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] { out[r] = gloo_group(store, r, n); });
  for (auto& t : th)
    t.join();
  return out;
}

}  // namespace rrfp::test
