#include "core/progress_line.hpp"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <ctime>

#include "core/clock.hpp"
#include "core/output_file.hpp"

namespace rrfp {

namespace {

// Started as the process loads, so that the first line of a log comes 30 s into the command.
ProgressLog process_log;

// Whether a line is drawn on stderr's terminal and not yet ended: read by signal handlers.
std::atomic<bool> stderr_line_open{false};
static_assert(std::atomic<bool>::is_always_lock_free);

std::string elapsed(std::int64_t ns) {
  const long long s = ns / 1'000'000'000;
  char text[48];
  if (s < 60)
    std::snprintf(text, sizeof text, "%lld s", s);
  else if (s < 3600)
    std::snprintf(text, sizeof text, "%lld min %02lld s", s / 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%lld h %02lld min", s / 3600, s / 60 % 60);
  return text;
}

// Runs `write` with SIGPIPE held back in this thread, and drops one it raised: a progress line
// whose reader is gone (`2>&1 | head -1`) took SIGPIPE's default action, and a sweep 47 grid
// points into 60 ended at its first line into the pipe, exit 141, with nothing written. The line
// is lost; the work and its files go on (a write to stdout still raises it: the command's
// report, or `train`'s request to stop).
template <class Write>
void without_sigpipe(Write write) {
  sigset_t pipe, old, pending;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe, &old);
  write();
  if (!sigismember(&old, SIGPIPE) && ::sigpending(&pending) == 0 &&
      sigismember(&pending, SIGPIPE)) {
    const timespec now{};
    ::sigtimedwait(&pipe, nullptr, &now);  // the one this write raised
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void clear_progress_line_on_stderr() {
  if (!stderr_line_open.exchange(false)) return;
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, "\r\033[K", 4);
}

ProgressLog::ProgressLog(std::int64_t every)
    : every_ns(every), start_ns(now_ns()), last_ns(start_ns) {}

ProgressLine::ProgressLine(bool shown, ProgressLog* log, std::FILE* out)
    : log_(log != nullptr ? *log : process_log),
      out_(out != nullptr ? out : stderr),
      shown_(shown),
      tty_(shown && is_terminal(::fileno(out_))) {}

bool ProgressLine::due(bool redraw) const {
  if (!shown_) return false;
  if (tty_) return redraw;
  return now_ns() - log_.last_ns.load(std::memory_order_relaxed) >= log_.every_ns;
}

void ProgressLine::show(const std::string& text) {
  if (!due()) return;
  if (tty_) {
    // Said open before it is drawn: a signal in between found it closed, and its line joined
    // the drawn one (at worst now a signal's line is followed by this one, on a line of its own).
    if (out_ == stderr) stderr_line_open.store(true);
    open_ = true;
    // Cleared after the text: a shorter line left the longer one's tail.
    without_sigpipe([&] {
      std::fprintf(out_, "\r%s\033[K", text.c_str());
      std::fflush(out_);
    });
  } else {
    // Of two threads due at once, one writes the line.
    std::int64_t last = log_.last_ns.load(std::memory_order_relaxed);
    const std::int64_t now = now_ns();
    if (!log_.last_ns.compare_exchange_strong(last, now, std::memory_order_relaxed)) return;
    without_sigpipe([&] {
      std::fprintf(out_, "[%s] %s\n", elapsed(now - log_.start_ns).c_str(), text.c_str());
      std::fflush(out_);
    });
  }
}

void ProgressLine::finish() {
  if (!open_) return;
  if (out_ == stderr) stderr_line_open.store(false);
  without_sigpipe([&] {
    std::fprintf(out_, "\r\033[K");
    std::fflush(out_);
  });
  open_ = false;
}

}  // namespace rrfp
