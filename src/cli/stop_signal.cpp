#include "cli/stop_signal.hpp"

#include <unistd.h>

#include <csignal>

#include "cli/options.hpp"

namespace rrfp {

namespace {

std::atomic<int> g_stop{0};
// exit_on_signals: whether the outputs are being written, and the lines its handler writes for
// SIGINT and SIGTERM, built before it is installed (a handler may not allocate).
std::atomic<bool> g_writing{false};
std::string g_exit_lines[2];
std::string g_command;

void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) ::_exit(128 + sig);  // async-signal-safe, both
}

void on_exit_signal(int sig) {
  if (g_writing.load() && g_stop.exchange(sig) == 0) return;  // heeded once they are written
  const std::string& line = g_exit_lines[sig == SIGTERM ? 1 : 0];
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  ::_exit(128 + sig);
}

void install(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sa.sa_flags = SA_RESTART;  // a write interrupted by the signal goes on
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);  // a background job's stays
  }
}

}  // namespace

std::atomic<int>& stop_on_signals() {
  install(on_stop_signal);
  return g_stop;
}

void exit_on_signals(const std::string& command) {
  g_command = command;
  for (int sig : {SIGINT, SIGTERM})
    g_exit_lines[sig == SIGTERM ? 1 : 0] =
        "rrfp " + command + ": stopped by " + signal_name(sig) + "; nothing written\n";
  install(on_exit_signal);
}

void write_then_heed_signals(const std::function<void()>& write) {
  g_writing.store(true);
  try {
    write();
  } catch (...) {
    g_writing.store(false);
    throw;
  }
  g_writing.store(false);
  if (const int sig = g_stop.load()) {
    print_line("rrfp " + g_command + ": stopped by " + signal_name(sig) +
               " while its outputs were written; they are complete");
    throw QuietExit{128 + sig};
  }
}

std::atomic<int>& stop_flag() {
  return g_stop;
}

std::string signal_name(int sig) {
  if (sig == SIGINT) return "SIGINT";
  if (sig == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(sig);
}

}  // namespace rrfp
