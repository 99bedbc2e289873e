#include "cli/stop_signal.hpp"

#include <unistd.h>
#include <csignal>

namespace rrfp {

namespace {

std::atomic<int> g_stop{0};

void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) ::_exit(128 + sig);  // async-signal-safe, both
}

}  // namespace

std::atomic<int>& stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sa.sa_flags = SA_RESTART;  // a write interrupted by the signal goes on
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    ::sigaction(sig, nullptr, &old);
    if (old.sa_handler != SIG_IGN) ::sigaction(sig, &sa, nullptr);  // a background job's stays
  }
  return g_stop;
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
