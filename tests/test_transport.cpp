// The transport conformance suite (transport_conformance.hpp) for inproc, and what only
// inproc promises: a hand-off without a copy, and sends to a shut-down peer that fail at once.
#include <limits>
#include <new>

#include "comm/buffer_pool.hpp"
#include "comm/inproc.hpp"
#include "comm/wire.hpp"
#include "expect_error.hpp"
#include "transport_conformance.hpp"

namespace rrfp::test {
namespace {

INSTANTIATE_TEST_SUITE_P(Transports, Conformance,
                         ::testing::Values(std::make_pair("inproc",
                                                          Factory(make_inproc_transports))),
                         [](const auto& info) { return std::string(info.param.first); });

// The byte-stream header carries the producer's cost in microseconds, clamped to its field.
TEST(Wire, CarriesTheProducersCost) {
  MessageTag t{3, TaskId{Kind::B, 2, 7}};
  t.cost_ns = 12'345'678;
  EXPECT_EQ(decode(encode(t, 10)).cost_ns, 12'345'000);
  t.cost_ns = -5;
  EXPECT_EQ(decode(encode(t, 10)).cost_ns, 0);
  t.cost_ns = std::int64_t{1} << 50;
  EXPECT_EQ(decode(encode(t, 10)).cost_ns, std::int64_t{INT32_MAX} * 1000);
}

// The rendezvous flags survive the header, each on its own (runtime/delivery.cpp).
TEST(Wire, CarriesTheRendezvousFlags) {
  for (int k = 0; k < 4; ++k) {
    MessageTag t{5, TaskId{Kind::F, 1, 2}};
    t.ack = k == 1;
    t.offer = k == 2;
    t.pull = k == 3;
    EXPECT_EQ(decode(encode(t, 0)), t) << k;
  }
  MessageTag t{5, TaskId{Kind::F, 1, 2}};
  t.offer = true;
  EXPECT_EQ(to_string(t), "step 5 offer of F c1 m2");
  t.offer = false;
  t.pull = true;
  EXPECT_EQ(to_string(t), "step 5 pull of F c1 m2");
}

// The pool counts a buffer it maps afresh, not one it hands out again.
TEST(BufferPool, CountsFreshMappingsNotReuses) {
  auto pool = std::make_shared<BufferPool>();
  const std::uint64_t before = BufferPool::fresh_total();
  bool fresh = false;
  {
    Payload a = pool->get(100'000, &fresh);
    EXPECT_TRUE(fresh);
  }
  EXPECT_EQ(BufferPool::fresh_total(), before + 1);
  Payload again = pool->get(120'000, &fresh);  // the same power of two: the buffer let go
  EXPECT_FALSE(fresh);
  EXPECT_EQ(BufferPool::fresh_total(), before + 1);
  Payload second = pool->get(120'000, &fresh);  // the first is still held
  EXPECT_TRUE(fresh);
  EXPECT_EQ(BufferPool::fresh_total(), before + 2);
}

// A step that holds more buffers of one size at once than the old cap of 8: the next step, the
// same, maps none, and the pool holds what the first one had out at its peak.
TEST(BufferPool, SettlesAfterOneStepWhateverItHoldsAtOnce) {
  auto pool = std::make_shared<BufferPool>();
  auto step = [&] {
    const std::uint64_t before = BufferPool::fresh_total();
    std::vector<Payload> out;
    for (int i = 0; i < 12; ++i)
      out.push_back(pool->get(4u << 20));
    for (int i = 0; i < 20; ++i)
      out.push_back(pool->get(100'000 + i));  // one size: 128 KiB
    return BufferPool::fresh_total() - before;
  };
  EXPECT_EQ(step(), 32u);
  EXPECT_EQ(pool->held_bytes(), 12 * (4u << 20) + 20 * (128u << 10));
  EXPECT_EQ(step(), 0u);
  EXPECT_EQ(step(), 0u);
  EXPECT_EQ(pool->held_bytes(), 12 * (4u << 20) + 20 * (128u << 10));
}

// A request takes the smallest free buffer of its size or up to 4x larger, not one 8x larger,
// and the buffer goes back under its own size: payloads of varying sizes share buffers.
TEST(BufferPool, ARequestTakesAFreeBufferUpToFourTimesItsSize) {
  auto pool = std::make_shared<BufferPool>();
  const std::uint64_t before = BufferPool::fresh_total();
  {
    Payload a = pool->get(1u << 20);  // 1 MiB
    Payload b = pool->get(4u << 20);  // 4 MiB
  }
  EXPECT_EQ(BufferPool::fresh_total(), before + 2);
  {
    Payload x = pool->get(300'000);   // 512 KiB: takes the 1 MiB buffer
    Payload y = pool->get(300'000);   // then the 4 MiB one (8x) is too large: a fresh one
    Payload z = pool->get(3u << 20);  // 4 MiB: the 4 MiB buffer
    EXPECT_EQ(x.size(), 300'000u);
    EXPECT_EQ(BufferPool::fresh_total(), before + 3);
  }
  EXPECT_EQ(pool->held_bytes(), (1u << 20) + (4u << 20) + (512u << 10));
  Payload w = pool->get(5u << 20);  // 8 MiB: nothing that large is free
  EXPECT_EQ(BufferPool::fresh_total(), before + 4);
}

// Buffers mapped ahead are held free, counted by held_bytes() and not as fresh; requests up to the
// reserved count map none, one more maps one; a second reserve adds only what is missing.
TEST(BufferPool, ReservedBuffersServeRequestsWithoutMapping) {
  auto pool = std::make_shared<BufferPool>();
  const std::uint64_t before = BufferPool::fresh_total();
  pool->reserve(300'000, 3, true);  // 512 KiB each
  EXPECT_EQ(BufferPool::fresh_total(), before);
  EXPECT_EQ(pool->held_bytes(), 3 * (512u << 10));
  pool->reserve(400'000, 2, false);  // the same size: three are there already
  EXPECT_EQ(pool->held_bytes(), 3 * (512u << 10));
  {
    std::vector<Payload> out;
    for (int i = 0; i < 3; ++i)
      out.push_back(pool->get(260'000 + 1000 * i));
    EXPECT_EQ(BufferPool::fresh_total(), before);
    EXPECT_EQ(pool->held_bytes(), 0u);
    out.push_back(pool->get(300'000));
    EXPECT_EQ(BufferPool::fresh_total(), before + 1);
  }
  EXPECT_EQ(pool->held_bytes(), 4 * (512u << 10));
  EXPECT_EQ(BufferPool::capacity_of(1), 64u << 10);
  EXPECT_EQ(BufferPool::capacity_of((1u << 20) + 1), 2u << 20);
}

TEST(Inproc, HandsOffWithoutACopy) {
  auto eps = make_inproc_transports(2);
  const std::byte* seen = nullptr;
  eps[1]->set_receiver([&](Message&& m) { seen = m.payload.data(); });
  Payload p = Payload::allocate(1 << 20);
  const std::byte* sent = p.data();
  eps[0]->send(1, MessageTag{}, std::move(p));
  EXPECT_EQ(seen, sent);
}

TEST(Inproc, SendsToAShutDownPeerFail) {
  auto eps = make_inproc_transports(2);
  int delivered = 0;
  eps[1]->set_receiver([&](Message&&) { ++delivered; });
  eps[1]->shutdown();
  std::exception_ptr err;
  eps[0]->send(1, MessageTag{}, bytes_of(1), [&](std::exception_ptr e) { err = e; });
  EXPECT_EQ(delivered, 0);
  ASSERT_NE(err, nullptr);
  EXPECT_ERROR(std::rethrow_exception(err), Error,
               "inproc transport: rank 0 cannot send step 0 F c0 m0 to rank 1: endpoint shut down");
}

// A receiver runs under the fabric's shared lock: shutdown() or set_receiver() called from one
// took the lock exclusively on the same thread and waited for itself for good. Refused; the
// error reaches the sending call, whose thread ran the receiver.
TEST(Inproc, ShutdownFromInsideAReceiverIsRefusedNotAHang) {
  auto eps = make_inproc_transports(2);
  Transport* mine = eps[1].get();
  eps[1]->set_receiver([&](Message&&) { mine->shutdown(); });
  EXPECT_ERROR(eps[0]->send(1, MessageTag{}, bytes_of(1)), Error,
               "inproc transport: shutdown() called from inside a receiver of its transports");
  eps[1]->shutdown();  // after the receiver returned: as before
}

// A size no power of two above holds: bit_ceil's result was undefined, and the payload of
// SIZE_MAX bytes came on a buffer of 64 KiB.
TEST(BufferPool, ASizeNoBufferCanHoldIsRefused) {
  auto pool = std::make_shared<BufferPool>();
  EXPECT_THROW(pool->get(std::numeric_limits<std::size_t>::max()), std::bad_alloc);
  EXPECT_THROW(BufferPool::capacity_of((std::size_t{1} << 63) + 1), std::bad_alloc);
  EXPECT_EQ(BufferPool::capacity_of(std::size_t{1} << 63), std::size_t{1} << 63);
}

}  // namespace
}  // namespace rrfp::test
