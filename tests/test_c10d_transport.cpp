// The transport conformance suite (transport_conformance.hpp) for the c10d transport, ranks as
// threads: one Gloo process group per thread, met through an in-process store, over loopback.
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "comm/c10d_transport.hpp"
#include "transport_conformance.hpp"

namespace rrfp::test {
namespace {

std::vector<std::unique_ptr<Transport>> make_c10d_transports(int n) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::unique_ptr<Transport>> out(n);
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {  // every rank's constructor waits for the others
      auto opt = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
      opt->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, n, opt);
      out[r] = std::make_unique<C10dTransport>(pg);
    });
  for (auto& t : th)
    t.join();
  return out;
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance,
                         ::testing::Values(std::make_pair("c10d_gloo",
                                                          Factory(make_c10d_transports))),
                         [](const auto& info) { return std::string(info.param.first); });

}  // namespace
}  // namespace rrfp::test
