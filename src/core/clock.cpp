#include "core/clock.hpp"

#include <sys/prctl.h>
#include <time.h>

#include <cerrno>

namespace rrfp {

std::int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void sleep_until_ns(std::int64_t deadline) {
  timespec ts{};
  ts.tv_sec = deadline / 1'000'000'000;
  ts.tv_nsec = deadline % 1'000'000'000;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void spin_until_ns(std::int64_t deadline) {
  while (now_ns() < deadline) {
  }
}

void tighten_timer_slack() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
}

}  // namespace rrfp
