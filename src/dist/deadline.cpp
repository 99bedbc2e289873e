#include "dist/deadline.hpp"

#include <algorithm>

namespace rrfp {

DeadlineGuard::DeadlineGuard(Expiry on_expiry)
    : on_expiry_(std::move(on_expiry)), thread_([this] { watch(); }) {}

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

namespace {

// How often the watcher wakes, and how late a wake must be to count as the process having been
// stopped (Ctrl-Z, SIGSTOP) or not run: that time is no peer's stall. At a second, a stop of 1 s
// (woken 0.75-1 s late) went uncounted, and the stopped process blamed a peer for its own wait.
// It wakes with no phase armed too: a stop between two calls, the others ending for want of
// it meanwhile, is then known at the next call's expiry.
constexpr auto kLook = std::chrono::milliseconds(250);
constexpr auto kSuspended = std::chrono::milliseconds(500);

std::int64_t ms_of(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

void DeadlineGuard::watch() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    const auto now = std::chrono::steady_clock::now();
    const auto first = std::min_element(armed_.begin(), armed_.end(), [](auto& a, auto& b) {
      return a.second.until < b.second.until;
    });
    if (first == armed_.end() || now < first->second.until) {
      const auto asked =
          first == armed_.end() ? now + kLook : std::min(first->second.until, now + kLook);
      cv_.wait_until(lk, asked);
      // Woken half a second or more after it asked: this process was stopped, and the call it
      // guards with it. The deadlines move on by that time: a stopped rank, continued by
      // mpirun to be ended, reported its own gather as a peer's stall beside the true report.
      const auto woke = std::chrono::steady_clock::now();
      if (const auto late = woke - asked; late > kSuspended) {
        last_stop_ = Stop{late, woke};
        for (auto& [id, a] : armed_) {
          a.until += late;
          a.stopped += late;
        }
      }
      continue;  // re-examined: it may have been disarmed, or another armed earlier
    }
    const std::uint64_t id = first->first;
    const Armed late = first->second;
    armed_.erase(id);  // reported once
    Stopped stopped;
    stopped.within_ms = ms_of(late.stopped);
    if (last_stop_) {
      stopped.last_ms = ms_of(last_stop_->length);
      stopped.last_ago_ms = ms_of(now - last_stop_->ended);
    }
    lk.unlock();
    on_expiry_(late.phase, late.deadline_ms, stopped);  // ends the process; a test's may return
    lk.lock();
  }
}

}  // namespace rrfp
