#include "sim/shared_links.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "core/format.hpp"

namespace rrfp {

SharedLinks::SharedLinks(double capacity, double two_slowdown)
    : capacity_(capacity), two_slowdown_(two_slowdown) {
  if (!(capacity >= 1))
    throw InputError("shared links: capacity must be at least 1 transfer's rate, got " +
                     std::to_string(capacity));
  if (!(two_slowdown >= 1 && two_slowdown <= 64))
    throw InputError("shared links: two_slowdown must be within [1, 64], got " +
                     std::to_string(two_slowdown));
}

double SharedLinks::rate() const {
  if (moving_ <= 1) return 1;
  return std::min({1.0, capacity_ / static_cast<double>(moving_), 1 / two_slowdown_});
}

void SharedLinks::advance(std::int64_t now) {
  if (now > at_ && moving_ > 0) {
    const double done = static_cast<double>(now - at_) * rate();
    for (Flow& f : flows_)
      if (f.moving) f.left_ns -= done;
  }
  at_ = std::max(at_, now);
}

void SharedLinks::start_heads() {
  moving_ = 0;
  std::vector<int> seen;  // queues with a flow ahead, each once: a handful of processes
  for (Flow& f : flows_) {
    f.moving = f.queue < 0 || std::find(seen.begin(), seen.end(), f.queue) == seen.end();
    // Once: pushed for each of a queue's flows, the search made a call n^2 in its flows.
    if (f.queue >= 0 && f.moving) seen.push_back(f.queue);
    moving_ += f.moving;
  }
}

void SharedLinks::add(std::int64_t now, std::int64_t work_ns, int token, int queue) {
  advance(now);
  flows_.push_back(Flow{static_cast<double>(work_ns), token, queue, false});
  start_heads();
  ++version_;
}

bool SharedLinks::moving(int queue) const {
  return std::any_of(flows_.begin(), flows_.end(),
                     [&](const Flow& f) { return f.queue == queue && f.moving; });
}

std::optional<std::int64_t> SharedLinks::next_end() const {
  if (moving_ == 0) return std::nullopt;
  double least = std::numeric_limits<double>::infinity();
  for (const Flow& f : flows_)
    if (f.moving) least = std::min(least, f.left_ns);
  // Up to the nanosecond: a transfer never ends before its work is done. An end past 2^63 ns
  // wrapped negative, and the step's clock went back and looped forever: refused instead.
  const double after = std::ceil(std::max(0.0, least) / rate());
  constexpr double kLimit = 9.2e18;  // below 2^63, and exact as a double
  if (!(after <= kLimit - static_cast<double>(at_)))
    throw InputError("shared links: a transfer would end " + fmt("%.4g", after) + " ns after " +
                     std::to_string(at_) +
                     " ns, past the simulation's clock (2^63 ns, 292 years): lower " +
                     "the messages' sizes, comm_two_slowdown or the microbatches");
  return at_ + static_cast<std::int64_t>(after);
}

std::vector<int> SharedLinks::finish(std::int64_t now) {
  advance(now);
  // What would end within the next nanosecond ends now: the times are whole nanoseconds, and
  // equal transfers that joined together end together despite rounding.
  const double r = rate();
  std::vector<int> done;
  auto ended = [&](const Flow& f) { return f.moving && f.left_ns < r; };
  for (const Flow& f : flows_)
    if (ended(f)) done.push_back(f.token);
  std::erase_if(flows_, ended);
  start_heads();
  ++version_;
  return done;
}

}  // namespace rrfp
