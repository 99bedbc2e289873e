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
  if (moving_.size() <= 1) return 1;
  return std::min({1.0, capacity_ / static_cast<double>(moving_.size()), 1 / two_slowdown_});
}

void SharedLinks::advance(std::int64_t now) {
  if (moving_.empty())
    done_ = 0;
  else if (now > at_)
    done_ += static_cast<double>(now - at_) * rate();
  at_ = std::max(at_, now);
}

void SharedLinks::start(double work_ns, std::uint64_t seq, int token, int queue) {
  moving_.push_back(Moving{done_ + work_ns, seq, token, queue});
  std::push_heap(moving_.begin(), moving_.end(), later);
}

void SharedLinks::add(std::int64_t now, std::int64_t work_ns, int token, int queue) {
  advance(now);
  const std::uint64_t seq = joined_++;
  if (queue >= 0) {
    Queue& q = queues_[queue];
    if (q.moving >= 0) {
      q.behind.push_back(Waiting{static_cast<double>(work_ns), seq, token});
      ++waiting_;
      ++version_;
      return;
    }
    q.moving = token;
  }
  start(static_cast<double>(work_ns), seq, token, queue);
  ++version_;
}

int SharedLinks::moving_token(int queue) const {
  const auto q = queues_.find(queue);
  return q == queues_.end() ? -1 : q->second.moving;
}

std::optional<std::int64_t> SharedLinks::next_end() const {
  if (moving_.empty()) return std::nullopt;
  const double least = moving_.front().end - done_;
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
  std::vector<Moving> ended;
  while (!moving_.empty() && moving_.front().end - done_ < r) {
    std::pop_heap(moving_.begin(), moving_.end(), later);
    ended.push_back(moving_.back());
    moving_.pop_back();
  }
  std::sort(ended.begin(), ended.end(),
            [](const Moving& a, const Moving& b) { return a.seq < b.seq; });
  if (moving_.empty()) done_ = 0;
  std::vector<int> done;
  done.reserve(ended.size());
  for (const Moving& m : ended) {
    done.push_back(m.token);
    if (m.queue < 0) continue;
    Queue& q = queues_[m.queue];
    if (q.behind.empty()) {
      q.moving = -1;
      continue;
    }
    // The next of its queue moves from now, its whole work ahead of it.
    const Waiting next = q.behind.front();
    q.behind.pop_front();
    --waiting_;
    q.moving = next.token;
    start(next.work_ns, next.seq, next.token, m.queue);
  }
  ++version_;
  return done;
}

}  // namespace rrfp
