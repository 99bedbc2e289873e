#pragma once
// A long command's progress on stderr. On a terminal: one line redrawn in place each time the
// caller has news, erased at the end. Into a file or a pipe (nohup, a batch job, CI): a plain
// line at most every 30 s of the process, after the time since it started, so that a run of
// minutes says it is alive and how far it got without filling its log (a sweep of ten minutes
// under nohup said nothing until it ended), and a short run writes nothing there at all. The
// interval is the process's, not a line's: a command of four runs of 25 s each gives lines too.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <string>

namespace rrfp {

// When a log's lines fall due. One for the process (ProgressLine's default), started with it;
// a test makes its own.
struct ProgressLog {
  static constexpr std::int64_t kEveryNs = 30'000'000'000;
  explicit ProgressLog(std::int64_t every_ns = kEveryNs);
  std::int64_t every_ns;
  std::int64_t start_ns;
  std::atomic<std::int64_t> last_ns;  // the last line's time (at first, the start)
};

// Ends a progress line left drawn on stderr's terminal, so that a line written now starts at
// its left edge (a signal's line was appended to the drawn one: "...(2 s)rrfp plan: SIGINT
// taken"). Async-signal-safe: a signal handler calls it before its own line.
void clear_progress_line_on_stderr();

class ProgressLine {
 public:
  // `shown` false: it prints nothing (--quiet). `log` and `out`: the process's and stderr
  // unless a test gives others.
  explicit ProgressLine(bool shown = true, ProgressLog* log = nullptr, std::FILE* out = nullptr);
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { finish(); }

  bool terminal() const { return tty_; }
  // Whether show() would print now: on a terminal whenever the caller redraws, in a log once
  // its interval has passed. Callers ask first, so that a line not shown is not built either.
  bool due(bool redraw = true) const;
  // Shows `text` if due().
  void show(const std::string& text);
  // On a terminal, erases the line shown last (if any); the next show() starts a new one.
  void finish();

 private:
  ProgressLog& log_;
  std::FILE* out_;
  bool shown_, tty_;
  bool open_ = false;  // a terminal line drawn and not yet erased
};

}  // namespace rrfp
