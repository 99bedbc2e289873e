// C10d transports shut down: what becomes of their receives, posted on a group that lives on,
// and when their state and their hold on the group go. Ranks are threads, as in
// test_c10d_transport.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/c10d_transport.hpp"
#include "core/error.hpp"
#include "expect_error.hpp"
#include "gloo_groups.hpp"

// pthread_create, failing the n-th call from now where n = fail_thread (> 0): what a process at
// its thread limit sees.
static std::atomic<int> fail_thread{0};
extern "C" int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*f)(void*), void* arg) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  if (fail_thread.load() > 0 && fail_thread.fetch_sub(1) == 1) return EAGAIN;
  return real(t, a, f, arg);
}

namespace rrfp::test {
namespace {

// What one endpoint received, with a wait of bounded length for the next.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MessageTag> got;

  Transport::Receiver receiver() {
    return [this](Message&& m) {
      std::lock_guard lk(mu);
      got.push_back(m.tag);
      cv.notify_all();
    };
  }
  bool wait_for(std::size_t n) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, std::chrono::seconds(20), [&] { return got.size() >= n; });
  }
};

MessageTag tag(int step, int mb) {
  return MessageTag{step, TaskId{Kind::F, 0, mb}};
}

// A transport shut down with receives posted (a failed step's runtime, dropped while a peer
// still sends it that step's messages), then a new transport on the same process group, as
// rrfp.Pipeline builds one after a failed step. Gloo cannot cancel a posted receive: the
// peer's late messages matched the old transport's receives, whose buffers had been freed,
// and the new transport's messages from that peer were lost (the step after a failed one
// stalled until its timeout under torchrun).
TEST(C10dRetired, ANewTransportGetsItsMessagesAfterAPeerSentToOneShutDown) {
  auto pg = make_groups(2);
  Inbox old_inbox;
  auto sender = std::make_unique<C10dTransport>(pg[0], 0);
  auto receiver = std::make_unique<C10dTransport>(pg[1], 0);
  sender->set_receiver([](Message&&) {});
  receiver->set_receiver(old_inbox.receiver());
  // The first message comes from any source; the receiver then posts receives for rank 0's
  // next header and for a payload ahead of it.
  sender->send(1, tag(0, 0), Payload::allocate(16));
  ASSERT_TRUE(old_inbox.wait_for(1));
  receiver.reset();  // the failed step's runtime is dropped on rank 1...
  // ...while rank 0's is still sending: a header with its payload inline, and one whose
  // payload goes to the receive posted ahead. Nothing takes them now.
  sender->send(1, tag(0, 1), Payload::allocate(64));
  sender->send(1, tag(0, 2), Payload::allocate(C10dTransport::kInlineBytes + 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // for Gloo to match them
  sender.reset();
  // The next step's runtimes, on the next channel of the same groups.
  Inbox inbox;
  C10dTransport a(pg[0], 1), b(pg[1], 1);
  a.set_receiver([](Message&&) {});
  b.set_receiver(inbox.receiver());
  for (int mb = 0; mb < 3; ++mb)
    a.send(1, tag(1, mb), Payload::allocate(mb == 2 ? C10dTransport::kInlineBytes + 1 : 16));
  EXPECT_TRUE(inbox.wait_for(3)) << inbox.got.size() << " of 3 messages arrived";
  a.shutdown();
  b.shutdown();
}

std::size_t threads() {
  return static_cast<std::size_t>(
      std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                    std::filesystem::directory_iterator{}));
}

// Transports kept for the life of the process: those ATransportThatCannotStartItsThreadsSaysSo
// made with a thread started, whose peers never close. The counts below are over them, so that
// the tests pass run again in one process (--gtest_repeat).
std::size_t kept_for_good = 0;

// Polls release_closed() until it keeps `n` transports more than kept_for_good (10 s at most);
// what it keeps more then.
std::size_t kept_settles_at(std::size_t n) {
  n += kept_for_good;
  std::size_t k = C10dTransport::release_closed();
  for (int i = 0; i < 1000 && k != n; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    k = C10dTransport::release_closed();
  }
  return k - kept_for_good;
}

// Every transport shut down was kept for the life of the process, with its receives posted and
// its hold on the group: a script building and freeing pipelines (one per evaluation) kept a
// Gloo group's threads and sockets for each, until it ran out of descriptors. Each tells its
// peers it closes; once every peer has, it is freed, and the group with it. Three ranks: rank 2
// sends nothing, so its peers' receives from any source end on its close message alone; rank 0
// sends rank 1 a payload inline, one into the receive posted ahead and one under its own tag.
TEST(C10dRetired, TransportsShutDownAreFreedOnceEveryPeerHasClosedAndTheirGroupsGo) {
  ASSERT_EQ(kept_settles_at(0), 0u);  // an earlier test's, run in this process
  const std::size_t before = threads();
  auto pg = make_groups(3);
  Inbox inbox;
  std::vector<std::unique_ptr<C10dTransport>> t;
  for (auto& g : pg)
    t.push_back(std::make_unique<C10dTransport>(g, 0));
  t[0]->set_receiver(inbox.receiver());
  t[1]->set_receiver(inbox.receiver());
  t[2]->set_receiver(inbox.receiver());
  for (std::size_t n :
       {std::size_t{16}, C10dTransport::kInlineBytes + 1, C10dTransport::kAheadBytes + 1})
    t[0]->send(1, tag(0, 0), Payload::allocate(n));
  t[1]->send(0, tag(0, 1), Payload::allocate(16));
  t[0]->send(2, tag(0, 2), Payload::allocate(16));
  ASSERT_TRUE(inbox.wait_for(5));
  t[0].reset();
  t[1].reset();
  // Both wait for rank 2's close message, which has not come: kept, their receives posted.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(C10dTransport::release_closed() - kept_for_good, 2u);
  t[2].reset();
  EXPECT_EQ(kept_settles_at(0), 0u);
  for (auto& g : pg)
    EXPECT_EQ(g.use_count(), 1u) << "a transport freed still holds its group";
  pg.clear();
  EXPECT_EQ(threads(), before) << "the transports' or the groups' threads outlived them";
}

// The runtime that set a transport's receiver may be gone once shutdown() returns: shutdown()
// waits for a delivery under way, and none starts after it, although the transport's loops go
// on receiving until the peer closes. Called from inside the receiver, it refuses.
TEST(C10dRetired, ShutdownWaitsForADeliveryUnderWayAndNoneFollowsIt) {
  auto pg = make_groups(2);
  C10dTransport a(pg[0], 0), b(pg[1], 0);
  std::promise<void> entered, release;
  auto released = release.get_future().share();
  std::atomic<int> calls{0};
  std::string inside;
  b.set_receiver([&](Message&&) {
    if (calls++ > 0) return;
    try {
      b.shutdown();
    } catch (const Error& e) {
      inside = e.what();
    }
    entered.set_value();
    released.wait();
  });
  a.set_receiver([](Message&&) {});
  a.send(1, tag(0, 0), Payload::allocate(16));
  ASSERT_EQ(entered.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(inside,
            "c10d transport: shutdown() called from inside its receiver, broken handler or a "
            "send's completion; call it after the callback returns");
  auto shut = std::async(std::launch::async, [&] { b.shutdown(); });
  EXPECT_EQ(shut.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "shutdown() returned while its receiver ran";
  release.set_value();
  EXPECT_EQ(shut.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  a.send(1, tag(0, 1), Payload::allocate(16));
  a.send(1, tag(0, 2), Payload::allocate(C10dTransport::kInlineBytes + 1));
  a.shutdown();
  EXPECT_EQ(kept_settles_at(0), 0u);  // b's loop took both and a's close message
  EXPECT_EQ(calls.load(), 1);
}

// A group's channels: 127, counted per group (the processes make their transports in the same
// order); a channel out of range is refused before anything starts.
TEST(C10dRetired, EachGroupHas127ChannelsFromZero) {
  auto pg = make_groups(1);
  auto other = make_groups(1);
  for (int c = 0; c < 127; ++c)
    ASSERT_EQ(C10dTransport::next_channel(pg[0]), c);
  EXPECT_ERROR(C10dTransport::next_channel(pg[0]), Error,
               "c10d: more than 127 runtimes on one process group; make a new group");
  EXPECT_EQ(C10dTransport::next_channel(other[0]), 0);
  EXPECT_ERROR(C10dTransport(pg[0], 127), InputError,
               "c10d transport: channel must be between 0 and 126, got 127");
  EXPECT_EQ(pg[0].use_count(), 1u);
}

// A transport that could not start one of its three threads (receiver, sender, poster) aborted
// the process (a thread never started was joined) or hung in its constructor (the receiver
// waited for a receiver that would never be set). It throws an Error saying so; where a thread
// had started, the transport is kept (its receiver may wait for peers that never send).
TEST(C10dRetired, ATransportThatCannotStartItsThreadsSaysSo) {
  ASSERT_EQ(kept_settles_at(0), 0u);  // an earlier test's, run in this process
  auto pg = make_groups(2);
  for (int which = 1; which <= 3; ++which) {
    auto made = std::async(std::launch::async, [&] {
      fail_thread = which;  // the async's own thread started
      try {
        C10dTransport t(pg[0], which);
        return std::string("made");
      } catch (const Error& e) {
        return std::string(e.what());
      }
    });
    ASSERT_EQ(made.wait_for(std::chrono::seconds(10)), std::future_status::ready)
        << "thread " << which << " refused: the constructor hung";
    EXPECT_EQ(made.get(),
              "c10d transport: rank 0 could not start its threads (the process's thread limit, "
              "ulimit -u?): Resource temporarily unavailable")
        << "thread " << which << " refused";
  }
  fail_thread = 0;
  // The second and the third thread refused: the receiver had started.
  const std::size_t kept = C10dTransport::release_closed();
  EXPECT_EQ(kept - kept_for_good, 2u);
  kept_for_good = kept;
}

}  // namespace
}  // namespace rrfp::test
