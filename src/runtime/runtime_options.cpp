// The runtime's options checked, and the watchdog's timeouts read, each refusal naming the
// option.
#include <cmath>
#include <string>

#include "core/error.hpp"
#include "core/format.hpp"
#include "core/modes.hpp"
#include "runtime/runtime.hpp"

namespace rrfp {

void validate(const RuntimeOptions& o) {
  checked_tp(o.tp);
  // Far beyond a day, the watchdog's nanoseconds overflowed and every step failed at its first
  // look.
  check_timeout_ms(o.timeout_ms);
  if (o.window < 1 || o.window > 64)
    throw InputError("`window`: must be between 1 and 64, got " + std::to_string(o.window));
  if (o.window > 1 && o.tp > 1)
    throw InputError("`window`: more than 1 needs `tp` 1 (a group agrees on one task at a time)");
  if (o.idle_spin_us < 0 || o.idle_spin_us > 10'000)
    throw InputError("`idle_spin_us`: must be between 0 and 10000, got " +
                     std::to_string(o.idle_spin_us));
  if (o.rendezvous_pull && o.latency)
    throw InputError(
        "`rendezvous_pull`: only without emulated latency (a transport that moves the bytes)");
}

void check_timeout_ms(std::int64_t ms, const char* name) {
  if (ms < 0 || ms > 86'400'000)
    throw InputError(std::string(name) + ": must be between 0 and 86400000 ms (a day), got " +
                     std::to_string(ms) + " ms");
}

std::int64_t timeout_ms_of(double seconds, const char* name) {
  // A day is far past any step; far beyond it the conversion to ns would overflow.
  if (!(seconds >= 0 && seconds <= 86'400))
    throw InputError(std::string(name) + ": must be between 0 and 86400 seconds, got " +
                     fmt_given(seconds));
  // Only 0 means never: a positive timeout under half a millisecond rounded to 0 and turned the
  // watchdog off (a job with a stopped rank then hung); rounded up to 1 ms instead, its stall
  // was reported against a `timeout` 0.001 s the user never gave.
  if (seconds > 0 && seconds < 0.001)
    throw InputError(std::string(name) +
                     ": must be 0 (no limit) or at least 0.001 seconds (the watchdog counts "
                     "milliseconds), got " +
                     fmt_given(seconds));
  return std::llround(seconds * 1000);
}

}  // namespace rrfp
