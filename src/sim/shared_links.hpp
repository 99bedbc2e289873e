#pragma once
// The machine's message capacity as a fluid (processor sharing): every transfer in flight moves
// at once, each at min(1, capacity / n) of the rate one transfer has alone, n being how many are
// in flight. Processes on one host copy messages through shared memory with the same few cores
// and memory bandwidth: two copies at once both progress, each slower, rather than queueing
// behind each other. A capacity of 1 shares one transfer's rate; 2 lets two move at full rate;
// fractions (1.3: two at once each take 2 / 1.3 = 1.54x as long) are what a calibration measures
// (docs/twin.md).
//
// Two at once may cost more than the capacity says: copies in different processes share caches
// and memory bandwidth even while cores are to spare. `two_slowdown` is the least each moving
// transfer's time grows by whenever two or more move: with n moving each takes
// max(two_slowdown, n / capacity) times its time alone (1: only the capacity counts).
//
// A transfer may name a queue (the receiving process, when one thread there copies its arrivals
// one at a time, as rrfp's MPI transport does): of the transfers of one queue only the one that
// joined first moves; the others wait for it, taking no share of the capacity meanwhile.
#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

namespace rrfp {

class SharedLinks {
 public:
  // capacity >= 1, two_slowdown in [1, 64] (throws InputError otherwise).
  explicit SharedLinks(double capacity, double two_slowdown = 1);

  // A transfer of `work_ns` (its time alone) joins at `now`; `token` comes back when it ends.
  // `queue` >= 0: it waits behind the transfers of that queue that joined before it; -1: it
  // moves at once. `now` never goes back.
  void add(std::int64_t now, std::int64_t work_ns, int token, int queue = -1);
  // When the next transfer in flight ends, to the nanosecond above; nullopt: none in flight.
  std::optional<std::int64_t> next_end() const;
  // The tokens of the transfers that have ended by `now` (a next_end() time), in the order they
  // joined.
  std::vector<int> finish(std::int64_t now);
  // Changes with every add and finish: a scheduled next_end() is current while this is.
  std::uint64_t version() const { return version_; }
  std::size_t in_flight() const { return moving_.size() + waiting_; }
  std::size_t moving_count() const { return moving_.size(); }  // in_flight() less the queued
  // Whether a transfer of `queue` is moving (a queue's first transfer always is).
  bool moving(int queue) const { return moving_token(queue) >= 0; }
  // The token of the transfer of `queue` that is moving; -1: none.
  int moving_token(int queue) const;

 private:
  // Every moving transfer moves at one rate, so each is kept as the links' work done (done_)
  // at which it ends: a change of the rate moves one number, where each transfer's work left
  // was brought up to date at every add and finish, and a gpipe step of M messages on the
  // links at once took time in M squared.
  struct Moving {
    double end;         // done_ at which its work is done
    std::uint64_t seq;  // the order it joined: which ends first of equal ends, and finish()'s
    int token;
    int queue;
  };
  struct Waiting {
    double work_ns;
    std::uint64_t seq;
    int token;
  };
  struct Queue {
    int moving = -1;             // the token of the one of it that moves; -1: none
    std::deque<Waiting> behind;  // the others, in the order they joined
  };
  // The heap's order: the least end first, of equal ends the first joined.
  static bool later(const Moving& a, const Moving& b) {
    return a.end != b.end ? a.end > b.end : a.seq > b.seq;
  }
  double rate() const;  // of each moving transfer
  void advance(std::int64_t now);
  void start(double work_ns, std::uint64_t seq, int token, int queue);

  double capacity_;
  double two_slowdown_;
  std::int64_t at_ = 0;  // the time done_ is counted at
  // The work each moving transfer has done since the links were last idle, at the rate of one
  // alone (from 0 again then, which keeps it small beside a transfer's work).
  double done_ = 0;
  std::vector<Moving> moving_;  // a heap, least (end, seq) first
  std::unordered_map<int, Queue> queues_;
  std::size_t waiting_ = 0;  // transfers queued behind another of their queue
  std::uint64_t joined_ = 0;
  std::uint64_t version_ = 0;
};

}  // namespace rrfp
