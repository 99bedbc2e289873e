#pragma once
// A condition variable whose waiter may spin before it parks. A thread that hands work to a
// parked thread pays a futex wake, and the parked thread a trip through the scheduler: about
// 7 us between two processes on a 2-core VM (docs/results-speed.md, "The MPI transport's
// hand-off"). A waiter that spins for a while first sees the hand-off as a changed counter,
// and its notifier skips the futex when nobody is parked. Spinning takes a core, so it is
// bounded (`spin_ns`) and yields between looks: with more threads than cores, the thread that
// would hand over may be waiting for this core.
//
// While it spins, the waiter may lend itself to a transport (`poll`, Transport::progress()), so
// that an arrival is delivered on the waiting thread itself: no hand-off at all.
//
// Same contract as std::condition_variable used with a predicate: notify() is called holding
// the mutex the waiter waits with; a wait may return early, so callers re-check their
// condition (the predicate forms do).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace rrfp {

class SpinPark {
 public:
  explicit SpinPark(std::int64_t spin_ns = 0) : spin_ns_(spin_ns) {}
  // Before any thread waits. `poll`: called while spinning, without the lock; true when it
  // moved something (then no yield).
  void set_spin(std::int64_t ns, std::function<bool()> poll = {}) {
    spin_ns_ = ns;
    poll_ = std::move(poll);
  }

  // Holding the waiters' mutex.
  void notify_all() {
    gen_.fetch_add(1, std::memory_order_release);
    if (parked_ > 0) cv_.notify_all();
  }

  // Holding `lk`; returns after a notify_all() since the call, or early.
  void wait(std::unique_lock<std::mutex>& lk) {
    if (spun(lk)) return;
    ++parked_;
    cv_.wait(lk);
    --parked_;
  }

  // Until `pred` holds (true) or `deadline` passes with it false (false).
  template <class Clock, class Duration, class Pred>
  bool wait_until(std::unique_lock<std::mutex>& lk,
                  const std::chrono::time_point<Clock, Duration>& deadline, Pred pred) {
    while (!pred()) {
      if (spun(lk)) continue;
      ++parked_;
      const auto st = cv_.wait_until(lk, deadline);
      --parked_;
      if (st == std::cv_status::timeout) return pred();
    }
    return true;
  }

 private:
  // Spins without the lock until a notify or `spin_ns_`; true when notified meanwhile. The
  // notifier increments under the lock, so a notify after the lock is retaken finds the waiter
  // parked (no lost wake-up).
  bool spun(std::unique_lock<std::mutex>& lk) {
    if (spin_ns_ <= 0) return false;
    const std::uint64_t seen = gen_.load(std::memory_order_relaxed);
    lk.unlock();
    const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(spin_ns_);
    bool changed = false;
    // Yielding at every look measured best on 2 cores with four threads (a yield every 1,024
    // looks was 3x slower than parking at once); on an idle core a yield returns at once.
    while (!(changed = gen_.load(std::memory_order_acquire) != seen) &&
           std::chrono::steady_clock::now() < end) {
      if (poll_ && poll_()) continue;
      relax();
      std::this_thread::yield();
    }
    lk.lock();
    return changed || gen_.load(std::memory_order_relaxed) != seen;
  }

  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::int64_t spin_ns_;
  std::function<bool()> poll_;
  std::atomic<std::uint64_t> gen_{0};
  int parked_ = 0;  // under the waiters' mutex
  std::condition_variable cv_;
};

}  // namespace rrfp
