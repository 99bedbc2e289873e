#pragma once
// Monotonic time in nanoseconds, and precise waits for emulated compute and latency.
#include <cstdint>

namespace rrfp {

std::int64_t now_ns();  // CLOCK_MONOTONIC
// Sleeps until an absolute now_ns() deadline (TIMER_ABSTIME: no drift from late wake-ups).
void sleep_until_ns(std::int64_t deadline);
// Busy-waits until the deadline: exact, but it occupies a core.
void spin_until_ns(std::int64_t deadline);
// Lowers this thread's timer slack to 1 ns (Linux defaults to 50 us) so that sleeps end on
// time; emulated tasks of a few milliseconds would otherwise drift by several percent.
void tighten_timer_slack();

}  // namespace rrfp
