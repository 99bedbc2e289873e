#pragma once
// Progress for work that reports none of its own while it runs (a sweep's grid point of
// minutes, a plan's set-up, a calibration's round trips): a thread of its own shows what is
// under way, on a terminal redrawn every second with the seconds it has taken, into a file or
// a pipe at the log's interval (core/progress_line.hpp). Its owner only says what is under way,
// or how to tell.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/progress_line.hpp"

namespace rrfp {

class ProgressTicker {
 public:
  // `shown` false: nothing (--quiet). `log` and `out`: the process's and stderr unless a test
  // gives others. Where no thread can be started it shows nothing: progress is no reason to fail.
  explicit ProgressTicker(std::string what, bool shown = true, ProgressLog* log = nullptr,
                          std::FILE* out = nullptr);
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;
  // Stops the thread; on a terminal its line is erased.
  ~ProgressTicker();

  // What is under way now ("sweep: 3/10 grid points").
  void status(std::string what);
  // What is under way, asked each time a line falls due, "" where there is nothing to show yet
  // (a training step's tasks done, once it has run long): shown as it says, without the
  // ticker's seconds.
  void status(std::function<std::string()> describe);
  // Nothing under way: a line drawn on a terminal is erased now, before its owner draws there.
  void idle();

 private:
  void loop();

  ProgressLine line_;
  std::int64_t start_ns_;
  std::int64_t period_ns_;  // how often the thread looks: a second, or less for a short log
  std::mutex mu_;
  std::condition_variable cv_;
  std::string what_;
  std::function<std::string()> describe_;  // set: asked instead of what_
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rrfp
