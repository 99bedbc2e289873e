#include "sim/shared_links.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace rrfp {

SharedLinks::SharedLinks(double capacity) : capacity_(capacity) {
  if (!(capacity >= 1))
    throw InputError("shared links: capacity must be at least 1 transfer's rate, got " +
                     std::to_string(capacity));
}

double SharedLinks::rate() const {
  return std::min(1.0, capacity_ / static_cast<double>(flows_.size()));
}

void SharedLinks::advance(std::int64_t now) {
  if (now > at_ && !flows_.empty()) {
    const double done = static_cast<double>(now - at_) * rate();
    for (Flow& f : flows_)
      f.left_ns -= done;
  }
  at_ = std::max(at_, now);
}

void SharedLinks::add(std::int64_t now, std::int64_t work_ns, int token) {
  advance(now);
  flows_.push_back(Flow{static_cast<double>(work_ns), token});
  ++version_;
}

std::optional<std::int64_t> SharedLinks::next_end() const {
  if (flows_.empty()) return std::nullopt;
  double least = flows_.front().left_ns;
  for (const Flow& f : flows_)
    least = std::min(least, f.left_ns);
  // Up to the nanosecond: a transfer never ends before its work is done.
  return at_ + static_cast<std::int64_t>(std::ceil(std::max(0.0, least) / rate()));
}

std::vector<int> SharedLinks::finish(std::int64_t now) {
  advance(now);
  // What would end within the next nanosecond ends now: the times are whole nanoseconds, and
  // equal transfers that joined together end together despite rounding.
  const double r = rate();
  std::vector<int> done;
  auto ended = [&](const Flow& f) { return f.left_ns < r; };
  for (const Flow& f : flows_)
    if (ended(f)) done.push_back(f.token);
  std::erase_if(flows_, ended);
  ++version_;
  return done;
}

}  // namespace rrfp
