#include "runtime/delay_line.hpp"

#include <utility>

#include "core/clock.hpp"

namespace rrfp {

DelayLine::DelayLine(std::function<void(std::exception_ptr)> on_error)
    : on_error_(std::move(on_error)), thread_([this] { loop(); }) {}

DelayLine::~DelayLine() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

void DelayLine::post(std::int64_t due, std::function<void()> fn) {
  std::lock_guard lk(mu_);
  const bool earliest = queue_.empty() || due < queue_.top().due;
  queue_.push(Item{due, seq_++, std::move(fn)});
  if (earliest) cv_.notify_one();
}

void DelayLine::clear() {
  std::unique_lock lk(mu_);
  queue_ = {};
  idle_.wait(lk, [this] { return !running_; });
}

void DelayLine::loop() {
  tighten_timer_slack();
  std::unique_lock lk(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const std::int64_t due = queue_.top().due;
    const std::int64_t now = now_ns();
    if (due > now) {
      // condition_variable::wait_for uses the steady clock, as now_ns() does.
      cv_.wait_for(lk, std::chrono::nanoseconds(due - now));
      continue;
    }
    std::function<void()> fn = std::move(const_cast<Item&>(queue_.top()).fn);
    queue_.pop();
    running_ = true;
    lk.unlock();
    try {
      fn();
    } catch (...) {
      if (on_error_) on_error_(std::current_exception());
    }
    lk.lock();
    running_ = false;
    idle_.notify_all();
  }
}

}  // namespace rrfp
