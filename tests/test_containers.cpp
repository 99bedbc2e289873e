// The arbiter's ordered sets and the simulator's event queue against the standard library's,
// over seeded random operations, and the fast division against the hardware's.
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <utility>

#include <gtest/gtest.h>

#include "core/fast_divisor.hpp"
#include "core/min_set.hpp"
#include "sim/event_queue.hpp"
#include "sim/rng.hpp"

namespace rrfp::test {
namespace {

// Sizes around each level boundary of the occupancy words (64, 4096, 262144).
TEST(MinSet, AgreesWithAnOrderedSetOverRandomOperations) {
  for (const int n : {1, 2, 63, 64, 65, 4095, 4096, 4097, 262145}) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      MinSet s(n);
      std::set<int> ref;
      for (int op = 0; op < 4000; ++op) {
        const std::uint64_t h = hash_keys(seed, n, op);
        // Mostly near the low end, where erasing the minimum empties words level by level.
        const int k =
            static_cast<int>((h >> 8) % static_cast<std::uint64_t>(h & 1 ? n : std::min(n, 200)));
        if ((h >> 1) % 3 == 0) {
          s.erase(k);
          ref.erase(k);
        } else {
          s.insert(k);
          ref.insert(k);
        }
        ASSERT_EQ(s.size(), static_cast<int>(ref.size()));
        ASSERT_EQ(s.min(), ref.empty() ? -1 : *ref.begin()) << "n=" << n << " op " << op;
        ASSERT_EQ(s.contains(k), ref.count(k) == 1);
      }
      while (!ref.empty()) {  // drained by its minimum, as commits drain the ready set
        ASSERT_EQ(s.min(), *ref.begin());
        s.erase(*ref.begin());
        ref.erase(ref.begin());
      }
      EXPECT_TRUE(s.empty());
      EXPECT_EQ(s.min(), -1);
    }
  }
}

TEST(MinSet, ResetEmptiesAndResizes) {
  MinSet s(10);
  s.insert(9);
  s.reset(5000);
  EXPECT_TRUE(s.empty());
  s.insert(4999);
  EXPECT_EQ(s.min(), 4999);
}

// The adaptive rule's order: the key (minus the producer's cost), then the id (the microbatch).
using Ranked = std::pair<std::int64_t, int>;

// Few distinct keys, so that ties fall to the id, and the extremes of the key's range.
std::int64_t some_key(std::uint64_t h) {
  constexpr std::int64_t kExtremes[] = {std::numeric_limits<std::int64_t>::min(), -1, 0,
                                        std::numeric_limits<std::int64_t>::max()};
  if ((h >> 40) % 4 == 0) return kExtremes[(h >> 42) % 4];
  return -static_cast<std::int64_t>((h >> 32) % 5);
}

TEST(KeyedHeap, AgreesWithAnOrderedSetOverRandomOperations) {
  for (const int n : {1, 2, 3, 17, 1000}) {
    for (std::uint64_t seed = 1; seed <= 20; ++seed) {
      KeyedHeap heap;
      heap.reset(n);
      std::map<int, std::int64_t> keys;  // id -> key while a member
      std::set<Ranked> ref;
      for (int op = 0; op < 3000; ++op) {
        const std::uint64_t h = hash_keys(seed, 7, n, op);
        const int id = static_cast<int>(h % static_cast<std::uint64_t>(n));
        if ((h >> 20) % 5 < 2) {
          heap.erase(id);
          if (keys.count(id)) ref.erase({keys[id], id});
          keys.erase(id);
        } else if (!keys.count(id)) {
          const std::int64_t k = some_key(h);
          heap.insert(id, k);
          keys[id] = k;
          ref.insert({k, id});
        }
        ASSERT_EQ(heap.size(), static_cast<int>(ref.size()));
        ASSERT_EQ(heap.contains(id), keys.count(id) == 1);
        if (!ref.empty()) {
          ASSERT_EQ(heap.top(), ref.begin()->second) << "n=" << n << " op " << op;
          ASSERT_EQ(heap.top_key(), ref.begin()->first);
        }
      }
      while (!ref.empty()) {
        ASSERT_EQ(heap.top(), ref.begin()->second);
        heap.erase(heap.top());
        ref.erase(ref.begin());
      }
      EXPECT_TRUE(heap.empty());
    }
  }
}

TEST(KeyedHeap, InsertingAMemberAgainKeepsItsKey) {
  KeyedHeap heap;
  heap.reset(4);
  heap.insert(2, -5);
  heap.insert(1, -1);
  heap.insert(2, 0);  // ignored: 2 is a member
  EXPECT_EQ(heap.top(), 2);
  EXPECT_EQ(heap.top_key(), -5);
  heap.erase(3);  // not a member: nothing happens
  EXPECT_EQ(heap.size(), 2);
}

TEST(FastDivisor, AgreesWithDivisionOverTheIntRange) {
  std::vector<std::uint32_t> divisors = {
      1, 2, 3, 5, 7, 64, 1000, 1023, 1024, 1025, 65535, 65536, 65537, 50'000'000, 0x7fffffff};
  for (int i = 0; i < 200; ++i)
    divisors.push_back(1 + static_cast<std::uint32_t>(hash_keys(3, i) % 0x7fffffff));
  for (const std::uint32_t d : divisors) {
    const FastDivisor f(d);
    std::vector<int> ns = {0, 1, static_cast<int>(d - 1), 0x7fffffff, 0x7ffffffe};
    if (d < 0x7fffffff) ns.push_back(static_cast<int>(d));
    // Every multiple of d and its neighbours up to 2^31 for small d is too many; the ones near
    // the top of the range, where the rounding error of the magic number is largest, and a
    // random spread.
    for (int k = 1; k <= 64; ++k) {
      const std::int64_t q = 0x7fffffffLL / d - k;
      if (q < 0) break;
      for (int e = -1; e <= 1; ++e) {
        const std::int64_t n = q * d + e + (e < 0 ? d : 0);
        if (n >= 0 && n <= 0x7fffffffLL) ns.push_back(static_cast<int>(n));
      }
    }
    for (int i = 0; i < 2000; ++i)
      ns.push_back(static_cast<int>(hash_keys(4, d, i) & 0x7fffffff));
    for (const int n : ns)
      ASSERT_EQ(f.divide(n), n / static_cast<std::int64_t>(d)) << n << " / " << d;
  }
}

struct Ev {
  std::int64_t time;
  std::uint64_t seq;
  int payload;
};

// Pushes at or after the current time (negative times too), many at one instant, popped in
// (time, push order) as a standard priority queue pops them: the order the simulator's results
// rest on. Small and large heaps: a node's children full and partly filled.
TEST(EventQueue, PopsInTimeThenPushOrderAsAStandardHeap) {
  struct Later {
    bool operator()(const Ev& x, const Ev& y) const {
      return x.time != y.time ? x.time > y.time : x.seq > y.seq;
    }
  };
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    EventQueue<int> q;
    std::priority_queue<Ev, std::vector<Ev>, Later> ref;
    std::uint64_t seq = 0;
    std::int64_t now = seed % 2 ? -5000 : 0;
    const int push_share = seed % 3 == 0 ? 4 : 3;  // of 5: the heap grows or stays small
    for (int op = 0; op < 20000; ++op) {
      const std::uint64_t h = hash_keys(seed, 11, op);
      if (static_cast<int>(h % 5) < push_share || ref.empty()) {
        const Ev e{now + static_cast<std::int64_t>((h >> 8) % (h & 16 ? 3 : 1000)), seq++, op};
        q.push(e.time, e.payload);
        ref.push(e);
      } else {
        ASSERT_EQ(q.top(), ref.top().payload) << "seed " << seed << " op " << op;
        ASSERT_EQ(q.top_time(), ref.top().time);
        now = q.top_time();
        q.pop();
        ref.pop();
      }
      ASSERT_EQ(q.size(), ref.size());
    }
    while (!ref.empty()) {
      ASSERT_EQ(q.top(), ref.top().payload);
      q.pop();
      ref.pop();
    }
    EXPECT_TRUE(q.empty());
  }
}

// The extremes of time keep their order: the key's flipped sign bit.
TEST(EventQueue, OrdersTheWholeRangeOfTimes) {
  EventQueue<int> q;
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::int64_t small = std::numeric_limits<std::int64_t>::min();
  const std::int64_t times[] = {big, 0, small, -1, 1, big, small};
  for (int i = 0; i < 7; ++i)
    q.push(times[i], i);
  for (const int want : {2, 6, 3, 1, 4, 0, 5}) {
    ASSERT_EQ(q.top(), want);
    ASSERT_EQ(q.top_time(), times[want]);
    q.pop();
  }
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace rrfp::test
