// The ping-pong that calibrate times (comm/ping_pong.hpp): whose buffers the replies send, and
// the deadline of a round that does not end.
#include "comm/ping_pong.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.hpp"
#include "expect_error.hpp"
#include "runtime_helpers.hpp"

namespace rrfp {
namespace {

// One round on endpoints 0 (the initiator) and 1, each on a thread of its own, with the options
// `set` gives both; each endpoint's error, empty where its round ended.
std::array<std::string, 2> round_on_both(std::vector<std::unique_ptr<Transport>>& eps,
                                         const std::function<void(PingPongOptions&)>& set) {
  std::barrier sync(2);
  std::array<std::string, 2> err;
  std::vector<std::thread> threads;
  for (int e = 0; e < 2; ++e)
    threads.emplace_back([&, e] {
      PingPong ping(*eps[e]);
      PingPongOptions o;
      o.peer = 1 - e;
      o.initiator = e == 0;
      set(o);
      try {
        ping.round(o, [&] { sync.arrive_and_wait(); });
      } catch (const Error& x) {
        err[e] = x.what();
      }
    });
  for (auto& t : threads)
    t.join();
  return err;
}

// With sources, each side sends its own buffers in turn instead of the one that arrived: over
// threads (payloads move by reference) every message endpoint 0 sends points into one of its
// two buffers, and endpoint 1 sends only its own.
TEST(PingPongSources, RepliesTakeTheSidesOwnBuffersInTurn) {
  std::mutex mu;
  std::map<int, std::set<const std::byte*>> sent;  // by sender
  std::map<int, int> count;
  auto eps = test::faulty_transports(2, [&](int src, int&, MessageTag&, Payload& p) {
    std::lock_guard lk(mu);
    sent[src].insert(p.data());
    ++count[src];
    return true;
  });
  for (bool stream : {false, true}) {
    sent.clear();
    count.clear();
    const auto err = round_on_both(eps, [&](PingPongOptions& o) {
      o.bytes = 4096;
      o.iters = 6;
      o.stream = stream;
      o.sources = 2;
    });
    SCOPED_TRACE(stream ? "stream" : "ping-pong");
    EXPECT_EQ(err[0], "");
    EXPECT_EQ(err[1], "");
    const int sender = stream ? 1 : 0;  // a stream's peer sends
    EXPECT_EQ(count[sender], 6);
    EXPECT_EQ(sent[sender].size(), 2u) << "two buffers, in turn";
    if (!stream) {
      EXPECT_EQ(sent[1].size(), 2u);
      for (const std::byte* p : sent[1])
        EXPECT_FALSE(sent[0].count(p)) << "never sends back what arrived";
    }
  }
}

// The deadline bounds the wait for the next message: when it passes, the error says how many
// messages came, which tells a lost message (here: endpoint 1's third reply and after) from a
// slow machine.
TEST(PingPongDeadline, SaysHowManyMessagesCameWhenTheRoundDoesNotEnd) {
  std::atomic<int> replies{0};
  auto eps = test::faulty_transports(2, [&](int src, int&, MessageTag&, Payload&) {
    return src != 1 || ++replies <= 2;  // endpoint 1's later replies are lost
  });
  const auto err = round_on_both(eps, [](PingPongOptions& o) {
    o.iters = 5;
    o.deadline_s = 1.0;  // at 0.3 s a busy machine once in a while delayed a message due
  });
  EXPECT_EQ(err[0],
            "ping-pong with endpoint 1: no message within 1 s (2 of the 5 messages due here "
            "arrived)");
  EXPECT_EQ(err[1],
            "ping-pong with endpoint 0: no message within 1 s (3 of the 5 messages due here "
            "arrived)");
}

// ...not the round: a round longer than the deadline whose messages keep coming ends well (a
// calibration under --timeout 2 failed a round of 444 round trips that took longer).
// Each wait covers this side's own late send, the peer's wake-up, its late send and this
// side's wake-up: with 60 ms sends and 0.4 s, a loaded machine took the 280 ms left.
TEST(PingPongDeadline, ARoundLongerThanTheDeadlineEndsWhileMessagesCome) {
  auto eps = test::faulty_transports(2, [&](int, int&, MessageTag&, Payload&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // each send late
    return true;
  });
  const auto err = round_on_both(eps, [](PingPongOptions& o) {
    o.iters = 8;  // 16 sends of 150 ms: about 2.4 s, against a deadline of 1 s
    o.deadline_s = 1.0;
  });
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}

// Time the process spends stopped (SIGSTOP, Ctrl-Z) counts towards no deadline: endpoint 1's
// first reply comes 0.25 s after the process, stopped for 2 s within its send, is continued,
// which endpoint 0's wait of 1 s takes. It said endpoint 1 had sent nothing once continued (a
// rank of calibrate stopped past its --timeout, continued by mpirun to be ended, blamed its
// healthy peer so, beside that peer's true line).
TEST(PingPongDeadline, TimeStoppedCountsTowardsNoDeadline) {
  std::atomic<int> replies{0};
  auto eps = test::faulty_transports(2, [&](int src, int&, MessageTag&, Payload&) {
    if (src != 1 || ++replies != 1) return true;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2250);
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {  // async-signal-safe calls only
      const timespec before{0, 50'000'000}, stopped{2, 0};
      ::nanosleep(&before, nullptr);
      ::kill(parent, SIGSTOP);
      ::nanosleep(&stopped, nullptr);
      ::kill(parent, SIGCONT);
      ::_exit(0);
    }
    std::this_thread::sleep_until(until);
    int status = 0;
    if (child > 0) ::waitpid(child, &status, 0);
    return true;
  });
  const auto err = round_on_both(eps, [](PingPongOptions& o) {
    o.iters = 3;
    o.deadline_s = 1.0;
  });
  EXPECT_EQ(err[0], "");
  EXPECT_EQ(err[1], "");
}

// A round that failed its deadline can leave the peer's late sends in flight: the freed
// PingPong's receiver took them (a segfault on a loaded machine; a use after free under ASan).
TEST(PingPongLifetime, AMessageAfterThePingPongIsGoneIsDropped) {
  Hosting h = in_process_hosting(2);
  auto gone = std::make_unique<PingPong>(*h.transports[1]);
  gone.reset();
  h.transports[0]->send(1, MessageTag{}, Payload::allocate(8));  // delivered on this thread
  SUCCEED();
}

TEST(PingPongSources, RefusesMoreThanSixteenOrFewerThanNone) {
  Hosting h = in_process_hosting(2);
  PingPong ping(*h.transports[0]);
  PingPongOptions o;
  for (int n : {-1, 17}) {
    o.sources = n;
    EXPECT_ERROR(ping.round(o, [] {}), InputError,
                 "ping-pong: sources must be 0 to 16, got " + std::to_string(n))
        << n;
  }
}

TEST(PingPongStream, RefusesAReplyingHandlerAndFewerThanTwoMessages) {
  Hosting h = in_process_hosting(2);
  PingPong ping(*h.transports[0]);
  PingPongOptions o;
  o.stream = true;
  o.reply_in_handler = true;
  EXPECT_ERROR(ping.round(o, [] {}), InputError,
               "ping-pong: a stream hands its messages to the calling thread");
  o.reply_in_handler = false;
  o.iters = 1;
  EXPECT_ERROR(ping.round(o, [] {}), InputError, "ping-pong: a stream needs 2 messages or more");
}

// No message is the last of a round of none, and each arrival renewed the deadline: it waited
// for good. A deadline past about 292 years overflowed the wait's nanoseconds, and an infinite,
// NaN or negative one failed the round at once as a lost message.
TEST(PingPongOptionsRefused, NoMessagesOrADeadlineOutOfRange) {
  Hosting h = in_process_hosting(2);
  PingPong ping(*h.transports[0]);
  PingPongOptions o;
  for (int n : {0, -3}) {
    o.iters = n;
    EXPECT_ERROR(ping.round(o, [] {}), InputError,
                 "ping-pong: iters must be at least 1, got " + std::to_string(n));
  }
  o.iters = 2;
  for (double s : {0.0, -1.0, 1e10, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    o.deadline_s = s;
    EXPECT_ERROR(ping.round(o, [] {}), InputError,
                 "ping-pong: deadline_s must be above 0 and at most 1e9 (31 years), got");
  }
}

}  // namespace
}  // namespace rrfp
