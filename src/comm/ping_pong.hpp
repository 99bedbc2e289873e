#pragma once
// A transport's ping-pong (rrfp calibrate, bench_mpi, bench_c10d): the initiator sends `bytes`,
// its peer sends each message back, `iters` round trips (or, with `stream`, `iters` messages one
// way). `barrier` lines the endpoints up before and after each round (every endpoint of the world
// calls it).
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/payload.hpp"
#include "comm/spin_park.hpp"
#include "comm/transport.hpp"

namespace rrfp {

struct PingPongOptions {
  int peer = 1;
  bool initiator = true;
  std::size_t bytes = 8;
  int iters = 100;
  // true: each side's receive handler sends the reply (the transport alone, the benchmarks'
  // case; needs a transport that delivers on its own progress thread). false: the handler hands
  // the message to the calling thread, which sends the reply, as a stage's handler hands an
  // input to its compute thread (what the runtime sees; works on every transport, including
  // inproc, whose handlers run on the sending thread).
  bool reply_in_handler = false;
  // One way instead: the peer sends `iters` messages back to back and the initiator times them
  // as its calling thread takes each over, from the first to the last (the seconds a message
  // adds to a stream of them: the copy, with the latency of each hidden behind the one before).
  bool stream = false;
  bool both_ways = false;  // a stream each way at once, each side timing what it receives
  // 0: a reply sends back the buffer that arrived, and a stream sends one buffer every time.
  // n > 0: each send takes the next of n buffers of this size, written before the clock
  // starts, so that a copy reads memory the last one did not just write (what a pipeline step's
  // outputs are: the cache holds at most one 32 MiB message).
  int sources = 0;
  // The longest wait for the next message: a lost one fails the measurement instead of hanging
  // it (a handler's replies: the longest wait for the round's end).
  double deadline_s = 60;
  // The calling thread, waiting for a message, spins this long before it parks (SpinPark),
  // polling the transport meanwhile (Transport::progress): 0 parks at once. 0 to 10,000.
  int spin_us = 0;
};

// Owns the endpoint's receiver (a transport takes one for its lifetime), so one PingPong can
// run many rounds. Only one round at a time; no message may be in flight between rounds.
class PingPong {
 public:
  explicit PingPong(Transport& t);
  // Messages that arrive later are dropped: a round that failed (its deadline passed) can leave
  // the peer's late sends in flight, which the receiver delivered into the freed object.
  ~PingPong();
  PingPong(const PingPong&) = delete;
  PingPong& operator=(const PingPong&) = delete;
  // Seconds per round trip (stream: per message received) on the initiator, 0 on the peer
  // (both ways: on both). Throws Error past the deadline, InputError on bad options.
  double round(const PingPongOptions& o, const std::function<void()>& barrier);
  // A stream round's wake-ups on this side: the mean microseconds from a message's arrival
  // (its receive handler) to the calling thread taking it over, over the messages the thread
  // was asleep for (the ones that found it waiting on an empty inbox; 0: none, or not a
  // stream). What a stage's compute thread pays when an input arrives while it is idle. Read by
  // the thread that called round(), which wrote it (under the lock; handlers never touch it).
  double last_wake_us() const { return wake_us_; }

 private:
  void on_message(Message&& m);
  void reply(Message&& m);
  Payload next_source(Payload arrived);  // o_.sources: the next buffer to send, else `arrived`
  double stream(const PingPongOptions& o, std::chrono::steady_clock::duration wait, Payload sent);

  // What the transport's receiver holds: this object while it lives, and how many handlers
  // are inside it (the destructor waits for them; a lock held through a handler would deadlock
  // two handlers replying to each other over a transport that delivers on the sending thread).
  struct Link {
    std::mutex mu;
    std::condition_variable idle;
    PingPong* owner = nullptr;
    int inside = 0;
  };
  static void deliver(Link& link, Message&& m);
  Transport& t_;
  std::shared_ptr<Link> link_;
  std::mutex mu_;
  SpinPark cv_;  // the waiting thread's; spins o_.spin_us
  PingPongOptions o_;
  struct Arrival {
    Message m;
    std::int64_t at_ns;  // when its receive handler took it
  };
  std::deque<Arrival> inbox_;  // handoff mode: arrivals for the calling thread
  double wake_us_ = 0;
  bool done_ = false;
  int arrived_ = 0;  // messages this round's handler took: named when the deadline passes
  std::int64_t end_ns_ = 0;
  std::vector<Payload> sources_;  // at least o_.sources buffers of o_.bytes
  std::size_t next_ = 0;
};

}  // namespace rrfp
