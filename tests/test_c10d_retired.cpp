// A c10d transport shut down with receives posted (a failed step's runtime, dropped while a
// peer still sends it that step's messages), then a new transport on the same process group,
// as rrfp.Pipeline builds one after a failed step. Gloo cannot cancel a posted receive: the
// peer's late messages matched the old transport's receives, whose buffers had been freed,
// and the new transport's messages from that peer were lost (the step after a failed one
// stalled until its timeout under torchrun). Ranks are threads, as in test_c10d_transport.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/c10d_transport.hpp"
#include "gloo_groups.hpp"

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

}  // namespace
}  // namespace rrfp::test
