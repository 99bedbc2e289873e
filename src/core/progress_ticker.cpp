#include "core/progress_ticker.hpp"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/clock.hpp"

namespace rrfp {

namespace {

constexpr std::int64_t kSecondNs = 1'000'000'000;

}  // namespace

ProgressTicker::ProgressTicker(std::string what, bool shown, ProgressLog* log, std::FILE* out)
    : line_(shown, log, out),
      start_ns_(now_ns()),
      period_ns_(std::min(
          kSecondNs, std::max<std::int64_t>(
                         (log != nullptr ? log->every_ns : ProgressLog::kEveryNs) / 4, 1'000'000))),
      what_(std::move(what)) {
  if (!shown) return;
  try {
    thread_ = std::thread([this] { loop(); });
  } catch (const std::system_error&) {  // a thread limit: the work goes on without its line
  }
}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  line_.finish();
}

void ProgressTicker::status(std::string what) {
  std::lock_guard<std::mutex> lock(mu_);
  what_ = std::move(what);
  describe_ = nullptr;
}

void ProgressTicker::status(std::function<std::string()> describe) {
  std::lock_guard<std::mutex> lock(mu_);
  describe_ = std::move(describe);
}

void ProgressTicker::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  what_.clear();
  describe_ = nullptr;
  line_.finish();
}

void ProgressTicker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, std::chrono::nanoseconds(period_ns_), [this] { return stop_; })) {
    if (!line_.due()) continue;
    if (describe_) {
      if (const std::string text = describe_(); !text.empty()) line_.show(text);
      continue;
    }
    if (what_.empty()) continue;  // idle()
    // On a terminal the seconds show it is alive; a log's line carries the process's time.
    const std::string text =
        line_.terminal() ? what_ + " (" + std::to_string((now_ns() - start_ns_) / kSecondNs) + " s)"
                         : what_;
    line_.show(text);
  }
}

}  // namespace rrfp
