#pragma once
// The shared fate of one step: the first error wins and is rethrown to the caller (later
// ones are consequences); every thread polls failed() at its wait points. fail() only takes
// a leaf lock, so it is safe to call while holding any other lock; the runtime's own thread
// then wakes everyone.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>

#include "core/clock.hpp"

namespace rrfp {

class FailureState {
 public:
  // Back to a clean state for the next step (no worker may be running).
  void reset() {
    std::lock_guard lk(mu_);
    error_ = nullptr;
    send_error_ = nullptr;
    failed_.store(false);
    done_ = 0;
  }
  void fail(std::exception_ptr e) {
    std::lock_guard lk(mu_);
    if (!error_) {
      error_ = std::move(e);
      failed_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  // A send the transport failed (the peer exited, its connection broke): the step fails with
  // it, and its peers are told of a broken transport, as for a failed receive. Told as a stall,
  // a killed process's neighbour raised RuntimeError in Python and the next one TimeoutError.
  void fail_send(std::exception_ptr e) {
    {
      std::lock_guard lk(mu_);
      if (!send_error_) send_error_ = e;
    }
    fail(std::move(e));
  }
  bool failed_by_send(const std::exception_ptr& e) const {
    std::lock_guard lk(mu_);
    return e && e == send_error_;
  }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::exception_ptr error() const {
    std::lock_guard lk(mu_);
    return error_;
  }

  // Progress for the watchdog (any task start or end, any arrival): when it last happened. The
  // time is taken here, not when the watchdog next looks, so that of the ranks a lost peer
  // stalls, those waiting on it directly (stalled first) are the first to report.
  void bump() { last_ns_.store(now_ns(), std::memory_order_relaxed); }
  std::int64_t last_progress_ns() const { return last_ns_.load(std::memory_order_relaxed); }

  // Workers report their exit so the runtime's thread can stop waiting.
  void worker_done() {
    std::lock_guard lk(mu_);
    ++done_;
    cv_.notify_all();
  }
  // Waits up to `timeout_ns` for `workers` exits or a failure; true when one happened.
  bool wait(int workers, std::int64_t timeout_ns) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::nanoseconds(timeout_ns),
                        [&] { return error_ || done_ >= workers; });
  }
  int done() const {
    std::lock_guard lk(mu_);
    return done_;
  }

 private:
  mutable std::mutex mu_;  // leaf: never held while taking another lock
  std::condition_variable cv_;
  std::exception_ptr error_;
  std::exception_ptr send_error_;  // the step's first failed send
  std::atomic<bool> failed_{false};
  std::atomic<std::int64_t> last_ns_{0};
  int done_ = 0;
};

}  // namespace rrfp
