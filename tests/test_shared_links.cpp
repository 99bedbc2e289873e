#include "expect_error.hpp"
#include "sim/shared_links.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>

#include "core/error.hpp"

namespace rrfp {
namespace {

constexpr std::int64_t kMs = 1'000'000;

// Ends every transfer that ends by `limit`, as the simulator's events would, noting when.
void finish_until(SharedLinks& links, std::map<int, std::int64_t>& ends,
                  std::int64_t limit = std::numeric_limits<std::int64_t>::max()) {
  while (auto at = links.next_end()) {
    if (*at > limit) return;
    for (int token : links.finish(*at))
      ends[token] = *at;
  }
}

// Runs the links to the end: the time each token ended.
std::map<int, std::int64_t> drain(SharedLinks& links) {
  std::map<int, std::int64_t> ends;
  finish_until(links, ends);
  return ends;
}

TEST(SharedLinks, TransfersAtOnceShareTheCapacity) {
  // Two 10 ms transfers from 0: one transfer's rate shared ends both at 20 ms; two at 10 ms;
  // 1.3 (two at once each at 0.65) at 10 / 0.65 ms, to the nanosecond above.
  struct Case {
    double capacity;
    std::int64_t end;
  };
  for (const Case c :
       {Case{1, 20 * kMs}, Case{2, 10 * kMs}, Case{4, 10 * kMs}, Case{1.3, 15'384'616}}) {
    SharedLinks links(c.capacity);
    links.add(0, 10 * kMs, 7);
    links.add(0, 10 * kMs, 8);
    ASSERT_EQ(links.next_end(), c.end) << c.capacity;
    EXPECT_EQ(links.finish(c.end), (std::vector<int>{7, 8})) << "both, in the order they joined";
    EXPECT_EQ(links.in_flight(), 0u);
    EXPECT_FALSE(links.next_end());
  }
}

TEST(SharedLinks, ALaterTransferSlowsTheOneInFlight) {
  // One rate shared: A (10 ms) alone for 1 ms, then A and B (10 ms) at half rate each. A's 9 ms
  // left take 18: it ends at 19 ms; B, with 1 ms left, then has the rate alone: 20 ms.
  SharedLinks links(1);
  links.add(0, 10 * kMs, 0);
  EXPECT_EQ(links.next_end(), 10 * kMs);
  links.add(1 * kMs, 10 * kMs, 1);
  EXPECT_EQ(drain(links), (std::map<int, std::int64_t>{{0, 19 * kMs}, {1, 20 * kMs}}));
  // Three at once on two transfers' worth: each at 2/3 until the 3 ms one ends at 4.5 ms; the
  // other two (6 ms and 12 ms of work, 3 ms done) then run at full rate: 7.5 ms and 13.5 ms.
  SharedLinks two(2);
  two.add(0, 3 * kMs, 0);
  two.add(0, 6 * kMs, 1);
  two.add(0, 12 * kMs, 2);
  EXPECT_EQ(drain(two),
            (std::map<int, std::int64_t>{{0, 4'500'000}, {1, 7'500'000}, {2, 13'500'000}}));
}

TEST(SharedLinks, EveryAddAndFinishChangesTheVersion) {
  SharedLinks links(1);
  const std::uint64_t v0 = links.version();
  links.add(0, kMs, 0);
  EXPECT_NE(links.version(), v0);
  const std::uint64_t v1 = links.version();
  EXPECT_EQ(links.finish(kMs), std::vector<int>{0});
  EXPECT_NE(links.version(), v1);
  EXPECT_TRUE(links.finish(2 * kMs).empty()) << "nothing in flight";
  // A transfer of no work ends where it joined.
  links.add(3 * kMs, 0, 5);
  EXPECT_EQ(links.next_end(), 3 * kMs);
}

TEST(SharedLinks, AQueueMovesOneTransferAtATime) {
  // Two 10 ms transfers into one receiver and a 10 ms one elsewhere, on one transfer's rate. The
  // queue's first and the other share the rate (each at half): both end at 20 ms; the second of
  // the queue, which took no share while it waited, then moves alone: 30 ms. Without the queue
  // the three would share it and all end at 30 ms.
  SharedLinks links(1);
  links.add(0, 10 * kMs, 0, /*queue=*/5);
  links.add(0, 10 * kMs, 1, /*queue=*/5);
  links.add(0, 10 * kMs, 2);
  EXPECT_TRUE(links.moving(5));
  EXPECT_FALSE(links.moving(6));
  EXPECT_EQ(links.next_end(), 20 * kMs);
  EXPECT_EQ(links.finish(20 * kMs), (std::vector<int>{0, 2}));
  EXPECT_TRUE(links.moving(5)) << "the second of the queue moves now";
  EXPECT_EQ(links.next_end(), 30 * kMs);
  EXPECT_EQ(links.finish(30 * kMs), std::vector<int>{1});
  EXPECT_FALSE(links.moving(5));
  // With room for all, a queue still serves in turn: 10, 20 and 30 ms; the other queue's at 10.
  SharedLinks wide(4);
  for (int i = 0; i < 3; ++i)
    wide.add(0, 10 * kMs, i, 1);
  wide.add(0, 10 * kMs, 3, 2);
  EXPECT_EQ(drain(wide), (std::map<int, std::int64_t>{
                             {0, 10 * kMs}, {1, 20 * kMs}, {2, 30 * kMs}, {3, 10 * kMs}}));
  // One that joins later waits for the one in the queue before it, not for one it preceded
  // elsewhere: A (queue 1, 10 ms) at 0, B (queue 1, 4 ms) at 2 ms ends at 14 ms.
  SharedLinks late(2);
  late.add(0, 10 * kMs, 0, 1);
  late.add(2 * kMs, 4 * kMs, 1, 1);
  EXPECT_EQ(drain(late), (std::map<int, std::int64_t>{{0, 10 * kMs}, {1, 14 * kMs}}));
}

// Capacity 4, two or more at once each at least twice as long: n 10 ms transfers from 0 end
// at 10 ms alone, 20 ms for 2 to 8 (the slowdown, where the capacity alone would give 10 ms up
// to 4), 40 ms for 16 (the capacity's share, a quarter). Only moving transfers count: two of
// one queue take 10 ms each in turn.
TEST(SharedLinks, TwoOrMoreAtOnceTakeAtLeastTheTwoSlowdown) {
  for (const auto& [n, end] : std::vector<std::pair<int, std::int64_t>>{
           {1, 10 * kMs}, {2, 20 * kMs}, {4, 20 * kMs}, {8, 20 * kMs}, {16, 40 * kMs}}) {
    SharedLinks links(4, 2);
    for (int i = 0; i < n; ++i)
      links.add(0, 10 * kMs, i);
    EXPECT_EQ(links.next_end(), end) << n << " at once";
  }
  // A (10 ms) alone for 4 ms, then with B at half rate: its 6 ms left take 12, ending at 16 ms;
  // B has moved 6 ms by then and takes its last 4 alone: 20 ms.
  SharedLinks later(4, 2);
  later.add(0, 10 * kMs, 0);
  later.add(4 * kMs, 10 * kMs, 1);
  EXPECT_EQ(drain(later), (std::map<int, std::int64_t>{{0, 16 * kMs}, {1, 20 * kMs}}));
  SharedLinks queued(4, 2);
  queued.add(0, 10 * kMs, 0, 3);
  queued.add(0, 10 * kMs, 1, 3);
  EXPECT_EQ(drain(queued), (std::map<int, std::int64_t>{{0, 10 * kMs}, {1, 20 * kMs}}));
}

TEST(SharedLinks, RefusesACapacityBelowOneTransfer) {
  EXPECT_ERROR(SharedLinks(0.5), InputError,
               "shared links: capacity must be at least 1 transfer's rate, got 0.5");
  EXPECT_ERROR(SharedLinks(0), InputError,
               "shared links: capacity must be at least 1 transfer's rate, got 0");
  EXPECT_ERROR(SharedLinks(std::nan("")), InputError,
               "shared links: capacity must be at least 1 transfer's rate, got nan");
  EXPECT_ERROR(SharedLinks(2, 0.9), InputError,
               "shared links: two_slowdown must be within [1, 64], got 0.9");
  EXPECT_ERROR(SharedLinks(2, 65), InputError,
               "shared links: two_slowdown must be within [1, 64], got 65");
  EXPECT_ERROR(SharedLinks(2, std::nan("")), InputError,
               "shared links: two_slowdown must be within [1, 64], got nan");
}

// Property, over seeds: one rate shared is work-conserving, so the last transfer ends when one
// queue serving them in turn would end (each transfer adds its work to the busy time); no
// transfer ends before its own work is done; with capacity for all, each takes its work alone.
TEST(SharedLinks, PropertyOneRateSharedKeepsTheQueuesBusyTime) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> gap(0, 4 * kMs), work(0, 10 * kMs);
    const int n = 1 + static_cast<int>(seed % 12);
    std::vector<std::int64_t> joins(n), works(n);
    std::int64_t t = 0;
    for (int i = 0; i < n; ++i) {
      t += gap(rng);
      joins[i] = t;
      works[i] = work(rng);
    }
    for (double capacity : {1.0, static_cast<double>(n)}) {
      SharedLinks links(capacity);
      std::map<int, std::int64_t> ends;
      std::int64_t queue_free = 0;
      for (int i = 0; i < n; ++i) {
        finish_until(links, ends, joins[i]);  // what ends by the next join ends first
        links.add(joins[i], works[i], i);
        queue_free = std::max(queue_free, joins[i]) + works[i];
      }
      finish_until(links, ends);
      ASSERT_EQ(ends.size(), static_cast<size_t>(n)) << "seed " << seed;
      std::int64_t last = 0;
      for (int i = 0; i < n; ++i) {
        last = std::max(last, ends[i]);
        if (capacity > 1) {
          EXPECT_EQ(ends[i], joins[i] + works[i]) << "seed " << seed << " transfer " << i;
        } else {
          EXPECT_GE(ends[i], joins[i] + works[i] - 1) << "seed " << seed << " transfer " << i;
        }
      }
      // Each rounding to the nanosecond above may add one.
      if (capacity == 1) {
        EXPECT_NEAR(last, queue_free, n) << "seed " << seed;
      }
    }
  }
}

// Property, over seeds: n equal transfers joining at once all end together, after their work
// times max(two_slowdown, n / capacity) (times 1 alone), to the nanosecond above; and a
// transfer joining later never ends before its own work is done.
TEST(SharedLinks, PropertyEqualTransfersTakeTheLargerSlowdown) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> capacity(1, 8), two(1, 4);
    std::uniform_int_distribution<std::int64_t> work(1, 10 * kMs);
    const int n = 1 + static_cast<int>(seed % 16);
    const double c = capacity(rng), t = two(rng);
    const std::int64_t w = work(rng);
    SharedLinks links(c, t);
    for (int i = 0; i < n; ++i)
      links.add(0, w, i);
    const double slowdown = n == 1 ? 1 : std::max({1.0, t, n / c});
    const std::map<int, std::int64_t> ends = drain(links);
    ASSERT_EQ(ends.size(), static_cast<size_t>(n)) << "seed " << seed;
    for (const auto& [token, end] : ends)
      EXPECT_NEAR(static_cast<double>(end), w * slowdown, 1.0)
          << "seed " << seed << " n " << n << " capacity " << c << " two " << t;
    SharedLinks later(c, t);
    later.add(0, w, 0);
    later.add(w / 3, w, 1);
    const std::map<int, std::int64_t> late = drain(later);
    EXPECT_GE(late.at(1), w / 3 + w) << "seed " << seed;
    EXPECT_GE(late.at(0), w) << "seed " << seed;
  }
}

// Property, over seeds: with capacity for every queue at once, each queue is a server taking its
// transfers in the order they joined (each ends at max(its join, the previous end) + its work),
// whatever the other queues do; transfers in no queue take their work alone.
TEST(SharedLinks, PropertyEachQueueServesInTurn) {
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> gap(0, 4 * kMs), work(0, 10 * kMs);
    std::uniform_int_distribution<int> queue(-1, 3);
    const int n = 1 + static_cast<int>(seed % 12);
    SharedLinks links(16);  // four queues and up to 12 unqueued: room for all at once
    std::map<int, std::int64_t> ends, expected;
    std::map<int, std::int64_t> queue_free;
    std::int64_t t = 0;
    for (int i = 0; i < n; ++i) {
      t += gap(rng);
      const std::int64_t w = work(rng);
      const int q = queue(rng);
      finish_until(links, ends, t);
      links.add(t, w, i, q);
      if (q < 0) {
        expected[i] = t + w;
      } else {
        expected[i] = queue_free[q] = std::max(queue_free[q], t) + w;
      }
    }
    finish_until(links, ends);
    ASSERT_EQ(ends.size(), static_cast<size_t>(n)) << "seed " << seed;
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(ends[i], expected[i], n) << "seed " << seed << " transfer " << i;
  }
}

// The fluid computed plainly, for PropertyMatchesTheFluidComputedPlainly: each transfer's work
// left brought down at every join and end, in real time (no rounding to the nanosecond).
struct Join {
  std::int64_t at, work;
  int queue;
};
std::vector<double> plain_fluid(const std::vector<Join>& joins, double capacity, double two) {
  struct Flow {
    double left;
    int token, queue;
  };
  std::vector<Flow> flows;  // in the order they joined
  std::vector<double> ends(joins.size());
  double now = 0;
  std::size_t next = 0;
  while (next < joins.size() || !flows.empty()) {
    std::vector<bool> moves(flows.size());
    std::vector<int> seen;
    for (std::size_t i = 0; i < flows.size(); ++i) {
      const int q = flows[i].queue;
      moves[i] = q < 0 || std::find(seen.begin(), seen.end(), q) == seen.end();
      if (q >= 0) seen.push_back(q);
    }
    const auto n = static_cast<double>(std::count(moves.begin(), moves.end(), true));
    const double rate = n <= 1 ? 1 : std::min({1.0, capacity / n, 1 / two});
    double end = std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < flows.size(); ++i)
      if (moves[i]) end = std::min(end, now + flows[i].left / rate);
    const bool join = next < joins.size() && static_cast<double>(joins[next].at) <= end;
    const double to = join ? static_cast<double>(joins[next].at) : end;
    for (std::size_t i = 0; i < flows.size(); ++i)
      if (moves[i]) flows[i].left -= (to - now) * rate;
    now = to;
    if (join) {
      flows.push_back(
          Flow{static_cast<double>(joins[next].work), static_cast<int>(next), joins[next].queue});
      ++next;
      continue;
    }
    std::vector<Flow> left;
    for (std::size_t i = 0; i < flows.size(); ++i) {
      if (moves[i] && flows[i].left <= 1e-6)
        ends[flows[i].token] = now;
      else
        left.push_back(flows[i]);
    }
    flows.swap(left);
  }
  return ends;
}

// Property, over seeds: transfers joining at random times, in queues or none, under a random
// capacity and two_slowdown, end when the fluid computed plainly ends them, give or take the
// nanoseconds of rounding (one an event), and finish() gives them in the order they joined.
TEST(SharedLinks, PropertyMatchesTheFluidComputedPlainly) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> gap(0, 3 * kMs), work(0, 10 * kMs);
    std::uniform_int_distribution<int> queue(-1, 3);
    const int n = 1 + static_cast<int>(seed % 40);
    const double capacity = 1 + static_cast<double>(seed % 7) / 2;
    const double two = 1 + static_cast<double>(seed % 5) / 4;
    std::vector<Join> joins;
    std::int64_t t = 0;
    for (int i = 0; i < n; ++i) {
      t += seed % 3 == 0 ? 0 : gap(rng);  // every third seed: all at once
      joins.push_back(Join{t, work(rng), seed % 2 ? queue(rng) : -1});
    }
    SharedLinks links(capacity, two);
    std::map<int, std::int64_t> ends;
    for (int i = 0; i < n; ++i) {
      finish_until(links, ends, joins[i].at);
      links.add(joins[i].at, joins[i].work, i, joins[i].queue);
    }
    while (auto at = links.next_end()) {
      const std::vector<int> done = links.finish(*at);
      EXPECT_TRUE(std::is_sorted(done.begin(), done.end())) << "seed " << seed;
      for (int token : done)
        ends[token] = *at;
    }
    const std::vector<double> want = plain_fluid(joins, capacity, two);
    ASSERT_EQ(ends.size(), static_cast<std::size_t>(n)) << "seed " << seed;
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(static_cast<double>(ends[i]), want[i], 2.0 * n + 2)
          << "seed " << seed << " transfer " << i << " of " << n;
  }
}

}  // namespace
}  // namespace rrfp
