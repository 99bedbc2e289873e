// SpinPark (comm/spin_park.hpp): no wake-up is lost whether the waiter spins, parks or both;
// a waiter lent to a transport takes the arrival on its own thread; a spinning waiter parks
// once its spin is over; a deadline ends a wait that nothing notifies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <random>
#include <thread>

#include "comm/spin_park.hpp"
#include "seeds.hpp"

namespace rrfp::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A producer hands 300 items over with random pauses (none, a spin, a sleep) while the
// consumer waits with each spin length: every item arrives, in order, and no wait lasts until
// its 5 s deadline (what a lost wake-up does).
TEST(SpinPark, LosesNoWakeUpWhetherItSpinsOrParks) {
  for (int seed = 0; seed < runtime_seeds(); ++seed)
    for (std::int64_t spin_ns : {0, 2'000, 200'000}) {
      std::mutex mu;
      SpinPark cv(spin_ns);
      std::deque<int> q;
      constexpr int kItems = 300;
      std::thread producer([&, seed] {
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int i = 0; i < kItems; ++i) {
          const unsigned pause = rng() % 3;
          if (pause == 1) {
            const auto until = Clock::now() + std::chrono::microseconds(rng() % 20);
            while (Clock::now() < until) {
            }
          } else if (pause == 2) {
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
          }
          std::lock_guard lk(mu);
          q.push_back(i);
          cv.notify_all();
        }
      });
      int next = 0;
      bool lost = false;
      std::unique_lock lk(mu);
      while (next < kItems) {
        const auto deadline = Clock::now() + 5s;
        cv.wait_until(lk, deadline, [&] { return !q.empty(); });
        // Only the deadline ended the wait: the notify did not wake it.
        if ((lost = Clock::now() >= deadline)) break;
        ASSERT_EQ(q.front(), next) << "seed " << seed << " spin " << spin_ns;
        q.pop_front();
        ++next;
      }
      lk.unlock();
      producer.join();
      ASSERT_FALSE(lost) << "seed " << seed << " spin " << spin_ns
                         << ": a wake-up was lost at item " << next;
      ASSERT_EQ(next, kItems) << "seed " << seed << " spin " << spin_ns;
    }
}

// The waiter lent to a "transport" whose fifth poll delivers, as a handler does (under the
// lock, then a notify): the item is taken on the waiting thread, and the wait ends with it.
// Without a spin the waiter never polls.
TEST(SpinPark, ALentWaiterTakesTheArrivalOnItsOwnThread) {
  std::mutex mu;
  SpinPark cv;
  std::deque<int> q;
  int polls = 0;
  std::thread::id delivered_on;
  cv.set_spin(std::int64_t{10} * 1'000'000'000, [&] {
    if (++polls != 5) return false;
    std::lock_guard lk(mu);
    q.push_back(7);
    delivered_on = std::this_thread::get_id();
    cv.notify_all();
    return true;
  });
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_until(lk, Clock::now() + 20s, [&] { return !q.empty(); }));
  EXPECT_EQ(q.front(), 7);
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(delivered_on, std::this_thread::get_id());

  cv.set_spin(0, [&] { return ++polls, false; });
  polls = 0;
  EXPECT_FALSE(cv.wait_until(lk, Clock::now() + 5ms, [] { return false; }));
  EXPECT_EQ(polls, 0);
}

// Once its spin is over the waiter parks: its polls stop (the notifier waits for them to stop
// for 50 ms, at most 20 s), and the notify then wakes it from the condition variable.
TEST(SpinPark, ParksOnceItsSpinIsOverAndANotifyWakesIt) {
  std::mutex mu;
  SpinPark cv;
  std::atomic<int> polls{0};
  cv.set_spin(1'000'000, [&] { return polls.fetch_add(1), false; });
  bool ready = false, still = false;
  std::thread notifier([&] {
    int seen = -1;
    const auto give_up = Clock::now() + 20s;
    while (Clock::now() < give_up) {
      const int now = polls.load();
      if (now > 0 && now == seen) break;
      seen = now;
      std::this_thread::sleep_for(50ms);
    }
    std::lock_guard lk(mu);
    still = Clock::now() >= give_up;
    ready = true;
    cv.notify_all();
  });
  std::unique_lock lk(mu);
  const bool woke = cv.wait_until(lk, Clock::now() + 60s, [&] { return ready; });
  lk.unlock();
  notifier.join();
  EXPECT_TRUE(woke);
  EXPECT_FALSE(still) << "the waiter still polled after 20 s of a 1 ms spin";
  EXPECT_GT(polls.load(), 0);
}

// Nothing notifies: the wait ends at its deadline, false, after its spin and its park.
TEST(SpinPark, ADeadlineEndsAWaitNothingNotifies) {
  std::mutex mu;
  SpinPark cv(1'000'000);
  std::unique_lock lk(mu);
  const auto start = Clock::now();
  EXPECT_FALSE(cv.wait_until(lk, start + 30ms, [] { return false; }));
  EXPECT_GE(Clock::now() - start, 30ms);
  EXPECT_TRUE(lk.owns_lock());
}

}  // namespace
}  // namespace rrfp::test
