// Lining up the clocks of a job's processes (Job::clock_offset). Each process times its step
// from its own start after a barrier; the processes leave a barrier up to milliseconds apart, so
// a merged record needs their clocks, not their starts, to agree.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <string>

#include "core/clock.hpp"
#include "dist/job.hpp"

namespace rrfp {

namespace {

constexpr std::size_t kClockIdBytes = 96;
constexpr int kRounds = 8;

std::vector<std::byte> bytes_of(std::span<const std::int64_t> v) {
  const auto* p = reinterpret_cast<const std::byte*>(v.data());
  return {p, p + v.size_bytes()};
}

std::int64_t value_at(const std::vector<std::byte>& b, std::size_t i) {
  std::int64_t v = 0;
  if (b.size() >= (i + 1) * sizeof v) std::memcpy(&v, b.data() + i * sizeof v, sizeof v);
  return v;
}

// Endpoint 0 and endpoint `e` (both call it) measure e's clock against endpoint 0's. A round:
// endpoint 0 sends t1, its time, which e receives by t2 (e's time): offset <= t2 - t1. Then e
// sends t3 and endpoint 0 receives it by t4: offset >= t3 - t4. Waiting anywhere only widens
// a round's bounds, never breaks them; endpoint 0 tells e the result.
ClockOffset measure_pair(Job& job, int e) {
  const bool first = job.endpoint() == 0;
  const std::array<int, 2> peers{0, e};
  std::int64_t low = std::numeric_limits<std::int64_t>::min();
  std::int64_t high = std::numeric_limits<std::int64_t>::max();
  std::int64_t best_trip = std::numeric_limits<std::int64_t>::max(), best_mid = 0;
  for (int k = 0; k < kRounds; ++k) {
    const std::int64_t t1 = now_ns();
    const std::int64_t sent_t1[] = {t1};
    job.exchange(first ? bytes_of(sent_t1) : std::vector<std::byte>{}, peers);
    const std::int64_t t2 = now_ns();
    const std::int64_t sent_t2[] = {t2, now_ns()};
    const auto got = job.exchange(first ? std::vector<std::byte>{} : bytes_of(sent_t2), peers);
    const std::int64_t t4 = now_ns();
    if (!first) continue;
    const std::int64_t r2 = value_at(got[1], 0), r3 = value_at(got[1], 1);
    high = std::min(high, r2 - t1);
    low = std::max(low, r3 - t4);
    // Should the clocks drift apart within the rounds, the bounds may cross: then the round
    // with the shortest trip, alone, gives the answer.
    const std::int64_t trip = (t4 - t1) - (r3 - r2);
    if (trip < best_trip) {
      best_trip = trip;
      best_mid = ((r2 - t1) + (r3 - t4)) / 2;
    }
  }
  std::array<std::int64_t, 2> result{};
  if (first) {
    result = low <= high ? std::array<std::int64_t, 2>{low + (high - low) / 2, (high - low + 1) / 2}
                         : std::array<std::int64_t, 2>{best_mid, (best_trip + 1) / 2};
  }
  const auto told = job.exchange(first ? bytes_of(result) : std::vector<std::byte>{}, peers);
  return {value_at(told[0], 0), value_at(told[0], 1)};
}

}  // namespace

std::vector<std::byte> this_clock_id() {
  std::string id;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  if (!std::getline(boot, id) || id.empty()) {
    std::array<char, 256> host{};
    if (gethostname(host.data(), host.size() - 1) == 0) id = "host " + std::string(host.data());
  }
  id.resize(kClockIdBytes, '\0');
  const auto* p = reinterpret_cast<const std::byte*>(id.data());
  return {p, p + id.size()};
}

ClockOffset measure_clock_offset(Job& job, std::span<const std::byte> clock_id) {
  const auto ids = job.replica_all_gather(clock_id);
  const int me = job.endpoint();
  ClockOffset mine;
  for (int e = 1; e < static_cast<int>(ids.size()); ++e) {
    if (ids[e] == ids[0]) continue;  // endpoint 0's clock: nothing to measure
    if (me == 0 || me == e) {
      const ClockOffset got = measure_pair(job, e);
      if (me == e) mine = got;
    }
  }
  return mine;
}

const ClockOffset& Job::clock_offset() {
  if (!clock_offset_) clock_offset_ = measure_clock_offset(*this, this_clock_id());
  return *clock_offset_;
}

}  // namespace rrfp
