#pragma once
// Transport conformance (after Gloo's per-transport suites): the same tests for every
// implementation of the Transport interface. A test program instantiates the suite with its
// transports' factory (threads as ranks): test_transport.cpp for inproc,
// test_c10d_transport.cpp for c10d over Gloo. Delivery may be asynchronous: every check waits,
// with a deadline, for what it expects.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <thread>

#include "comm/transport.hpp"
#include "core/error.hpp"
#include "expect_error.hpp"

namespace rrfp::test {

// Polls `done` until it holds or 10 s pass.
inline bool eventually(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

using Factory = std::function<std::vector<std::unique_ptr<Transport>>(int)>;

class Conformance : public ::testing::TestWithParam<std::pair<const char*, Factory>> {
 protected:
  std::vector<std::unique_ptr<Transport>> make(int n) { return GetParam().second(n); }
};

inline Payload bytes_of(int v) {
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
  std::atomic<bool> done{false};
  eps[1]->send(2, tag, bytes_of(12345), [&](std::exception_ptr e) {
    err = e;
    done = true;
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return got.size() == 1 && done;
  }));
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
  EXPECT_TRUE(eventually([&] { return count.load() == kSenders * kEach; }));
  EXPECT_EQ(count.load(), kSenders * kEach);
  EXPECT_EQ(sum.load(), static_cast<long>(kSenders) * kEach * (kEach - 1) / 2);
}

TEST_P(Conformance, BadDestinationThrowsAndShutdownFailsSends) {
  auto eps = make(2);
  for (auto& e : eps)
    e->set_receiver([](Message&&) {});
  // Each transport words these its own way ("destination rank 2 out of range [0, 2)", c10d's
  // "destination 2 is not a rank of the group"; "endpoint shut down", "is shut down"): the
  // suite asserts the part they share.
  EXPECT_ERROR(eps[0]->send(2, MessageTag{}, {}), InputError, "transport: destination");
  EXPECT_ERROR(eps[0]->send(-1, MessageTag{}, {}), InputError, "transport: destination");
  eps[0]->shutdown();
  eps[0]->shutdown();  // idempotent
  std::exception_ptr err;
  eps[0]->send(1, MessageTag{}, bytes_of(1), [&](std::exception_ptr e) { err = e; });
  ASSERT_NE(err, nullptr);
  EXPECT_ERROR(std::rethrow_exception(err), Error, "shut down");
}

// Sizes around every transport's inline limit, and large ones, arrive intact and in full. The
// first is large (c10d: a first message's payload under a tag of its own); then c10d's limits
// for a payload received ahead (copied out below 1 MiB, 4 MiB at most), twice each, the first
// payload still held when the second comes.
TEST_P(Conformance, PayloadsOfEverySizeArriveIntact) {
  auto eps = make(2);
  std::mutex mu;
  std::vector<Message> got;
  eps[0]->set_receiver([](Message&&) {});
  eps[1]->set_receiver([&](Message&& m) {
    std::lock_guard lk(mu);
    got.push_back(std::move(m));
  });
  const std::size_t mib = 1u << 20;
  const std::vector<std::size_t> sizes = {100'000, 0,           1,    215,     216,     217,
                                          4096,    8151,        8152, 8153,    mib - 1, mib,
                                          4 * mib, 4 * mib + 1, mib,  4 * mib, 8153};
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Payload p = Payload::allocate(sizes[i]);
    auto* b = const_cast<std::byte*>(p.data());
    for (std::size_t k = 0; k < sizes[i]; ++k)
      b[k] = static_cast<std::byte>((k * 7 + i) & 0xff);
    eps[0]->send(1, MessageTag{0, TaskId{Kind::F, 0, static_cast<int>(i)}}, std::move(p));
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(mu);
    return got.size() == sizes.size();
  }));
  for (const Message& m : got) {
    const auto i = static_cast<std::size_t>(m.tag.producer.mb);
    ASSERT_EQ(m.payload.size(), sizes[i]);
    for (std::size_t k = 0; k < sizes[i]; ++k)
      ASSERT_EQ(m.payload.data()[k], static_cast<std::byte>((k * 7 + i) & 0xff)) << sizes[i];
  }
}

}  // namespace rrfp::test
