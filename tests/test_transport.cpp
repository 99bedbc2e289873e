// Transport conformance (after Gloo's per-transport suites): the same tests for every
// implementation of the Transport interface, here for inproc (threads). The MPI transport,
// one endpoint per process, has the same contract checked in test_mpi_transport.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "comm/inproc.hpp"
#include "core/error.hpp"

namespace rrfp::test {
namespace {

using Factory = std::function<std::vector<std::unique_ptr<Transport>>(int)>;

class Conformance : public ::testing::TestWithParam<std::pair<const char*, Factory>> {
 protected:
  std::vector<std::unique_ptr<Transport>> make(int n) { return GetParam().second(n); }
};

Payload bytes_of(int v) {
  return Payload::copy_of(std::as_bytes(std::span<const int>(&v, 1)));
}

TEST_P(Conformance, DeliversTagSourceAndBytes) {
  auto eps = make(3);
  std::mutex mu;
  std::vector<Message> got;
  eps[2]->set_receiver([&](Message&& m) {
    std::lock_guard lk(mu);
    got.push_back(std::move(m));
  });
  const MessageTag tag{4, TaskId{Kind::B, 3, 9}};
  std::exception_ptr err = std::make_exception_ptr(1);
  eps[1]->send(2, tag, bytes_of(12345), [&](std::exception_ptr e) { err = e; });
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(err, nullptr);
  EXPECT_EQ(got[0].src, 1);
  EXPECT_EQ(got[0].tag, tag);
  ASSERT_EQ(got[0].payload.size(), sizeof(int));
  EXPECT_EQ(*reinterpret_cast<const int*>(got[0].payload.data()), 12345);
  EXPECT_EQ(eps[0]->rank(), 0);
  EXPECT_EQ(eps[2]->size(), 3);
}

TEST_P(Conformance, ConcurrentSendersLoseNothing) {
  constexpr int kSenders = 4, kEach = 500;
  auto eps = make(kSenders + 1);
  std::atomic<long> sum{0};
  std::atomic<int> count{0};
  eps[kSenders]->set_receiver([&](Message&& m) {
    sum += *reinterpret_cast<const int*>(m.payload.data());
    ++count;
  });
  std::vector<std::thread> th;
  for (int s = 0; s < kSenders; ++s)
    th.emplace_back([&, s] {
      for (int i = 0; i < kEach; ++i)
        eps[s]->send(kSenders, MessageTag{0, TaskId{Kind::F, s, i}}, bytes_of(i));
    });
  for (auto& t : th)
    t.join();
  EXPECT_EQ(count.load(), kSenders * kEach);
  EXPECT_EQ(sum.load(), static_cast<long>(kSenders) * kEach * (kEach - 1) / 2);
}

TEST_P(Conformance, BadDestinationThrowsAndShutdownFailsSends) {
  auto eps = make(2);
  int delivered = 0;
  eps[1]->set_receiver([&](Message&&) { ++delivered; });
  EXPECT_THROW(eps[0]->send(2, MessageTag{}, {}), InputError);
  EXPECT_THROW(eps[0]->send(-1, MessageTag{}, {}), InputError);
  eps[1]->shutdown();
  eps[1]->shutdown();  // idempotent
  std::exception_ptr err;
  eps[0]->send(1, MessageTag{}, bytes_of(1), [&](std::exception_ptr e) { err = e; });
  EXPECT_EQ(delivered, 0);
  ASSERT_NE(err, nullptr);
  EXPECT_THROW(std::rethrow_exception(err), Error);
}

INSTANTIATE_TEST_SUITE_P(Transports, Conformance,
                         ::testing::Values(std::make_pair("inproc",
                                                          Factory(make_inproc_transports))),
                         [](const auto& info) { return std::string(info.param.first); });

TEST(Inproc, HandsOffWithoutACopy) {
  auto eps = make_inproc_transports(2);
  const std::byte* seen = nullptr;
  eps[1]->set_receiver([&](Message&& m) { seen = m.payload.data(); });
  Payload p = Payload::allocate(1 << 20);
  const std::byte* sent = p.data();
  eps[0]->send(1, MessageTag{}, std::move(p));
  EXPECT_EQ(seen, sent);
}

}  // namespace
}  // namespace rrfp::test
