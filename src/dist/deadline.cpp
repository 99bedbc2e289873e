#include "dist/deadline.hpp"

#include <algorithm>
#include <atomic>
#include <csignal>
#include <ctime>

namespace rrfp {

namespace {

// When this process was last continued (SIGCONT), in the steady clock's nanoseconds; 0: never.
// Set from the signal handler: clock_gettime and a lock-free atomic are async-signal-safe.
std::atomic<std::int64_t> continued_ns{0};

std::int64_t steady_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // the steady clock's, on Linux
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void note_continued(int) {
  continued_ns.store(steady_ns(), std::memory_order_relaxed);
}

// Once a process, where SIGCONT has no handler of someone else's (SIGCONT's continuing happens
// whatever its handler).
void watch_continues() {
  static const bool installed = [] {
    struct sigaction old {};
    if (::sigaction(SIGCONT, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return false;
    struct sigaction sa {};
    sa.sa_handler = note_continued;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    return ::sigaction(SIGCONT, &sa, nullptr) == 0;
  }();
  (void)installed;
}

}  // namespace

DeadlineGuard::DeadlineGuard(Expiry on_expiry)
    : on_expiry_(std::move(on_expiry)), thread_([this] { watch(); }) {
  watch_continues();
}

DeadlineGuard::~DeadlineGuard() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

DeadlineGuard::Phase::~Phase() {
  if (guard_) guard_->disarm(id_);
}

DeadlineGuard::Phase DeadlineGuard::arm(std::string phase, std::int64_t deadline_ms) {
  // Past 31 years, none: the steady clock's nanoseconds overflowed far beyond (about 292
  // years), and the phase expired at once.
  if (deadline_ms <= 0 || deadline_ms > 1'000'000'000'000) return Phase(nullptr, 0);
  std::uint64_t id = 0;
  {
    std::lock_guard lk(mu_);
    id = next_id_++;
    armed_.emplace(
        id, Armed{std::move(phase), deadline_ms,
                  std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms)});
  }
  cv_.notify_all();
  return Phase(this, id);
}

void DeadlineGuard::disarm(std::uint64_t id) {
  {
    std::lock_guard lk(mu_);
    armed_.erase(id);
  }
  cv_.notify_all();
}

// How often the watcher wakes while a phase is armed, and how late a wake must be to count as
// the process having been stopped (Ctrl-Z, SIGSTOP) or not run: that time is no peer's stall.
// At a second, a stop of 1 s (woken 0.75-1 s late) went uncounted, and the stopped process
// blamed a peer for its own wait.
constexpr auto kLook = std::chrono::milliseconds(250);
constexpr auto kSuspended = std::chrono::milliseconds(500);

void DeadlineGuard::watch() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (armed_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const auto first = std::min_element(armed_.begin(), armed_.end(), [](auto& a, auto& b) {
      return a.second.until < b.second.until;
    });
    // A copy: the entry may be erased (disarmed) while this thread waits on it.
    const auto until = first->second.until;
    if (const auto now = std::chrono::steady_clock::now(); now < until) {
      const auto asked = std::min(until, now + kLook);
      cv_.wait_until(lk, asked);
      // Woken a second or more after it asked: this process was stopped, and the call it
      // guards with it. The deadlines move on by that time: a stopped rank, continued by
      // mpirun to be ended, reported its own gather as a peer's stall beside the true report.
      if (const auto late = std::chrono::steady_clock::now() - asked; late > kSuspended)
        for (auto& [id, a] : armed_) {
          a.until += late;
          a.stopped += late;
        }
      continue;  // re-examined: it may have been disarmed, or another armed earlier
    }
    const std::uint64_t id = first->first;
    const Armed late = first->second;
    armed_.erase(id);  // reported once
    lk.unlock();
    Stopped stopped;
    stopped.within_ms = std::chrono::duration_cast<std::chrono::milliseconds>(late.stopped).count();
    if (const std::int64_t at = continued_ns.load(std::memory_order_relaxed); at > 0)
      stopped.continued_ago_ms = (steady_ns() - at) / 1'000'000;
    on_expiry_(late.phase, late.deadline_ms, stopped);  // ends the process; a test's may return
    lk.lock();
  }
}

}  // namespace rrfp
